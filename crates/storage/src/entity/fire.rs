//! `fires`: the exactly-once ledger. `UNIQUE(job_id, trigger, scheduled_at)`
//! lets exactly one instance record a given fire.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "fires")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub job_id: i64,
    /// `schedule`, `manual` or `misfire`.
    pub trigger: String,
    pub scheduled_at: i64,
    /// `pending`, `claimed` or `done`.
    pub state: String,
    pub claimed_by: Option<String>,
    pub claimed_at: Option<i64>,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
