//! Observability (issue 9):
//!
//! - `runs.trace_id`: the trace (32 hex digits) a run's attempt was traced
//!   in, so a run in the log can be found in the tracing backend; null when
//!   tracing was off or the trace was not sampled.
//! - `fires.traceparent`: the W3C trace context of the request that queued
//!   a "run once" fire, so the fire's trace continues the caller's.
//! - `idx_runs_job_status_started`: each job's last success is one index
//!   seek, for the per-job metrics read at every scrape (and the run log
//!   filtered by job and status).
//!
//! Re-runnable after a partial failure on MySQL (each step checks first).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::string_len_null;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_column(manager, "runs", string_len_null("trace_id", 32)).await?;
        add_column(manager, "fires", string_len_null("traceparent", 64)).await?;
        if !manager
            .has_index("runs", "idx_runs_job_status_started")
            .await?
        {
            manager
                .create_index(
                    Index::create()
                        .name("idx_runs_job_status_started")
                        .table("runs")
                        .col("job_id")
                        .col("status")
                        .col("started_at")
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager
            .has_index("runs", "idx_runs_job_status_started")
            .await?
        {
            manager
                .drop_index(
                    Index::drop()
                        .name("idx_runs_job_status_started")
                        .table("runs")
                        .to_owned(),
                )
                .await?;
        }
        for (table, column) in [("runs", "trace_id"), ("fires", "traceparent")] {
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
