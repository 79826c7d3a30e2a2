//! Run-once callbacks (issue 10, part 5):
//!
//! - `outbox.url`: where a delivery goes when it is a run-once callback
//!   (signed like the `notify.webhook_url` delivery); null for every other
//!   row, whose target is the setting or its alert channel.
//! - `idx_run_once_keys_created`: finds the expired `Idempotency-Key`s the
//!   purge removes.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::string_len_null;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("outbox", "url").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table("outbox")
                        .add_column(string_len_null("url", 2048))
                        .take(),
                )
                .await?;
        }
        if !manager
            .has_index("run_once_keys", "idx_run_once_keys_created")
            .await?
        {
            manager
                .create_index(
                    Index::create()
                        .name("idx_run_once_keys_created")
                        .table("run_once_keys")
                        .col("created_at")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager
            .has_index("run_once_keys", "idx_run_once_keys_created")
            .await?
        {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_run_once_keys_created")
                        .table("run_once_keys")
                        .to_owned(),
                )
                .await?;
        }
        if manager.has_column("outbox", "url").await? {
            manager
                .alter_table(Table::alter().table("outbox").drop_column("url").take())
                .await?;
        }
        Ok(())
    }
}
