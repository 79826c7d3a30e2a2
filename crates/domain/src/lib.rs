//! Pure scheduling rules of Qiwu Scheduler: the cron dialect and its
//! descriptions, calendars and schedules, job validation, params schemas and
//! handler descriptors.
//!
//! Nothing here does IO or reads a clock: time is always a parameter, so every
//! rule can be tested with plain values.

pub mod alert;
pub mod backfill;
pub mod builtin;
pub mod calendar;
pub mod cron;
pub mod freeze;
pub mod lang;

pub use cron::{CronError, CronExpr, FieldKind, FieldProblem};
pub use lang::Lang;
pub mod handler;
pub mod job;
pub mod misfire;
pub mod notify;
pub mod params;
pub mod pause;
pub mod retry;
pub mod run;
pub mod run_once;
pub mod schedule;
pub mod settings;

pub use calendar::{Calendar, CalendarRule, DayKind};
pub use handler::{HandlerCatalog, HandlerDescriptor, HandlerError};
pub use job::{FieldError, JobProblem, JobSpec, MisfirePolicy, OverlapPolicy, TimeRules};
pub use misfire::{MissReason, Missed};
pub use params::{ParamError, ParamProblem};
pub use params::{ParamsSchema, SchemaError};
pub use retry::{RetryBackoff, RetryTiming};
pub use run::{RunStatus, Trigger};
pub use schedule::Schedule;
