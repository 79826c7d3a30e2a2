//! `jobs`: a handler bound to a cron schedule and JSON params.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub name: String,
    pub group_code: String,
    pub handler: String,
    /// JSON object, stored as text.
    #[sea_orm(column_type = "Text")]
    pub params: String,
    pub cron: String,
    pub timezone: Option<String>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    pub misfire_policy: String,
    /// `fixed` or `exponential`.
    pub retry_backoff: String,
    pub retry_max_interval_ms: i64,
    pub retry_jitter: bool,
    /// `skip`, `allow`, `queue_one` or `replace` (`allow_concurrent` is
    /// true only for `allow`).
    pub overlap_policy: String,
    #[sea_orm(column_type = "Text")]
    pub remark: String,
    pub version: i64,
    /// When the current schedule (cron, zone, enabled) took effect.
    pub schedule_from: i64,
    /// Set on seeded built-in jobs: handler plus original name.
    #[sea_orm(unique)]
    pub builtin_key: Option<String>,
    pub created_at: i64,
    pub created_by: String,
    pub updated_at: i64,
    pub updated_by: String,
    /// The alert policy (issue 10).
    pub alert_on_failure: bool,
    pub alert_after_failures: i32,
    pub alert_on_recovery: bool,
    /// A JSON array of channel ids; null for none.
    #[sea_orm(column_type = "Text", nullable)]
    pub alert_channels: Option<String>,
    /// Written by the engine only: fires failed in a row, and whether a
    /// failure of that streak was alerted.
    pub alert_streak: i32,
    pub alert_alerted: bool,
    /// The calendar deciding the days (issue 11), with its rule.
    pub calendar_code: Option<String>,
    pub calendar_rule: Option<String>,
    pub active_from: Option<i64>,
    pub active_until: Option<i64>,
    pub jitter_ms: i64,
    pub misfire_grace_ms: i64,
    pub max_runs: Option<i64>,
    /// Successful scheduled fires counted towards `max_runs`.
    pub scheduled_successes: i64,
    /// A pause (issue 10): set while disabled, null while enabled. At
    /// `paused_until` the cluster enables the job again.
    pub paused_reason: Option<String>,
    pub paused_by: Option<String>,
    pub paused_at: Option<i64>,
    pub paused_until: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
