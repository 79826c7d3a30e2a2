//! `api_keys`: service-account keys, stored hashed and scoped to permissions.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub name: String,
    #[sea_orm(unique)]
    pub prefix: String,
    pub secret_hash: String,
    /// JSON array of permission codes.
    #[sea_orm(column_type = "Text")]
    pub perms: String,
    pub created_at: i64,
    pub created_by: String,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
