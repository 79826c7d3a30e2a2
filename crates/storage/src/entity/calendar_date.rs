//! `calendar_dates`: one listed date of a user calendar (`holiday` or
//! `workday`), keyed by calendar and date (`YYYY-MM-DD`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "calendar_dates")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub calendar_code: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub date: String,
    pub kind: String,
    pub name: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
