//! A job's time rules (issue 11), on `jobs`:
//!
//! - `calendar_code`, `calendar_rule`: the calendar that decides the days
//!   (`cn-workdays` or a user calendar's code) and the rule (`workdays`,
//!   `holidays`, `exclude`); both null or both set.
//! - `active_from`, `active_until`: no fire time outside (milliseconds,
//!   null for open).
//! - `jitter_ms`: each fire starts up to this long after its nominal time.
//! - `misfire_grace_ms`: how late a missed fire is still caught up (0 =
//!   however late).
//! - `max_runs` and `scheduled_successes`: after `max_runs` successful
//!   scheduled fires the job disables itself; the count is kept here so
//!   the run log's retention cannot change it.
//! - `idx_jobs_calendar`: the jobs a calendar edit touches, and whether a
//!   calendar is in use, without a scan.
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, big_integer_null, string_len_null};

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The columns this migration adds to `jobs`, in order.
const COLUMNS: [&str; 8] = [
    "calendar_code",
    "calendar_rule",
    "active_from",
    "active_until",
    "jitter_ms",
    "misfire_grace_ms",
    "max_runs",
    "scheduled_successes",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_column(manager, string_len_null("calendar_code", 64)).await?;
        add_column(manager, string_len_null("calendar_rule", 16)).await?;
        add_column(manager, big_integer_null("active_from")).await?;
        add_column(manager, big_integer_null("active_until")).await?;
        add_column(manager, big_integer("jitter_ms").default(0).take()).await?;
        add_column(manager, big_integer("misfire_grace_ms").default(0).take()).await?;
        add_column(manager, big_integer_null("max_runs")).await?;
        add_column(
            manager,
            big_integer("scheduled_successes").default(0).take(),
        )
        .await?;
        if !manager.has_index("jobs", "idx_jobs_calendar").await? {
            manager
                .create_index(
                    Index::create()
                        .name("idx_jobs_calendar")
                        .table("jobs")
                        .col("calendar_code")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.has_index("jobs", "idx_jobs_calendar").await? {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_jobs_calendar")
                        .table("jobs")
                        .to_owned(),
                )
                .await?;
        }
        for column in COLUMNS.iter().rev() {
            if manager.has_column("jobs", column).await? {
                manager
                    .alter_table(Table::alter().table("jobs").drop_column(*column).take())
                    .await?;
            }
        }
        Ok(())
    }
}

/// Adds a column to `jobs` unless it is there already (a re-run on MySQL).
async fn add_column(manager: &SchemaManager<'_>, column: ColumnDef) -> Result<(), DbErr> {
    let name = column.get_column_name();
    if manager.has_column("jobs", &name).await? {
        return Ok(());
    }
    manager
        .alter_table(Table::alter().table("jobs").add_column(column).take())
        .await
}
