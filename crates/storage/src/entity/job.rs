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
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
