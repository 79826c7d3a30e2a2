//! The fire ledger becomes a chain per job, so every fire time of a job is
//! covered by exactly one record whoever writes it (a timer, a catch-up, a
//! new owner, a process waking up):
//!
//! - `fires.lane`: 0 for the job's schedule (timer fires and catch-ups of
//!   missed times), 1 for "run once" requests, 2 for catch-ups recorded
//!   before this migration (kept apart so old data never collides).
//! - `fires.prev_at`: the fire time (or the job's last change) this record
//!   follows; `UNIQUE(job_id, lane, prev_at)` lets only one record extend
//!   the chain from a given point, and `UNIQUE(job_id, lane, scheduled_at)`
//!   keeps one record per time whatever its trigger.
//! - `fires.first_at`: the first fire time a record covers (a catch-up
//!   covers `first_at ..= scheduled_at`).
//! - `jobs.schedule_from`: when the job's current schedule (cron, zone,
//!   enabled) took effect; a timer armed from another schedule claims
//!   nothing, and no fire time at or before it is ever claimed.
//! - `runs.swept_at`: set when another instance closed the run as lost, so
//!   the real end, if it comes, still wins.
//! - `alert_windows`: coalesces repeated alerts of one job.
//! - `idx_jobs_updated_at`: reconciliation reads what changed, not every job.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, big_integer_null, integer, small_integer};
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise collation for string keys on MySQL (as in the first migration).
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        add_column(manager, "fires", small_integer("lane").default(0).take()).await?;
        add_column(manager, "fires", big_integer_null("prev_at")).await?;
        add_column(manager, "fires", big_integer_null("first_at")).await?;
        add_column(
            manager,
            "jobs",
            big_integer("schedule_from").default(0).take(),
        )
        .await?;
        add_column(manager, "runs", big_integer_null("swept_at")).await?;

        let db = manager.get_connection();
        // Existing rows: run-once requests get their own lane, and catch-ups
        // written under the old key a lane no new record uses.
        let (lane, trigger) = match backend {
            DbBackend::MySql => ("`lane`", "`trigger`"),
            _ => ("\"lane\"", "\"trigger\""),
        };
        db.execute_unprepared(&format!(
            "UPDATE fires SET {lane} = 1 WHERE {trigger} = 'manual' AND {lane} = 0"
        ))
        .await?;
        db.execute_unprepared(&format!(
            "UPDATE fires SET {lane} = 2 WHERE {trigger} = 'misfire' AND {lane} = 0"
        ))
        .await?;
        db.execute_unprepared("UPDATE jobs SET schedule_from = updated_at WHERE schedule_from = 0")
            .await?;

        if manager
            .has_index("fires", "ux_fires_job_trigger_scheduled")
            .await?
        {
            manager
                .drop_index(
                    Index::drop()
                        .name("ux_fires_job_trigger_scheduled")
                        .table("fires")
                        .to_owned(),
                )
                .await?;
        }
        let indexes: [(&str, &str, &[&str], bool); 3] = [
            (
                "ux_fires_job_lane_at",
                "fires",
                &["job_id", "lane", "scheduled_at"],
                true,
            ),
            (
                "ux_fires_job_lane_prev",
                "fires",
                &["job_id", "lane", "prev_at"],
                true,
            ),
            // Reconciliation reads only the jobs changed since the last one.
            ("idx_jobs_updated_at", "jobs", &["updated_at"], false),
        ];
        for (name, table, cols, unique) in indexes {
            if !manager.has_index(table, name).await? {
                let mut idx = Index::create();
                idx.name(name).table(table);
                if unique {
                    idx.unique();
                }
                for col in cols {
                    idx.col(*col);
                }
                manager.create_index(idx).await?;
            }
        }
        // The non-concurrency check looks for a job's running run: a small
        // partial index where the database has them (MySQL finds the few
        // running rows through idx_runs_status_started).
        if backend != DbBackend::MySql && !manager.has_index("runs", "idx_runs_running").await? {
            db.execute_unprepared(
                "CREATE INDEX idx_runs_running ON runs (job_id) WHERE status = 'running'",
            )
            .await?;
        }

        let mut table = Table::create();
        table.table("alert_windows").if_not_exists();
        let mut key = ColumnDef::new("key");
        key.string_len(160).not_null().primary_key();
        if backend == DbBackend::MySql {
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
            key.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
        }
        table
            .col(key)
            .col(big_integer("window_start"))
            .col(integer("folded"))
            .col(big_integer("updated_at"));
        manager.create_table(table).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("alert_windows").if_exists().take())
            .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
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
