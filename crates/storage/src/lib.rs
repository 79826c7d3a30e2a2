//! Persistence for Qiwu Scheduler over sea-orm: one [`Store`] per process,
//! hand-written entities for every table, and repositories that turn rows into
//! records. Works unchanged on SQLite, PostgreSQL and MySQL/MariaDB.

mod alert_channels;
mod alert_windows;
mod api_keys;
mod audit;
mod backfills;
mod calendars;
mod cluster;
pub mod entity;
mod error;
mod fires;
mod freezes;
mod grams;
mod groups;
mod jobs;
mod keyset;
mod monitor;
mod notifications;
mod purge;
mod runs;
mod seeds;
mod settings;
pub mod stats;
mod store;
pub mod timestamp;

pub use alert_channels::{AlertChannelRepo, ChannelRecord};
pub use alert_windows::{Admission, AlertWindowRepo};
pub use api_keys::{API_KEY_MARK, ApiKeyRecord, ApiKeyRepo};
pub use audit::{AuditCursor, AuditFilter, AuditRecord, AuditRepo, NewAudit};
pub use backfills::{
    BackfillFire, BackfillRecord, BackfillRepo, CancelledBackfill, CreatedBackfill,
};
pub use calendars::{CalendarDateRecord, CalendarRecord, CalendarRepo, CalendarSummary};
pub use cluster::{CLUSTER_TIMEZONE_KEY, ClusterRepo, InstanceRecord};
pub use error::StorageError;
pub use fires::{
    ClaimContext, ClaimOutcome, Claimed, END_WRITE_FALLBACK, EndWritten, FireCallback, FireRepo,
    FirstRun, IdempotencyKey, KeyedFire, LastAttempt, ManualClaim, ManualQueued, ManualRequest,
    PendingFire, RunEnd, RunStart, RunStatus, TimeClaim, Trigger, storable,
};
pub use freezes::{FreezeRecord, FreezeRefusal, FreezeRepo};
pub use groups::{GroupRecord, GroupRepo};
pub use jobs::{
    BatchEnabled, EnabledOutcome, JobFilter, JobRecord, JobRepo, JobSchedule, JobSelection, NewJob,
    Pause,
};
pub use monitor::{JobHealth, MonitorRepo, PoolStats};
pub use notifications::{
    NewNotification, NotificationCursor, NotificationPage, NotificationRecord, NotificationRepo,
    OUTBOX_MAX_ATTEMPTS, OutboxRecord, OutboxRepo, OutboxStatus, TEMPLATE_MODIFY_ACTION,
    TEMPLATE_TARGET, TemplateRecord, TemplateRepo, TemplateTexts, outbox_retry_delay,
};
pub use purge::{NotificationPurge, PurgeRepo};
pub use runs::{
    CancelRequest, EXPORT_ERROR_CHARS, RunCursor, RunExportRow, RunFilter, RunRecord, RunRepo,
};
pub use sea_orm::DatabaseConnection;
pub use settings::{
    SETTING_MODIFY_ACTION, SETTING_TARGET, SettingChange, SettingRecord, SettingRepo,
};
pub use store::{Backend, Store};
