//! Timers, claims and execution of Qiwu Scheduler, and the built-in
//! handlers compiled into the service.

pub mod alerts;
pub mod clock;
pub mod cluster;
pub mod context;
pub mod engine;
mod error;
mod executor;
pub mod handlers;
pub mod seed;
#[cfg(test)]
mod test_support;
pub mod timer;

pub use alerts::{TimeoutAlert, raise_timeout_alert};
pub use cluster::{ClusterConfig, DbClock};
pub use engine::{Command, Engine, EngineConfig, EngineHandle, OnTimeout, TimeoutInfo};
pub use error::WorkerError;
pub use seed::seed_builtin_jobs;
