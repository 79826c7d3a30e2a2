//! `calendars`: user calendars (issue 11); their dates live in `calendar_dates`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "calendars")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub code: String,
    pub name: String,
    #[sea_orm(column_type = "Text")]
    pub description: String,
    /// Both null: the calendar has data for no year.
    pub first_year: Option<i32>,
    pub last_year: Option<i32>,
    pub version: i64,
    pub created_at: i64,
    pub created_by: String,
    pub updated_at: i64,
    pub updated_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
