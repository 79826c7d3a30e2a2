//! Run control (issue 10, parts 2–5), every column this feature set needs
//! added in one step so the schema never changes under a half-merged
//! branch:
//!
//! - `runs.cancel_requested_at`, `runs.cancelled_by`: a request to cancel
//!   a running run, and who asked. The instance running it is told over
//!   Redis and also reads these while it has running fires, so a lost
//!   message still stops the run.
//! - `jobs.overlap_policy`: `skip`, `allow`, `queue_one` or `replace`;
//!   existing jobs keep what `allow_concurrent` said (`true` ⇔ `allow`).
//! - `jobs.retry_backoff`, `retry_max_interval_ms`, `retry_jitter`: how the
//!   wait between attempts grows.
//! - `jobs.paused_reason`, `paused_by`, `paused_at`, `paused_until`: a
//!   pause with a note and an end; `idx_jobs_paused_until` finds the next
//!   resume.
//! - `fires.started_by`, `fires.callback_url`: who asked for a run-once
//!   fire, and where its end is reported.
//! - `run_once_keys`: `Idempotency-Key`s of run-once requests per caller.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{
    big_integer, big_integer_null, boolean, string_len, string_len_null,
};
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise collation for string keys on MySQL (as in the first migration).
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        add_column(manager, "runs", big_integer_null("cancel_requested_at")).await?;
        add_column(manager, "runs", string_len_null("cancelled_by", 128)).await?;
        add_column(
            manager,
            "jobs",
            string_len("overlap_policy", 16).default("skip").take(),
        )
        .await?;
        add_column(
            manager,
            "jobs",
            string_len("retry_backoff", 16).default("fixed").take(),
        )
        .await?;
        add_column(
            manager,
            "jobs",
            big_integer("retry_max_interval_ms")
                .default(3_600_000)
                .take(),
        )
        .await?;
        add_column(
            manager,
            "jobs",
            boolean("retry_jitter").default(false).take(),
        )
        .await?;
        add_column(manager, "jobs", string_len_null("paused_reason", 500)).await?;
        add_column(manager, "jobs", string_len_null("paused_by", 128)).await?;
        add_column(manager, "jobs", big_integer_null("paused_at")).await?;
        add_column(manager, "jobs", big_integer_null("paused_until")).await?;
        add_column(manager, "fires", string_len_null("started_by", 128)).await?;
        add_column(manager, "fires", string_len_null("callback_url", 2048)).await?;

        // Existing concurrent jobs keep running in parallel.
        manager
            .get_connection()
            .execute_unprepared(
                "UPDATE jobs SET overlap_policy = 'allow' \
                 WHERE allow_concurrent AND overlap_policy = 'skip'",
            )
            .await?;

        if !manager.has_index("jobs", "idx_jobs_paused_until").await? {
            manager
                .create_index(
                    Index::create()
                        .name("idx_jobs_paused_until")
                        .table("jobs")
                        .col("paused_until")
                        .to_owned(),
                )
                .await?;
        }

        let mysql = backend == DbBackend::MySql;
        let key = |name: &'static str, len: u32| {
            let mut col = string_len(name, len);
            if mysql {
                col.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
            }
            col
        };
        let mut table = Table::create();
        table.table("run_once_keys").if_not_exists();
        if mysql {
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
        }
        table
            .col(key("caller", 160))
            .col(key("idem_key", 255))
            .col(big_integer("job_id"))
            .col(big_integer("fire_id"))
            .col(big_integer("created_at"))
            .primary_key(Index::create().col("caller").col("idem_key"));
        manager.create_table(table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("run_once_keys").if_exists().take())
            .await?;
        if manager.has_index("jobs", "idx_jobs_paused_until").await? {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_jobs_paused_until")
                        .table("jobs")
                        .to_owned(),
                )
                .await?;
        }
        let columns: [(&str, &str); 12] = [
            ("runs", "cancel_requested_at"),
            ("runs", "cancelled_by"),
            ("jobs", "overlap_policy"),
            ("jobs", "retry_backoff"),
            ("jobs", "retry_max_interval_ms"),
            ("jobs", "retry_jitter"),
            ("jobs", "paused_reason"),
            ("jobs", "paused_by"),
            ("jobs", "paused_at"),
            ("jobs", "paused_until"),
            ("fires", "started_by"),
            ("fires", "callback_url"),
        ];
        for (table, column) in columns {
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
