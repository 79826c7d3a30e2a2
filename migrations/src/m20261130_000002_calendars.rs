//! User calendars (issue 11): `calendars` and their listed dates.
//!
//! Like the initial migration it is re-runnable after a partial failure
//! (`IF NOT EXISTS`), because MySQL cannot roll DDL back. The built-in
//! calendar `cn-workdays` is compiled into the binary, not stored.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, integer_null, string_len, text};
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise string keys on MySQL, as in the initial migration.
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

fn table(mysql: bool, name: &'static str) -> TableCreateStatement {
    let mut stmt = Table::create();
    stmt.table(name).if_not_exists();
    if mysql {
        stmt.engine("InnoDB")
            .character_set("utf8mb4")
            .collate(MYSQL_BIN_COLLATION);
    }
    stmt
}

fn key(mysql: bool, name: &'static str, len: u32) -> ColumnDef {
    let mut col = string_len(name, len);
    if mysql {
        col.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
    }
    col
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mysql = manager.get_database_backend() == DbBackend::MySql;
        manager
            .create_table(
                table(mysql, "calendars")
                    .col(key(mysql, "code", 64).primary_key())
                    .col(string_len("name", 64))
                    .col(text("description"))
                    // Both null: the calendar has data for no year.
                    .col(integer_null("first_year"))
                    .col(integer_null("last_year"))
                    .col(big_integer("version"))
                    .col(big_integer("created_at"))
                    .col(string_len("created_by", 128))
                    .col(big_integer("updated_at"))
                    .col(string_len("updated_by", 128))
                    .take(),
            )
            .await?;
        manager
            .create_table(
                table(mysql, "calendar_dates")
                    .col(key(mysql, "calendar_code", 64))
                    // `YYYY-MM-DD`: sorts as the dates do, on every backend.
                    .col(key(mysql, "date", 10))
                    .col(string_len("kind", 16))
                    .col(string_len("name", 64))
                    .primary_key(Index::create().col("calendar_code").col("date"))
                    .take(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for name in ["calendar_dates", "calendars"] {
            manager
                .drop_table(Table::drop().table(name).if_exists().take())
                .await?;
        }
        Ok(())
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
