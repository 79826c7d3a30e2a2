//! HTTP handlers: extract, call, map the error. Nothing else lives here.

pub mod cron;
pub mod groups;
pub mod handlers;
pub mod health;
pub mod jobs;
pub mod notifications;
pub mod settings;
pub mod templates;
