//! The root crate's integration tests, in one test binary: one module per
//! topic, sharing `common` (servers, databases, tokens, waits) and
//! `observe` (receivers, a metrics parser). One binary links once, and
//! every helper is used by some module, so none needs `allow(dead_code)`.
//! Run one module with `cargo test --test it cluster::`.

mod common;
mod observe;

mod alerts;
mod api;
mod api_keys;
mod backfill;
mod calendar_alerts;
mod calendars;
mod cluster;
mod engine;
mod faults;
mod freezes;
mod http_contract;
mod monitoring;
mod notify;
mod observability;
mod pause;
mod remote_handlers;
mod rules;
mod run_control;
mod run_once;
mod runlog;
mod secret_rotation;
mod serve;
mod time_rules;
