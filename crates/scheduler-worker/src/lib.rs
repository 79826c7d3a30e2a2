//! Timers, claims and execution of Qiwu Scheduler, and the built-in
//! handlers compiled into the service.

pub mod context;
pub mod handlers;
