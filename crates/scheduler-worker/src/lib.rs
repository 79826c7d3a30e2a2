//! Timers, claims and execution of Qiwu Scheduler, and the built-in
//! handlers compiled into the service.

mod ahead;
pub mod alerts;
mod backfill;
mod calendar_alerts;
pub mod callbacks;
mod cancels;
mod claimer;
pub mod clock;
pub mod cluster;
pub mod context;
pub mod engine;
#[cfg(test)]
mod engine_tests;
mod error;
mod fire;
mod freezes;
pub mod handlers;
mod lease;
mod observe;
mod recorder;
mod resumes;
mod schedules;
pub mod seed;
#[cfg(test)]
mod test_support;
mod texts;
pub mod timer;

pub use alerts::{TimeoutAlert, raise_timeout_alert};
pub use cluster::{ClusterConfig, DbClock};
pub use engine::{
    Command, Engine, EngineConfig, EngineHandle, EngineStatus, OnTimeout, TimeoutInfo,
};
pub use error::WorkerError;
pub use seed::seed_builtin_jobs;
