//! Persistence for Qiwu Scheduler over sea-orm: one [`Store`] per process,
//! hand-written entities for every table, and repositories that turn rows into
//! records. Works unchanged on SQLite, PostgreSQL and MySQL/MariaDB.

pub mod entity;
mod error;
mod fires;
mod groups;
mod jobs;
mod notifications;
mod purge;
mod seeds;
mod settings;
mod store;
pub mod timestamp;

pub use error::StorageError;
pub use fires::{FireClaim, FireRepo, PendingFire, RunEnd, RunStart, RunStatus, Trigger};
pub use groups::{GroupRecord, GroupRepo};
pub use jobs::{JobFilter, JobRecord, JobRepo, NewJob};
pub use notifications::{
    NewNotification, NotificationCursor, NotificationPage, NotificationRecord, NotificationRepo,
    OUTBOX_MAX_ATTEMPTS, OutboxRecord, OutboxRepo, OutboxStatus, TemplateRecord, TemplateRepo,
    TemplateTexts, outbox_retry_delay,
};
pub use purge::{NotificationPurge, PurgeRepo};
pub use sea_orm::DatabaseConnection;
pub use settings::{SETTING_MODIFY_ACTION, SettingChange, SettingRecord, SettingRepo};
pub use store::{Backend, Store};
