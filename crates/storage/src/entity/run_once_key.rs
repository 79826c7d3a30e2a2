//! `run_once_keys`: the `Idempotency-Key` of a run-once request, per
//! caller, naming the fire it started. The primary key makes two requests
//! with one key start one fire.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "run_once_keys")]
pub struct Model {
    /// A user's `sub`, or `apikey:<name>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub caller: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub idem_key: String,
    pub job_id: i64,
    pub fire_id: i64,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
