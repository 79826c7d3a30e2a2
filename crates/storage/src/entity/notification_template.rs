//! `notification_templates`: editable zh/en title and body per template code.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notification_templates")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub code: String,
    #[sea_orm(column_type = "Text")]
    pub title_zh: String,
    #[sea_orm(column_type = "Text")]
    pub body_zh: String,
    #[sea_orm(column_type = "Text")]
    pub title_en: String,
    #[sea_orm(column_type = "Text")]
    pub body_en: String,
    pub updated_at: i64,
    pub updated_by: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
