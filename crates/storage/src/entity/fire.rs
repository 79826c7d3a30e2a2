//! `fires`: the exactly-once ledger. Per job and lane, `UNIQUE(scheduled_at)`
//! and `UNIQUE(prev_at)` make the schedule's records one chain: exactly one
//! record per fire time, whoever writes it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "fires")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: i64,
    /// `schedule`, `manual` or `misfire`.
    pub trigger: String,
    /// 0: the job's schedule (timer fires and catch-ups), 1: run once,
    /// 2: catch-ups recorded before the chain existed.
    pub lane: i16,
    /// The fire time (or the start of the job's schedule) this record follows.
    pub prev_at: Option<i64>,
    /// The first fire time this record covers (a catch-up covers
    /// `first_at ..= scheduled_at`).
    pub first_at: Option<i64>,
    pub scheduled_at: i64,
    /// `pending`, `claimed` or `done`.
    pub state: String,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<i64>,
    pub created_at: i64,
    /// W3C trace context of the request that queued a run-once fire.
    pub traceparent: Option<String>,
    /// Who asked for a run-once fire (a user's `sub`, or `apikey:<name>`).
    pub started_by: Option<String>,
    /// Where a run-once fire's end is reported.
    pub callback_url: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
