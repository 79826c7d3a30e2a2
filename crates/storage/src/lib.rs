//! Persistence for Qiwu Scheduler over sea-orm: one [`Store`] per process,
//! hand-written entities for every table, and repositories that turn rows into
//! records. Works unchanged on SQLite, PostgreSQL and MySQL/MariaDB.

mod audit;
pub mod entity;
mod error;
mod groups;
mod jobs;
mod keyset;
mod runs;
mod store;
pub mod timestamp;

pub use audit::{AuditCursor, AuditFilter, AuditRecord, AuditRepo, NewAudit};
pub use error::StorageError;
pub use groups::{GroupRecord, GroupRepo};
pub use jobs::{JobFilter, JobRecord, JobRepo, NewJob};
pub use runs::{EXPORT_ERROR_CHARS, RunCursor, RunExportRow, RunFilter, RunRecord, RunRepo};
pub use sea_orm::DatabaseConnection;
pub use store::{Backend, Store};
