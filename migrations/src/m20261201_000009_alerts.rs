//! Alerts (issue 10, part 1):
//!
//! - the alert policy on `jobs` (`alert_on_failure`, `alert_after_failures`,
//!   `alert_on_recovery`, `alert_channels`: a JSON array of channel ids,
//!   null for none) and the state the engine keeps between fires
//!   (`alert_streak`: fires failed in a row; `alert_alerted`: a failure of
//!   that streak was alerted). The state is never part of `version`.
//! - `alert_channels`: where alerts go (the inbox, a signed webhook, a
//!   DingTalk, WeCom or Feishu robot), with write-only `url` and `secret`.
//! - `outbox.channel_id`: the channel a delivery goes to; null for the
//!   `notify.webhook_url` delivery every inbox notification has had.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, big_integer_null, boolean, integer, string_len, text_null,
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
        for column in [
            boolean("alert_on_failure").default(false).take(),
            integer("alert_after_failures").default(0).take(),
            boolean("alert_on_recovery").default(false).take(),
            text_null("alert_channels"),
            integer("alert_streak").default(0).take(),
            boolean("alert_alerted").default(false).take(),
        ] {
            add_column(manager, "jobs", column).await?;
        }
        add_column(manager, "outbox", big_integer_null("channel_id")).await?;

        let mut table = Table::create();
        table.table("alert_channels").if_not_exists();
        let mut name = string_len("name", 64);
        if mysql {
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
            name.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
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
            .col(name)
            .col(string_len("kind", 16))
            .col(text_null("url"))
            .col(text_null("secret"))
            .col(boolean("enabled"))
            .col(boolean("is_default"))
            .col(big_integer("version"))
            .col(big_integer("created_at"))
            .col(string_len("created_by", 128))
            .col(big_integer("updated_at"))
            .col(string_len("updated_by", 128));
        manager.create_table(table).await?;
        if !manager
            .has_index("alert_channels", "ux_alert_channels_name")
            .await?
        {
            manager
                .create_index(
                    Index::create()
                        .name("ux_alert_channels_name")
                        .table("alert_channels")
                        .col("name")
                        .unique()
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("alert_channels").if_exists().take())
            .await?;
        for (table, column) in [
            ("outbox", "channel_id"),
            ("jobs", "alert_on_failure"),
            ("jobs", "alert_after_failures"),
            ("jobs", "alert_on_recovery"),
            ("jobs", "alert_channels"),
            ("jobs", "alert_streak"),
            ("jobs", "alert_alerted"),
        ] {
            if manager.has_column(table, column).await? {
                manager
                    .alter_table(Table::alter().table(table).drop_column(column).take())
                    .await?;
            }
        }
        Ok(())
    }
}

/// Adds a column unless it is there already (a re-run on MySQL).
async fn add_column(
    manager: &SchemaManager<'_>,
    table: &'static str,
    column: ColumnDef,
) -> Result<(), DbErr> {
    let name = column.get_column_name();
    if manager.has_column(table, &name).await? {
        return Ok(());
    }
    manager
        .alter_table(Table::alter().table(table).add_column(column).take())
        .await
}
