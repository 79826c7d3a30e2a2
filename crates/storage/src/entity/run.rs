//! `runs`: the run log, one row per attempt (or skip) of a fire. Job name and
//! handler are copied so rows survive the job's deletion.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "runs")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub fire_id: i64,
    pub job_id: i64,
    pub job_name: String,
    pub handler: String,
    pub trigger: String,
    pub scheduled_at: i64,
    pub attempt: i32,
    /// `running`, `success`, `failed`, `skipped`, `timeout` or `cancelled`.
    pub status: String,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub duration_ms: Option<i64>,
    pub instance: String,
    #[sea_orm(column_type = "Text")]
    pub output: String,
    #[sea_orm(column_type = "Text")]
    pub error: String,
    /// Set when another instance closed the run as lost; the real end, if
    /// it still comes, overwrites that verdict.
    pub swept_at: Option<i64>,
    /// Soft delete: hidden from the API at once, purged by `audit.purge` later.
    pub deleted_at: Option<i64>,
    /// The trace of the attempt (32 hex digits) when it was traced and sampled.
    pub trace_id: Option<String>,
    /// When someone asked to cancel the run while it was running.
    pub cancel_requested_at: Option<i64>,
    /// Who asked to cancel it (a user's `sub` or `apikey:{name}`).
    pub cancelled_by: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
