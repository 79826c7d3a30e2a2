//! `outbox`: webhook deliveries of notifications, retried by `notify.dispatch`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub notification_id: i64,
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: i64,
    #[sea_orm(column_type = "Text", nullable)]
    pub last_error: Option<String>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    /// The alert channel; null for the `notify.webhook_url` delivery.
    pub channel_id: Option<i64>,
    /// A run-once callback's URL; null for every other delivery.
    pub url: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
