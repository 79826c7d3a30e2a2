//! Timers, claims and execution of Qiwu Scheduler, and the built-in
//! handlers compiled into the service.

pub mod clock;
pub mod context;
mod error;
pub mod handlers;
pub mod timer;

pub use error::WorkerError;
