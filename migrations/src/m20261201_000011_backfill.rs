//! Backfill (issue 11, part 3): a request to fire a job's missed times.
//!
//! - `backfills`: one row per request, with its range, its status
//!   (`running`, `done`, `cancelled`) and who asked; the engine of any
//!   instance moves it on, so a crash loses nothing.
//! - `fires.backfill_id`: the backfill a fire of lane 0 belongs to. Such a
//!   fire is written when the backfill is asked for, under the ledger's
//!   unique key `(job_id, lane, scheduled_at)` (the key of the scheduled
//!   fire of that time), `queued` until its turn, then `pending` like a
//!   run-once request; `idx_fires_backfill` finds a backfill's fires.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, big_integer_null, integer, string_len, string_len_null,
};
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise collation for string keys on MySQL (as in the first migration).
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mysql = manager.get_database_backend() == DbBackend::MySql;
        let mut table = Table::create();
        table.table("backfills").if_not_exists();
        if mysql {
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
        }
        table
            .col(
                ColumnDef::new("id")
                    .big_integer()
                    .not_null()
                    .auto_increment()
                    .primary_key()
                    .take(),
            )
            .col(big_integer("job_id"))
            .col(big_integer("range_from"))
            .col(big_integer("range_to"))
            .col(integer("total"))
            .col(string_len("status", 16))
            .col(string_len("requested_by", 128))
            .col(big_integer("created_at"))
            .col(big_integer_null("finished_at"))
            .col(string_len_null("cancelled_by", 128));
        manager.create_table(table).await?;
        if !manager
            .has_index("backfills", "idx_backfills_status")
            .await?
        {
            manager
                .create_index(
                    Index::create()
                        .name("idx_backfills_status")
                        .table("backfills")
                        .col("status")
                        .to_owned(),
                )
                .await?;
        }
        if !manager.has_column("fires", "backfill_id").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table("fires")
                        .add_column(big_integer_null("backfill_id"))
                        .take(),
                )
                .await?;
        }
        if !manager.has_index("fires", "idx_fires_backfill").await? {
            manager
                .create_index(
                    Index::create()
                        .name("idx_fires_backfill")
                        .table("fires")
                        .col("backfill_id")
                        .col("state")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_index("fires", "idx_fires_backfill").await? {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_fires_backfill")
                        .table("fires")
                        .to_owned(),
                )
                .await?;
        }
        if manager.has_column("fires", "backfill_id").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table("fires")
                        .drop_column("backfill_id")
                        .take(),
                )
                .await?;
        }
        manager
            .drop_table(Table::drop().table("backfills").if_exists().take())
            .await
    }
}
