//! `freezes`: windows in which the fire times of the jobs in scope are not
//! run (issue 11, part 4).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "freezes")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub starts_at: i64,
    pub ends_at: i64,
    /// `all`, `group`, `handler` or `jobIds`.
    pub scope: String,
    /// The group code, the handler, or the job ids as a JSON array.
    #[sea_orm(column_type = "Text", nullable)]
    pub scope_value: Option<String>,
    #[sea_orm(column_type = "Text")]
    pub reason: String,
    pub version: i64,
    pub created_at: i64,
    pub created_by: String,
    pub updated_at: i64,
    pub updated_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
