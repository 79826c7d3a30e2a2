//! HTTP handlers: extract, call, map the error. Nothing else lives here.

pub mod cron;
pub mod fires;
pub mod groups;
pub mod handlers;
pub mod health;
pub mod jobs;
