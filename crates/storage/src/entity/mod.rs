//! Hand-written sea-orm entities, one module per table created by
//! `qiwu-migrations`. Timestamps are `i64` milliseconds since the Unix epoch
//! (see [`crate::time`] for the conversion); JSON lives in `TEXT` columns.

pub mod alert_channel;
pub mod alert_window;
pub mod api_key;
pub mod audit_log;
pub mod backfill;
pub mod calendar;
pub mod calendar_date;
pub mod fire;
pub mod freeze;
pub mod instance;
pub mod job;
pub mod job_group;
pub mod notification;
pub mod notification_template;
pub mod outbox;
pub mod run;
pub mod run_job_name;
pub mod run_once_key;
pub mod seed_marker;
pub mod setting;
