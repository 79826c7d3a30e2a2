//! The run log's job-name filter at scale (issue 8):
//!
//! - `run_job_names`: every distinct (job id, job name) pair the run log
//!   holds, so a `jobName` filter finds the few jobs it names in a table of
//!   about one row per job, then seeks each one's runs by job id, instead of
//!   reading the name of every run (a scan of millions of rows).
//! - A trigger on `runs` keeps it complete whoever inserts runs (the engine,
//!   an import, a test), so the filter still matches each run's own copy of
//!   the name: renamed and deleted jobs' runs keep matching their old name.
//!   In steady state the trigger only reads (the pair is there already).
//! - `run_job_names.name_lower`: the name as the database lowers it, so the
//!   filter (`LOWER(name) LIKE LOWER(?)`, as before) compares without
//!   lowering every row again.
//! - `jobs.name_lower`: `LOWER(name)`, a column the database computes
//!   (generated), indexed: the job list's name filter and its `total` read
//!   that index instead of lowering every job row.
//! - PostgreSQL, where the `pg_trgm` extension can be created: trigram
//!   indexes that serve the substring filters, on both `name_lower`
//!   columns. Without the extension the filters read the name indexes in
//!   full, as on MySQL/SQLite.
//! - The table is filled from the existing runs once, here.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first or
//! ignores what is there).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, string_len};
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Byte-wise collation for string keys on MySQL (as in the first migration).
const MYSQL_BIN_COLLATION: &str = "utf8mb4_bin";

/// PostgreSQL: one statement-level trigger per insert statement, reading the
/// inserted rows as a set; the `NOT EXISTS` keeps the usual case (every
/// pair known) a read, and the sorted insert keeps concurrent writers of
/// new pairs from waiting on each other in opposite orders.
const PG_FUNCTION: &str = "CREATE OR REPLACE FUNCTION qiwu_note_run_job_names() RETURNS trigger \
     LANGUAGE plpgsql AS $$ BEGIN \
     INSERT INTO run_job_names (job_id, job_name, name_lower) \
     SELECT DISTINCT n.job_id, n.job_name, LOWER(n.job_name) FROM qiwu_new_runs n \
     WHERE NOT EXISTS (SELECT 1 FROM run_job_names d \
     WHERE d.job_id = n.job_id AND d.job_name = n.job_name) \
     ORDER BY 1, 2 ON CONFLICT DO NOTHING; \
     RETURN NULL; END $$";
const PG_TRIGGER: &str = "CREATE TRIGGER trg_runs_job_names AFTER INSERT ON runs \
     REFERENCING NEW TABLE AS qiwu_new_runs FOR EACH STATEMENT \
     EXECUTE FUNCTION qiwu_note_run_job_names()";

/// PostgreSQL: trigram indexes for the substring filters, when `pg_trgm`
/// is there or may be created (a trusted extension since PostgreSQL 13: the
/// database's owner may); otherwise nothing, and the filters scan.
const PG_TRIGRAMS: &str = "DO $$ BEGIN \
     BEGIN CREATE EXTENSION IF NOT EXISTS pg_trgm; \
     EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'pg_trgm unavailable: %', SQLERRM; END; \
     IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN \
     CREATE INDEX IF NOT EXISTS idx_run_job_names_trgm ON run_job_names \
     USING gin (name_lower gin_trgm_ops); \
     CREATE INDEX IF NOT EXISTS idx_jobs_name_trgm ON jobs \
     USING gin (name_lower gin_trgm_ops); \
     END IF; END $$";

/// MySQL/MariaDB: row triggers only. The plain `SELECT` is a non-locking
/// read, so a known pair (the usual case) takes no lock; only a new pair is
/// inserted, and `IGNORE` lets a concurrent writer of the same pair win.
const MYSQL_TRIGGER: &str = "CREATE TRIGGER trg_runs_job_names AFTER INSERT ON runs \
     FOR EACH ROW BEGIN \
     IF NOT EXISTS (SELECT 1 FROM run_job_names \
     WHERE job_id = NEW.job_id AND job_name = NEW.job_name) THEN \
     INSERT IGNORE INTO run_job_names (job_id, job_name, name_lower) \
     VALUES (NEW.job_id, NEW.job_name, LOWER(NEW.job_name)); \
     END IF; END";

/// SQLite: one writer at a time, so a plain ignore-on-conflict insert.
const SQLITE_TRIGGER: &str = "CREATE TRIGGER IF NOT EXISTS trg_runs_job_names \
     AFTER INSERT ON runs BEGIN \
     INSERT OR IGNORE INTO run_job_names (job_id, job_name, name_lower) \
     VALUES (NEW.job_id, NEW.job_name, LOWER(NEW.job_name)); \
     END";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let mut table = Table::create();
        table.table("run_job_names").if_not_exists();
        let mut name = ColumnDef::new("job_name");
        name.string_len(64).not_null();
        if backend == DbBackend::MySql {
            table
                .engine("InnoDB")
                .character_set("utf8mb4")
                .collate(MYSQL_BIN_COLLATION);
            name.extra(format!("COLLATE {MYSQL_BIN_COLLATION}"));
        }
        table
            .col(big_integer("job_id"))
            .col(name)
            // Lowering can lengthen a name (one character to two).
            .col(string_len("name_lower", 255))
            .primary_key(Index::create().col("job_id").col("job_name"));
        manager.create_table(table).await?;

        // A generated column, so every writer keeps it (as for the trigger).
        if !manager.has_column("jobs", "name_lower").await? {
            let generated = match backend {
                DbBackend::Postgres => "VARCHAR(255) GENERATED ALWAYS AS (LOWER(name)) STORED",
                DbBackend::MySql => "VARCHAR(255) AS (LOWER(name)) PERSISTENT",
                // SQLite adds only virtual generated columns to a table.
                _ => "TEXT GENERATED ALWAYS AS (LOWER(name)) VIRTUAL",
            };
            manager
                .get_connection()
                .execute_unprepared(&format!(
                    "ALTER TABLE jobs ADD COLUMN name_lower {generated}"
                ))
                .await?;
        }
        if !manager.has_index("jobs", "idx_jobs_name_lower").await? {
            manager
                .create_index(
                    Index::create()
                        .name("idx_jobs_name_lower")
                        .table("jobs")
                        .col("name_lower")
                        .to_owned(),
                )
                .await?;
        }

        // The trigger first, then the fill: a run inserted in between (MySQL
        // runs this outside a transaction) is noted by one or the other.
        let db = manager.get_connection();
        match backend {
            DbBackend::Postgres => {
                db.execute_unprepared(PG_FUNCTION).await?;
                db.execute_unprepared("DROP TRIGGER IF EXISTS trg_runs_job_names ON runs")
                    .await?;
                db.execute_unprepared(PG_TRIGGER).await?;
                db.execute_unprepared(
                    "INSERT INTO run_job_names (job_id, job_name, name_lower) \
                     SELECT DISTINCT job_id, job_name, LOWER(job_name) FROM runs \
                     ON CONFLICT DO NOTHING",
                )
                .await?;
                db.execute_unprepared(PG_TRIGRAMS).await?;
            }
            DbBackend::MySql => {
                db.execute_unprepared("DROP TRIGGER IF EXISTS trg_runs_job_names")
                    .await?;
                db.execute_unprepared(MYSQL_TRIGGER).await?;
                db.execute_unprepared(
                    "INSERT IGNORE INTO run_job_names (job_id, job_name, name_lower) \
                     SELECT DISTINCT job_id, job_name, LOWER(job_name) FROM runs",
                )
                .await?;
            }
            _ => {
                db.execute_unprepared(SQLITE_TRIGGER).await?;
                db.execute_unprepared(
                    "INSERT OR IGNORE INTO run_job_names (job_id, job_name, name_lower) \
                     SELECT DISTINCT job_id, job_name, LOWER(job_name) FROM runs",
                )
                .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared("DROP TRIGGER IF EXISTS trg_runs_job_names ON runs")
                    .await?;
                db.execute_unprepared("DROP FUNCTION IF EXISTS qiwu_note_run_job_names()")
                    .await?;
                db.execute_unprepared("DROP INDEX IF EXISTS idx_jobs_name_trgm")
                    .await?;
            }
            _ => {
                db.execute_unprepared("DROP TRIGGER IF EXISTS trg_runs_job_names")
                    .await?;
            }
        }
        if manager.has_index("jobs", "idx_jobs_name_lower").await? {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_jobs_name_lower")
                        .table("jobs")
                        .to_owned(),
                )
                .await?;
        }
        if manager.has_column("jobs", "name_lower").await? {
            manager
                .alter_table(
                    Table::alter()
                        .table("jobs")
                        .drop_column("name_lower")
                        .take(),
                )
                .await?;
        }
        manager
            .drop_table(Table::drop().table("run_job_names").if_exists().take())
            .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
