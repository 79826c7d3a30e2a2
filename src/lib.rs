//! Qiwu Scheduler's application crate: configuration from the environment
//! and the file `QIWU_CONFIG`, and [`app::App`], which wires the library
//! crates into one running role. The binary (`main.rs`) parses the command
//! line and calls it; tests may build an `App` in their own process.

pub mod app;
pub mod config;
pub mod config_file;
pub mod healthcheck;
