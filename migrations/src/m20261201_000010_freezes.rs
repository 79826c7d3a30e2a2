//! Freeze windows (issue 11, part 4): `freezes`, periods declared ahead in
//! which the fire times of the jobs in their scope are not run.
//!
//! `scope` is `all`, `group`, `handler` or `jobIds`; `scope_value` holds
//! the group code, the handler, or the job ids as a JSON array (null for
//! `all`). `starts_at`/`ends_at` are the window `[from, to)` in ms;
//! `idx_freezes_ends_at` serves the engine's read of the freezes that have
//! not ended long ago. Re-runnable after a partial failure on MySQL.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, string_len, text, text_null};
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise collation on MySQL (as in the first migration).
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut table = Table::create();
        table.table("freezes").if_not_exists();
        if manager.get_database_backend() == DbBackend::MySql {
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
            .col(big_integer("starts_at"))
            .col(big_integer("ends_at"))
            .col(string_len("scope", 16))
            .col(text_null("scope_value"))
            .col(text("reason"))
            .col(big_integer("version"))
            .col(big_integer("created_at"))
            .col(string_len("created_by", 128))
            .col(big_integer("updated_at"))
            .col(string_len("updated_by", 128));
        manager.create_table(table).await?;
        if !manager.has_index("freezes", "idx_freezes_ends_at").await? {
            manager
                .create_index(
                    Index::create()
                        .name("idx_freezes_ends_at")
                        .table("freezes")
                        .col("ends_at")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("freezes").if_exists().take())
            .await
    }
}
