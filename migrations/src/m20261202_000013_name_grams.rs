//! Name filters on MySQL/MariaDB at scale (issue 8): trigram tables.
//!
//! MySQL has no index that serves `LIKE '%…%'`, so the job list's and the
//! run log's name filters read a whole name index (100 000 names: 30–50 ms
//! on MariaDB). PostgreSQL has `pg_trgm` for that (migration 6); on MySQL we
//! keep the trigrams ourselves:
//!
//! - `job_name_grams (gram, job_id)`: every three-character piece of every
//!   job's lowered name, kept exact by triggers on `jobs` (insert, rename,
//!   delete), whoever writes the jobs.
//! - `run_name_grams (gram, job_id)`: the same for every (job, name) pair of
//!   `run_job_names`, added by a trigger on it; that table only grows, and
//!   so does this one.
//!
//! A filter looks up the pieces of its needle to find candidate jobs, then
//! checks each candidate's name with the usual `LIKE` (the grams only narrow
//! the search, they never decide a match). SQLite and PostgreSQL get no
//! tables: nothing reads them there.
//!
//! The grams are the lowered name's characters as the database lowers them
//! (`LOWER`, `SUBSTRING` and `CHAR_LENGTH` count characters), compared
//! byte-wise (`utf8mb4_bin`, as every key on MySQL).
//!
//! Re-runnable after a partial failure on MySQL (each step checks first or
//! ignores what is there).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The longest lowered name (`name_lower` columns are `VARCHAR(255)`).
const NAME_LOWER_MAX: usize = 255;

/// A loop running `statement` once for each three-character piece of
/// `name` (an expression), where `statement` says `PIECE`; the trigger
/// declares the counter `qiwu_i`.
fn for_each_gram(name: &str, statement: &str) -> String {
    let piece = format!("SUBSTRING({name}, qiwu_i, 3)");
    format!(
        "SET qiwu_i = 1; \
         WHILE qiwu_i + 2 <= CHAR_LENGTH({name}) DO \
         {}; \
         SET qiwu_i = qiwu_i + 1; \
         END WHILE;",
        statement.replace("PIECE", &piece)
    )
}

/// Inserts the grams of `name` for `id`.
fn insert_grams(table: &str, name: &str, id: &str) -> String {
    for_each_gram(
        name,
        &format!("INSERT IGNORE INTO {table} (gram, job_id) VALUES (PIECE, {id})"),
    )
}

/// Deletes the grams of `name` for `id` (primary-key deletes).
fn delete_grams(table: &str, name: &str, id: &str) -> String {
    for_each_gram(
        name,
        &format!("DELETE FROM {table} WHERE gram = PIECE AND job_id = {id}"),
    )
}

fn triggers() -> Vec<(&'static str, String)> {
    // `name_lower` is generated from `name`; the triggers lower `name`
    // themselves, the same expression, rather than rely on when a generated
    // column is visible to a trigger.
    let new_jobs = "LOWER(NEW.name)";
    let old_jobs = "LOWER(OLD.name)";
    vec![
        (
            "trg_jobs_name_grams_insert",
            format!(
                "CREATE TRIGGER trg_jobs_name_grams_insert AFTER INSERT ON jobs \
                 FOR EACH ROW BEGIN DECLARE qiwu_i INT DEFAULT 1; {} END",
                insert_grams("job_name_grams", new_jobs, "NEW.id")
            ),
        ),
        (
            "trg_jobs_name_grams_update",
            format!(
                "CREATE TRIGGER trg_jobs_name_grams_update AFTER UPDATE ON jobs \
                 FOR EACH ROW BEGIN DECLARE qiwu_i INT DEFAULT 1; IF NOT (OLD.name <=> NEW.name) THEN {} {} END IF; END",
                delete_grams("job_name_grams", old_jobs, "OLD.id"),
                insert_grams("job_name_grams", new_jobs, "NEW.id")
            ),
        ),
        (
            "trg_jobs_name_grams_delete",
            format!(
                "CREATE TRIGGER trg_jobs_name_grams_delete AFTER DELETE ON jobs \
                 FOR EACH ROW BEGIN DECLARE qiwu_i INT DEFAULT 1; {} END",
                delete_grams("job_name_grams", old_jobs, "OLD.id")
            ),
        ),
        (
            "trg_run_job_names_grams",
            format!(
                "CREATE TRIGGER trg_run_job_names_grams AFTER INSERT ON run_job_names \
                 FOR EACH ROW BEGIN DECLARE qiwu_i INT DEFAULT 1; {} END",
                insert_grams("run_name_grams", "NEW.name_lower", "NEW.job_id")
            ),
        ),
    ]
}

/// `SELECT 1 AS i UNION ALL SELECT 2 … 253`: every position a gram can
/// start at, for filling the tables from the rows already there.
fn positions() -> String {
    (1..=NAME_LOWER_MAX - 2)
        .map(|i| format!("SELECT {i} AS i"))
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::MySql {
            return Ok(());
        }
        let db = manager.get_connection();
        for table in ["job_name_grams", "run_name_grams"] {
            db.execute_unprepared(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                 gram VARCHAR(3) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
                 job_id BIGINT NOT NULL, \
                 PRIMARY KEY (gram, job_id)) \
                 ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
            ))
            .await?;
        }
        // The triggers first, then the fill: a row written in between (MySQL
        // runs this outside a transaction) is covered by one or the other.
        for (name, create) in triggers() {
            db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS {name}"))
                .await?;
            db.execute_unprepared(&create).await?;
        }
        let positions = positions();
        db.execute_unprepared(&format!(
            "INSERT IGNORE INTO job_name_grams (gram, job_id) \
             SELECT SUBSTRING(LOWER(j.name), p.i, 3), j.id FROM jobs j \
             JOIN ({positions}) p ON p.i + 2 <= CHAR_LENGTH(LOWER(j.name))"
        ))
        .await?;
        db.execute_unprepared(&format!(
            "INSERT IGNORE INTO run_name_grams (gram, job_id) \
             SELECT SUBSTRING(n.name_lower, p.i, 3), n.job_id FROM run_job_names n \
             JOIN ({positions}) p ON p.i + 2 <= CHAR_LENGTH(n.name_lower)"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::MySql {
            return Ok(());
        }
        let db = manager.get_connection();
        for (name, _) in triggers() {
            db.execute_unprepared(&format!("DROP TRIGGER IF EXISTS {name}"))
                .await?;
        }
        for table in ["job_name_grams", "run_name_grams"] {
            db.execute_unprepared(&format!("DROP TABLE IF EXISTS {table}"))
                .await?;
        }
        Ok(())
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
