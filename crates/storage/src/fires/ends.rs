//! Run ends, in batches: the executor's group commit writes many ends in
//! one transaction (one statement on PostgreSQL).

use sea_orm::sea_query::ExprTrait;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, TransactionTrait, Value};

use super::sql::Sql;
use super::{FireRepo, RunEnd, RunStatus, storable};
use crate::StorageError;
use crate::entity::run;
use crate::store::Backend;
use crate::timestamp::to_millis;

/// The error written instead of an end the database keeps refusing.
pub const END_WRITE_FALLBACK: &str = "执行结果无法写入数据库，只记录为失败。\nThe run's result could not be written to the database; it is recorded as failed.";

/// Whether a run's end landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndWritten {
    Recorded,
    /// No such run is open: it was finished already (or deleted).
    NoRow,
}

impl FireRepo<'_> {
    /// Writes how runs ended. Only a run still `running`, or one another
    /// instance closed as lost (the real outcome wins over that verdict), is
    /// changed. The answers are in the order of `ends`.
    pub async fn finish_runs(
        &self,
        ends: &[(i64, RunEnd)],
    ) -> Result<Vec<EndWritten>, StorageError> {
        if ends.is_empty() {
            return Ok(Vec::new());
        }
        match self.store.backend() {
            Backend::Postgres => self.finish_runs_postgres(ends).await,
            Backend::MySql | Backend::Sqlite => self.finish_runs_each(ends).await,
        }
    }

    /// Writes one run's end; see [`FireRepo::finish_runs`].
    pub async fn finish_run(&self, run_id: i64, end: &RunEnd) -> Result<EndWritten, StorageError> {
        let written = self.finish_runs(&[(run_id, end.clone())]).await?;
        Ok(written.first().copied().unwrap_or(EndWritten::NoRow))
    }

    /// One `UPDATE … FROM (rows)` for the whole batch.
    async fn finish_runs_postgres(
        &self,
        ends: &[(i64, RunEnd)],
    ) -> Result<Vec<EndWritten>, StorageError> {
        let mut done = std::collections::HashSet::new();
        for chunk in ends.chunks(super::claim::MAX_BATCH) {
            let rows = chunk
                .iter()
                .map(|(id, end)| {
                    vec![
                        Value::from(*id),
                        Value::from(end.status.as_str()),
                        Value::from(to_millis(end.finished_at)),
                        Value::from(Ord::max(end.duration_ms, 0)),
                        Value::from(storable(&end.output).into_owned()),
                        Value::from(storable(&end.error).into_owned()),
                        Value::from(end.trace_id.clone()),
                        Value::from(end.started_at.map(to_millis)),
                    ]
                })
                .collect();
            let mut sql = Sql::new(Backend::Postgres);
            sql.push(
                "UPDATE runs SET status = u.status, finished_at = u.finished_at, \
                 duration_ms = u.duration_ms, output = u.output, error = u.error, \
                 trace_id = COALESCE(u.trace_id, runs.trace_id), \
                 started_at = COALESCE(u.started_at, runs.started_at) FROM ",
            )
            .rows(
                &[
                    "id",
                    "status",
                    "finished_at",
                    "duration_ms",
                    "output",
                    "error",
                    "trace_id",
                    "started_at",
                ],
                rows,
                "u",
            )
            .push(" WHERE runs.id = u.id AND (runs.status = ")
            .param(RunStatus::Running.as_str())
            .push(" OR runs.swept_at IS NOT NULL) RETURNING runs.id");
            let rows = self
                .store
                .connection()
                .query_all_raw(sql.statement())
                .await?;
            for row in rows {
                done.insert(row.try_get::<i64>("", "id")?);
            }
        }
        Ok(ends
            .iter()
            .map(|(id, _)| {
                if done.contains(id) {
                    EndWritten::Recorded
                } else {
                    EndWritten::NoRow
                }
            })
            .collect())
    }

    /// One `UPDATE` per run, all in one transaction.
    async fn finish_runs_each(
        &self,
        ends: &[(i64, RunEnd)],
    ) -> Result<Vec<EndWritten>, StorageError> {
        let txn = self.store.connection().begin().await?;
        let mut written = Vec::with_capacity(ends.len());
        for (id, end) in ends {
            let result = run::Entity::update_many()
                .col_expr(run::Column::Status, end.status.as_str().into())
                .col_expr(
                    run::Column::FinishedAt,
                    Some(to_millis(end.finished_at)).into(),
                )
                .col_expr(
                    run::Column::DurationMs,
                    Some(Ord::max(end.duration_ms, 0)).into(),
                )
                .col_expr(
                    run::Column::Output,
                    storable(&end.output).into_owned().into(),
                )
                .col_expr(run::Column::Error, storable(&end.error).into_owned().into())
                .col_expr(
                    run::Column::TraceId,
                    sea_orm::sea_query::Func::coalesce([
                        sea_orm::sea_query::Expr::val(end.trace_id.clone()),
                        sea_orm::sea_query::Expr::col(run::Column::TraceId),
                    ])
                    .into(),
                )
                .col_expr(
                    run::Column::StartedAt,
                    sea_orm::sea_query::Func::coalesce([
                        sea_orm::sea_query::Expr::val(end.started_at.map(to_millis)),
                        sea_orm::sea_query::Expr::col(run::Column::StartedAt),
                    ])
                    .into(),
                )
                .filter(run::Column::Id.eq(*id))
                .filter(
                    run::Column::Status
                        .eq(RunStatus::Running.as_str())
                        .or(run::Column::SweptAt.is_not_null()),
                )
                .exec(&txn)
                .await?;
            written.push(if result.rows_affected == 1 {
                EndWritten::Recorded
            } else {
                EndWritten::NoRow
            });
        }
        txn.commit().await?;
        Ok(written)
    }
}
