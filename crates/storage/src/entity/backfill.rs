//! `backfills`: one request to fire a job's missed times (issue 11,
//! part 3). Its fires are the `fires` rows whose `backfill_id` names it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "backfills")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: i64,
    pub range_from: i64,
    pub range_to: i64,
    /// How many fires it wrote when it was asked for.
    pub total: i32,
    /// `running`, `done` or `cancelled`.
    pub status: String,
    pub requested_by: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub cancelled_by: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
