//! HTTP handlers: extract, call, map the error. Nothing else lives here.

pub mod alert_channels;
pub mod api_keys;
pub mod audit_logs;
pub mod backfill;
pub mod calendars;
pub mod cron;
pub mod fires;
pub mod freezes;
pub mod groups;
pub mod handlers;
pub mod health;
pub mod job_export;
pub mod jobs;
pub mod notifications;
pub mod runs;
pub mod settings;
pub mod templates;
