//! The fire ledger and the run writes of the execution engine.
//!
//! Every fire time of a job's schedule is covered by exactly one `fires`
//! record, whoever writes it. The records of a job form a chain: each one
//! names the fire time it follows (`prev_at`: the previous fire time, or the
//! start of the job's current schedule, `schedule_from`), and `UNIQUE(job_id, lane, prev_at)` lets only one
//! record extend the chain from a given point. A claim also requires its
//! predecessor to be recorded, so a time after a hole is never claimed as if
//! the hole were not there: the claimer learns of the [`ClaimOutcome::Gap`]
//! and records the missed times by the job's misfire policy first. Run-once
//! requests live in a lane of their own and are taken from `pending`.
//!
//! The first run row is written in the same transaction as its claim, and
//! the job's settings at that moment are read there too: a fire runs with
//! the job as it is when claimed.

mod claim;
mod claim_pg;
mod ends;
mod freeze;
mod run_once;
pub(crate) mod sql;

use std::borrow::Cow;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionTrait,
};

use crate::entity::{fire, run};
use crate::timestamp::{from_millis, to_millis};
use crate::{JobRecord, StorageError, Store};

pub use claim::{ClaimContext, ClaimOutcome, Claimed, FirstRun, ManualClaim, TimeClaim};
pub use ends::{END_WRITE_FALLBACK, EndWritten};
pub use qiwu_domain::run::{RunStatus, Trigger};
pub use run_once::{
    FireCallback, IdempotencyKey, KeyedFire, LastAttempt, ManualQueued, ManualRequest,
};

/// The lane of the job's schedule (timer fires and catch-ups).
pub(crate) const LANE_SCHEDULE: i16 = 0;
/// The lane of run-once requests.
pub(crate) const LANE_MANUAL: i16 = 1;
/// The lane of the catch-up runs at the end of freeze windows (one per
/// job and window end).
pub(crate) const LANE_FREEZE: i16 = 3;

/// The run row of a further attempt of a fire already claimed.
#[derive(Debug, Clone)]
pub struct RunStart<'a> {
    pub job_id: i64,
    pub job_name: &'a str,
    pub handler: &'a str,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    pub instance: &'a str,
    pub started_at: DateTime<Utc>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub status: RunStatus,
    pub finished_at: DateTime<Utc>,
    /// Measured by the executor on a monotonic clock.
    pub duration_ms: i64,
    pub output: String,
    pub error: String,
    /// The trace the attempt ran in (sampled traces only); kept when `None`.
    pub trace_id: Option<String>,
    /// When the attempt really started, for a run claimed ahead of its
    /// time (whose row holds the planned start); kept when `None`.
    pub started_at: Option<DateTime<Utc>>,
}

/// A fire waiting for an instance ("run once" requests).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFire {
    pub id: i64,
    pub job_id: i64,
    pub scheduled_at: DateTime<Utc>,
}

/// Text every database stores: PostgreSQL refuses U+0000 in `text`, so it
/// becomes U+FFFD. (Rust strings are valid UTF-8, so no lone surrogate can
/// reach a database.)
pub fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Fires and the run rows the engine writes.
pub struct FireRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn fires(&self) -> FireRepo<'_> {
        FireRepo { store: self }
    }
}

impl FireRepo<'_> {
    /// Records a further attempt of a fire already claimed, `running`.
    pub async fn start_run(&self, fire_id: i64, start: &RunStart<'_>) -> Result<i64, StorageError> {
        let started = to_millis(start.started_at);
        let model = run::ActiveModel {
            id: NotSet,
            fire_id: Set(fire_id),
            job_id: Set(start.job_id),
            job_name: Set(storable(start.job_name).into_owned()),
            handler: Set(start.handler.to_string()),
            trigger: Set(start.trigger.as_str().to_string()),
            scheduled_at: Set(to_millis(start.scheduled_at)),
            attempt: Set(start.attempt),
            status: Set(RunStatus::Running.as_str().to_string()),
            started_at: Set(started),
            finished_at: Set(None),
            duration_ms: Set(None),
            instance: Set(start.instance.to_string()),
            output: Set(String::new()),
            error: Set(String::new()),
            swept_at: Set(None),
            deleted_at: Set(None),
            trace_id: Set(None),
            cancel_requested_at: Set(None),
            cancelled_by: Set(None),
        };
        Ok(model.insert(self.store.connection()).await?.id)
    }

    /// Queues a "run once" request as a pending manual fire. Two requests in
    /// the same millisecond get distinct times so both are kept.
    pub async fn create_manual(
        &self,
        job_id: i64,
        now: DateTime<Utc>,
    ) -> Result<i64, StorageError> {
        self.create_manual_traced(job_id, now, None).await
    }

    /// [`FireRepo::create_manual`], remembering the W3C `traceparent` of
    /// the request that queued it: the fire's trace continues that one.
    pub async fn create_manual_traced(
        &self,
        job_id: i64,
        now: DateTime<Utc>,
        traceparent: Option<&str>,
    ) -> Result<i64, StorageError> {
        self.create_manual_request(&ManualRequest {
            job_id,
            now,
            traceparent,
            started_by: None,
            callback_url: None,
        })
        .await
    }

    /// One fire, if it is still pending.
    pub async fn pending_by_id(&self, fire_id: i64) -> Result<Option<PendingFire>, StorageError> {
        let row = fire::Entity::find_by_id(fire_id)
            .filter(fire::Column::State.eq("pending"))
            .one(self.store.connection())
            .await?;
        row.map(pending_fire).transpose()
    }

    /// The `traceparent` a run-once fire was queued with.
    pub async fn traceparent(&self, fire_id: i64) -> Result<Option<String>, StorageError> {
        let found: Option<Option<String>> = fire::Entity::find_by_id(fire_id)
            .select_only()
            .column(fire::Column::Traceparent)
            .into_tuple()
            .one(self.store.connection())
            .await?;
        Ok(found.flatten())
    }

    /// Pending fires, oldest first.
    pub async fn pending(&self, limit: u64) -> Result<Vec<PendingFire>, StorageError> {
        let rows = fire::Entity::find()
            .filter(fire::Column::State.eq("pending"))
            .order_by_asc(fire::Column::Id)
            .limit(limit)
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(pending_fire).collect()
    }

    /// The latest fire time recorded on each job's schedule (the tip of its
    /// chain), for the jobs that have one. One indexed look per job.
    pub async fn tips(&self, job_ids: &[i64]) -> Result<HashMap<i64, DateTime<Utc>>, StorageError> {
        let mut out = HashMap::with_capacity(job_ids.len());
        for chunk in job_ids.chunks(claim::MAX_BATCH) {
            let mut sql = sql::Sql::new(self.store.backend());
            sql.push(
                "SELECT j.id AS id, (SELECT f.scheduled_at FROM fires f \
                 WHERE f.job_id = j.id AND f.lane = ",
            )
            .param(LANE_SCHEDULE)
            .push(" ORDER BY f.scheduled_at DESC LIMIT 1) AS tip FROM jobs j WHERE j.id IN ")
            .list(chunk.iter().copied());
            let rows = self
                .store
                .connection()
                .query_all_raw(sql.statement())
                .await?;
            for row in rows {
                let id: i64 = row.try_get("", "id")?;
                if let Some(tip) = row.try_get::<Option<i64>>("", "tip")? {
                    out.insert(id, from_millis(tip)?);
                }
            }
        }
        Ok(out)
    }

    /// Closes runs left `running` by instances that are gone: the given
    /// instances, or every instance when `instances` is `None`. `swept`
    /// marks them closed by another instance, so a real end that still
    /// comes overwrites the verdict.
    pub async fn close_running(
        &self,
        instances: Option<&[String]>,
        reason: &str,
        now: DateTime<Utc>,
        swept: bool,
    ) -> Result<u64, StorageError> {
        let now = to_millis(now);
        let mut query = run::Entity::update_many()
            .col_expr(run::Column::Status, RunStatus::Failed.as_str().into())
            .col_expr(run::Column::FinishedAt, Some(now).into())
            .col_expr(run::Column::Error, reason.to_string().into())
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()));
        if swept {
            query = query.col_expr(run::Column::SweptAt, Some(now).into());
        }
        if let Some(instances) = instances {
            query = query.filter(run::Column::Instance.is_in(instances.iter().cloned()));
        }
        Ok(query.exec(self.store.connection()).await?.rows_affected)
    }

    /// Closes `running` runs whose instance is not among `live` and that
    /// started before `started_before`: left by a process that is gone
    /// without a heart-beat row (a crash after unregistering, say).
    pub async fn close_orphans(
        &self,
        live: &[String],
        started_before: DateTime<Utc>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, StorageError> {
        let now = to_millis(now);
        let result = run::Entity::update_many()
            .col_expr(run::Column::Status, RunStatus::Failed.as_str().into())
            .col_expr(run::Column::FinishedAt, Some(now).into())
            .col_expr(run::Column::Error, reason.to_string().into())
            .col_expr(run::Column::SweptAt, Some(now).into())
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::Instance.is_not_in(live.iter().cloned()))
            .filter(run::Column::StartedAt.lt(to_millis(started_before)))
            .exec(self.store.connection())
            .await?;
        Ok(result.rows_affected)
    }

    /// The (attempt, status) of every run of a fire, by attempt.
    pub async fn runs_of_fire(&self, fire_id: i64) -> Result<Vec<(i32, String)>, StorageError> {
        Ok(run::Entity::find()
            .select_only()
            .column(run::Column::Attempt)
            .column(run::Column::Status)
            .filter(run::Column::FireId.eq(fire_id))
            .order_by_asc(run::Column::Attempt)
            .into_tuple()
            .all(self.store.connection())
            .await?)
    }

    /// Among these running runs, the ones someone asked to cancel, with who
    /// asked: what an instance checks while it has fires running, in case
    /// the message telling it was lost.
    pub async fn cancel_requests(
        &self,
        run_ids: &[i64],
    ) -> Result<Vec<(i64, String)>, StorageError> {
        let mut out = Vec::new();
        for chunk in run_ids.chunks(claim::MAX_BATCH) {
            let rows: Vec<(i64, Option<String>)> = run::Entity::find()
                .select_only()
                .column(run::Column::Id)
                .column(run::Column::CancelledBy)
                .filter(run::Column::Id.is_in(chunk.iter().copied()))
                .filter(run::Column::CancelRequestedAt.is_not_null())
                .into_tuple()
                .all(self.store.connection())
                .await?;
            out.extend(
                rows.into_iter()
                    .map(|(id, by)| (id, by.unwrap_or_default())),
            );
        }
        Ok(out)
    }

    /// How many runs of the job are `running` with an id below `run_id`:
    /// the running one, and any fire waiting its turn before this one; with
    /// `elsewhere_than`, only other instances' (a fire claimed ahead asks at
    /// its time for a run going on elsewhere, or a crashed instance's not
    /// yet closed).
    pub async fn running_before(
        &self,
        job_id: i64,
        run_id: i64,
        elsewhere_than: Option<&str>,
    ) -> Result<u64, StorageError> {
        use sea_orm::PaginatorTrait;
        let mut query = run::Entity::find()
            .filter(run::Column::JobId.eq(job_id))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::Id.lt(run_id));
        if let Some(instance) = elsewhere_than {
            query = query.filter(run::Column::Instance.ne(instance));
        }
        Ok(query.count(self.store.connection()).await?)
    }

    /// Asks to cancel the job's running runs other than `except` (a fire
    /// that replaces them); answers the runs asked.
    pub async fn cancel_others(
        &self,
        job_id: i64,
        except: i64,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<i64>, StorageError> {
        let db = self.store.connection();
        let ids: Vec<i64> = run::Entity::find()
            .select_only()
            .column(run::Column::Id)
            .filter(run::Column::JobId.eq(job_id))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::Id.ne(except))
            .filter(run::Column::CancelRequestedAt.is_null())
            .into_tuple()
            .all(db)
            .await?;
        if ids.is_empty() {
            return Ok(ids);
        }
        run::Entity::update_many()
            .col_expr(run::Column::CancelRequestedAt, Some(to_millis(now)).into())
            .col_expr(run::Column::CancelledBy, Some(by.to_string()).into())
            .filter(run::Column::Id.is_in(ids.iter().copied()))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::CancelRequestedAt.is_null())
            .exec(db)
            .await?;
        Ok(ids)
    }

    /// Takes back a fire claimed ahead of its time that never started (its
    /// job changed before the time came, or the process is stopping): the
    /// record and its first run are deleted in one transaction, so the
    /// time is unclaimed again and whoever claims it next decides it
    /// afresh. Only a fire this instance holds whose first run is still
    /// `running` and untouched by a sweep goes; `false` (nothing deleted)
    /// when there is no such fire.
    pub async fn withdraw(
        &self,
        fire_id: i64,
        run_id: i64,
        instance: &str,
    ) -> Result<bool, StorageError> {
        let txn = self.store.connection().begin().await?;
        let runs = run::Entity::delete_many()
            .filter(run::Column::Id.eq(run_id))
            .filter(run::Column::FireId.eq(fire_id))
            .filter(run::Column::Attempt.eq(1))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::SweptAt.is_null())
            .exec(&txn)
            .await?;
        if runs.rows_affected != 1 {
            txn.rollback().await?;
            return Ok(false);
        }
        let fires = fire::Entity::delete_many()
            .filter(fire::Column::Id.eq(fire_id))
            .filter(fire::Column::Lane.eq(LANE_SCHEDULE))
            .filter(fire::Column::ClaimedBy.eq(instance))
            .exec(&txn)
            .await?;
        if fires.rows_affected != 1 {
            txn.rollback().await?;
            return Ok(false);
        }
        txn.commit().await?;
        Ok(true)
    }

    /// A run that waited its turn starts now: its `started_at` moves here.
    pub async fn restart_run(&self, run_id: i64, now: DateTime<Utc>) -> Result<(), StorageError> {
        run::Entity::update_many()
            .col_expr(run::Column::StartedAt, to_millis(now).into())
            .filter(run::Column::Id.eq(run_id))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .exec(self.store.connection())
            .await?;
        Ok(())
    }

    /// How many run-once requests of a job are still waiting.
    pub async fn pending_count(&self, job_id: i64) -> Result<u64, StorageError> {
        use sea_orm::PaginatorTrait;
        Ok(fire::Entity::find()
            .filter(fire::Column::JobId.eq(job_id))
            .filter(fire::Column::State.eq("pending"))
            .count(self.store.connection())
            .await?)
    }
}

fn pending_fire(f: fire::Model) -> Result<PendingFire, StorageError> {
    Ok(PendingFire {
        id: f.id,
        job_id: f.job_id,
        scheduled_at: from_millis(f.scheduled_at)?,
    })
}

/// Reads jobs by id (the settings a claimed fire runs with).
pub(crate) async fn jobs_by_id<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> Result<HashMap<i64, JobRecord>, StorageError> {
    use crate::entity::job;
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(claim::MAX_BATCH) {
        let rows = job::Entity::find()
            .filter(job::Column::Id.is_in(chunk.iter().copied()))
            .all(db)
            .await?;
        for row in rows {
            let record = JobRecord::try_from(row)?;
            out.insert(record.id, record);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storable_text() {
        assert_eq!(storable("a\0b"), "a\u{FFFD}b");
        assert!(matches!(storable("plain 文字"), Cow::Borrowed(_)));
    }
}
