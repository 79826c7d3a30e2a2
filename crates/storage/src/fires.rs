//! The fire ledger and the run writes of the execution engine.
//!
//! A fire is claimed by inserting its `fires` row under the unique key
//! `(job_id, trigger, scheduled_at)`; the instance whose insert lands runs
//! it, every other instance sees zero rows and does nothing. For scheduled
//! fires the same statement re-checks that the job is still enabled at the
//! version the timer armed, so a stale timer never fires an old schedule.
//! The first run row is written in the same transaction.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Statement, Value,
};

use crate::entity::{fire, run};
use crate::error::is_unique_violation;
use crate::store::Backend;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// A run's status in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    Success,
    Failed,
    Skipped,
    Timeout,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Failed => "failed",
            RunStatus::Skipped => "skipped",
            RunStatus::Timeout => "timeout",
        }
    }
}

/// What caused a fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Schedule,
    Manual,
    Misfire,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Misfire => "misfire",
        }
    }
}

/// The fire to claim.
#[derive(Debug, Clone)]
pub struct FireClaim<'a> {
    pub job_id: i64,
    /// For scheduled fires: the job must still be enabled at this version.
    /// `None` claims whatever the job's state (misfire catch-ups check the
    /// job themselves).
    pub armed_version: Option<i64>,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
    pub instance: &'a str,
    pub now: DateTime<Utc>,
}

/// The run row recorded together with a claim or a new attempt.
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
    /// `Running`, or a final status for a skip or a run that cannot start.
    pub status: RunStatus,
    pub output: String,
    pub error: String,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd {
    pub status: RunStatus,
    pub finished_at: DateTime<Utc>,
    /// Measured by the executor on a monotonic clock.
    pub duration_ms: i64,
    pub output: String,
    pub error: String,
}

/// A fire waiting for an instance ("run once" requests).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFire {
    pub id: i64,
    pub job_id: i64,
    pub scheduled_at: DateTime<Utc>,
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

/// Quotes an identifier; `trigger` is reserved in MySQL.
fn ident(backend: Backend, name: &str) -> String {
    match backend {
        Backend::MySql => format!("`{name}`"),
        Backend::Postgres | Backend::Sqlite => format!("\"{name}\""),
    }
}

/// The `n`-th placeholder (1-based) in the backend's syntax.
fn ph(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Postgres => format!("${n}"),
        Backend::MySql | Backend::Sqlite => "?".to_string(),
    }
}

fn db_backend(backend: Backend) -> sea_orm::DatabaseBackend {
    match backend {
        Backend::Postgres => sea_orm::DatabaseBackend::Postgres,
        Backend::MySql => sea_orm::DatabaseBackend::MySql,
        Backend::Sqlite => sea_orm::DatabaseBackend::Sqlite,
    }
}

fn run_model(start: &RunStart<'_>, fire_id: i64) -> run::ActiveModel {
    let finished = start.status != RunStatus::Running;
    let started = to_millis(start.started_at);
    run::ActiveModel {
        id: NotSet,
        fire_id: Set(fire_id),
        job_id: Set(start.job_id),
        job_name: Set(start.job_name.to_string()),
        handler: Set(start.handler.to_string()),
        trigger: Set(start.trigger.as_str().to_string()),
        scheduled_at: Set(to_millis(start.scheduled_at)),
        attempt: Set(start.attempt),
        status: Set(start.status.as_str().to_string()),
        started_at: Set(started),
        finished_at: Set(finished.then_some(started)),
        duration_ms: Set(finished.then_some(0)),
        instance: Set(start.instance.to_string()),
        output: Set(start.output.clone()),
        error: Set(start.error.clone()),
        deleted_at: Set(None),
    }
}

impl FireRepo<'_> {
    /// Claims a fire and records its first run in one transaction.
    ///
    /// `None` when another instance claimed it first, or when the job is no
    /// longer enabled at the armed version.
    pub async fn claim(
        &self,
        claim: &FireClaim<'_>,
        first: &RunStart<'_>,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let backend = self.store.backend();
        if backend == Backend::Postgres {
            return self.claim_postgres(claim, first).await;
        }
        let txn = self.store.begin_write().await?;
        let trigger = ident(backend, "trigger");
        let mut values: Vec<Value> = vec![
            claim.trigger.as_str().into(),
            to_millis(claim.scheduled_at).into(),
            claim.instance.into(),
            to_millis(claim.now).into(),
            claim.job_id.into(),
        ];
        let mut condition = format!("id = {}", ph(backend, 5));
        if let Some(version) = claim.armed_version {
            values.push(true.into());
            values.push(version.into());
            condition.push_str(&format!(
                " AND enabled = {} AND version = {}",
                ph(backend, 6),
                ph(backend, 7)
            ));
        }
        let columns =
            format!("(job_id, {trigger}, scheduled_at, state, claimed_by, claimed_at, created_at)");
        let select = format!(
            "SELECT id, {}, {}, 'claimed', {}, {}, {} FROM jobs WHERE {condition}",
            ph(backend, 1),
            ph(backend, 2),
            ph(backend, 3),
            ph(backend, 4),
            // created_at repeats claimed_at; MySQL and SQLite bind `?` in
            // order, so the value is pushed again below for them.
            match backend {
                Backend::Postgres => ph(backend, 4),
                _ => "?".to_string(),
            },
        );
        if backend != Backend::Postgres {
            values.insert(4, to_millis(claim.now).into());
        }
        let fire_id = match backend {
            Backend::Sqlite | Backend::Postgres => {
                let sql = format!(
                    "INSERT INTO fires {columns} {select} ON CONFLICT DO NOTHING RETURNING id"
                );
                let row = txn
                    .query_one_raw(Statement::from_sql_and_values(
                        db_backend(backend),
                        sql,
                        values,
                    ))
                    .await?;
                match row {
                    Some(row) => Some(row.try_get::<i64>("", "id")?),
                    None => None,
                }
            }
            Backend::MySql => {
                let sql = format!("INSERT IGNORE INTO fires {columns} {select}");
                let result = txn
                    .execute_raw(Statement::from_sql_and_values(
                        db_backend(backend),
                        sql,
                        values,
                    ))
                    .await?;
                (result.rows_affected() == 1).then(|| result.last_insert_id() as i64)
            }
        };
        let Some(fire_id) = fire_id else {
            txn.rollback().await?;
            return Ok(None);
        };
        let run = run_model(first, fire_id).insert(&txn).await?;
        txn.commit().await?;
        Ok(Some((fire_id, run.id)))
    }

    /// PostgreSQL claims and records the first run in one statement: one
    /// round trip instead of four.
    async fn claim_postgres(
        &self,
        claim: &FireClaim<'_>,
        first: &RunStart<'_>,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let finished = first.status != RunStatus::Running;
        let started = to_millis(first.started_at);
        let mut values: Vec<Value> = vec![
            claim.trigger.as_str().into(),        // $1
            to_millis(claim.scheduled_at).into(), // $2
            claim.instance.into(),                // $3
            to_millis(claim.now).into(),          // $4
            claim.job_id.into(),                  // $5
            first.job_name.into(),                // $6
            first.handler.into(),                 // $7
            first.attempt.into(),                 // $8
            first.status.as_str().into(),         // $9
            started.into(),                       // $10
            finished.then_some(started).into(),   // $11
            finished.then_some(0i64).into(),      // $12
            first.instance.into(),                // $13
            first.output.clone().into(),          // $14
            first.error.clone().into(),           // $15
        ];
        let mut condition = "id = $5".to_string();
        if let Some(version) = claim.armed_version {
            values.push(true.into());
            values.push(version.into());
            condition.push_str(" AND enabled = $16 AND version = $17");
        }
        let sql = format!(
            "WITH f AS (\
               INSERT INTO fires (job_id, \"trigger\", scheduled_at, state, claimed_by, claimed_at, created_at) \
               SELECT id, $1, $2, 'claimed', $3, $4, $4 FROM jobs WHERE {condition} \
               ON CONFLICT DO NOTHING RETURNING id, job_id, scheduled_at) \
             INSERT INTO runs (fire_id, job_id, job_name, handler, \"trigger\", scheduled_at, attempt, status, \
               started_at, finished_at, duration_ms, instance, output, error, deleted_at) \
             SELECT f.id, f.job_id, $6, $7, $1, f.scheduled_at, $8, $9, $10, $11, $12, $13, $14, $15, NULL FROM f \
             RETURNING fire_id, id"
        );
        let row = self
            .store
            .connection()
            .query_one_raw(Statement::from_sql_and_values(
                sea_orm::DatabaseBackend::Postgres,
                sql,
                values,
            ))
            .await?;
        match row {
            Some(row) => Ok(Some((
                row.try_get::<i64>("", "fire_id")?,
                row.try_get::<i64>("", "id")?,
            ))),
            None => Ok(None),
        }
    }

    /// Records a further attempt (or a skip) of a fire already claimed.
    pub async fn start_run(&self, fire_id: i64, start: &RunStart<'_>) -> Result<i64, StorageError> {
        let run = run_model(start, fire_id)
            .insert(self.store.connection())
            .await?;
        Ok(run.id)
    }

    /// Writes how a run ended; only a run still `running` is changed, so a
    /// run closed by crash recovery is never overwritten.
    pub async fn finish_run(&self, run_id: i64, end: &RunEnd) -> Result<bool, StorageError> {
        let result = run::Entity::update_many()
            .col_expr(run::Column::Status, end.status.as_str().into())
            .col_expr(run::Column::FinishedAt, to_millis(end.finished_at).into())
            .col_expr(run::Column::DurationMs, end.duration_ms.max(0).into())
            .col_expr(run::Column::Output, end.output.clone().into())
            .col_expr(run::Column::Error, end.error.clone().into())
            .filter(run::Column::Id.eq(run_id))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .exec(self.store.connection())
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Queues a "run once" request as a pending manual fire. Two requests in
    /// the same millisecond get distinct times so both are kept.
    pub async fn create_manual(
        &self,
        job_id: i64,
        now: DateTime<Utc>,
    ) -> Result<i64, StorageError> {
        let mut at = to_millis(now);
        for _ in 0..100 {
            let model = fire::ActiveModel {
                id: NotSet,
                job_id: Set(job_id),
                trigger: Set(Trigger::Manual.as_str().to_string()),
                scheduled_at: Set(at),
                state: Set("pending".to_string()),
                claimed_by: Set(None),
                claimed_at: Set(None),
                created_at: Set(to_millis(now)),
            };
            match model.insert(self.store.connection()).await {
                Ok(fire) => return Ok(fire.id),
                Err(e) if is_unique_violation(&e) => at += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StorageError::Corrupt(format!(
            "cannot find a free millisecond for a manual fire of job {job_id}"
        )))
    }

    /// Takes a pending fire for this instance; false when another took it.
    pub async fn claim_pending(
        &self,
        fire_id: i64,
        instance: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StorageError> {
        let result = fire::Entity::update_many()
            .col_expr(fire::Column::State, "claimed".into())
            .col_expr(fire::Column::ClaimedBy, Some(instance.to_string()).into())
            .col_expr(fire::Column::ClaimedAt, Some(to_millis(now)).into())
            .filter(fire::Column::Id.eq(fire_id))
            .filter(fire::Column::State.eq("pending"))
            .exec(self.store.connection())
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// True when the fire already has its claim row (a backup owner looks
    /// before it does the work of claiming).
    pub async fn is_claimed(
        &self,
        job_id: i64,
        trigger: Trigger,
        scheduled_at: DateTime<Utc>,
    ) -> Result<bool, StorageError> {
        let found = fire::Entity::find()
            .select_only()
            .column(fire::Column::Id)
            .filter(fire::Column::JobId.eq(job_id))
            .filter(fire::Column::Trigger.eq(trigger.as_str()))
            .filter(fire::Column::ScheduledAt.eq(to_millis(scheduled_at)))
            .into_tuple::<i64>()
            .one(self.store.connection())
            .await?;
        Ok(found.is_some())
    }

    /// Takes a pending fire and records its first run in one transaction,
    /// so a taken fire always has its run row. `None` when another instance
    /// took it.
    pub async fn claim_pending_with_run(
        &self,
        fire_id: i64,
        instance: &str,
        now: DateTime<Utc>,
        first: &RunStart<'_>,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let txn = self.store.begin_write().await?;
        let taken = fire::Entity::update_many()
            .col_expr(fire::Column::State, "claimed".into())
            .col_expr(fire::Column::ClaimedBy, Some(instance.to_string()).into())
            .col_expr(fire::Column::ClaimedAt, Some(to_millis(now)).into())
            .filter(fire::Column::Id.eq(fire_id))
            .filter(fire::Column::State.eq("pending"))
            .exec(&txn)
            .await?;
        if taken.rows_affected != 1 {
            txn.rollback().await?;
            return Ok(None);
        }
        let run = run_model(first, fire_id).insert(&txn).await?;
        txn.commit().await?;
        Ok(Some((fire_id, run.id)))
    }

    /// True while a run of the job other than `except_run` is `running`
    /// (on any instance).
    pub async fn has_other_running(
        &self,
        job_id: i64,
        except_run: i64,
    ) -> Result<bool, StorageError> {
        let found = run::Entity::find()
            .select_only()
            .column(run::Column::Id)
            .filter(run::Column::JobId.eq(job_id))
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::Id.ne(except_run))
            .into_tuple::<i64>()
            .one(self.store.connection())
            .await?;
        Ok(found.is_some())
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
        let result = run::Entity::update_many()
            .col_expr(run::Column::Status, RunStatus::Failed.as_str().into())
            .col_expr(run::Column::FinishedAt, Some(to_millis(now)).into())
            .col_expr(run::Column::Error, reason.to_string().into())
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()))
            .filter(run::Column::Instance.is_not_in(live.iter().cloned()))
            .filter(run::Column::StartedAt.lt(to_millis(started_before)))
            .exec(self.store.connection())
            .await?;
        Ok(result.rows_affected)
    }

    /// One fire, if it is still pending.
    pub async fn pending_by_id(&self, fire_id: i64) -> Result<Option<PendingFire>, StorageError> {
        let row = fire::Entity::find_by_id(fire_id)
            .filter(fire::Column::State.eq("pending"))
            .one(self.store.connection())
            .await?;
        row.map(|f| {
            Ok(PendingFire {
                id: f.id,
                job_id: f.job_id,
                scheduled_at: from_millis(f.scheduled_at)?,
            })
        })
        .transpose()
    }

    /// Pending fires, oldest first.
    pub async fn pending(&self, limit: u64) -> Result<Vec<PendingFire>, StorageError> {
        let rows = fire::Entity::find()
            .filter(fire::Column::State.eq("pending"))
            .order_by_asc(fire::Column::Id)
            .limit(limit)
            .all(self.store.connection())
            .await?;
        rows.into_iter()
            .map(|f| {
                Ok(PendingFire {
                    id: f.id,
                    job_id: f.job_id,
                    scheduled_at: from_millis(f.scheduled_at)?,
                })
            })
            .collect()
    }

    /// How many "run once" fires of a job wait for an instance (read-only;
    /// the API bounds the queue with it). The `(job, trigger, time)` unique
    /// index narrows the scan to the job's manual fires.
    pub async fn count_pending_manual(&self, job_id: i64) -> Result<u64, StorageError> {
        let pending = fire::Entity::find()
            .filter(fire::Column::JobId.eq(job_id))
            .filter(fire::Column::Trigger.eq(Trigger::Manual.as_str()))
            .filter(fire::Column::State.eq("pending"));
        Ok(sea_orm::PaginatorTrait::count(pending, self.store.connection()).await?)
    }

    /// The latest scheduled or catch-up fire time of every job that has one.
    pub async fn last_fire_times(&self) -> Result<HashMap<i64, DateTime<Utc>>, StorageError> {
        let rows: Vec<(i64, Option<i64>)> = fire::Entity::find()
            .select_only()
            .column(fire::Column::JobId)
            .column_as(fire::Column::ScheduledAt.max(), "last")
            .filter(
                fire::Column::Trigger
                    .is_in([Trigger::Schedule.as_str(), Trigger::Misfire.as_str()]),
            )
            .group_by(fire::Column::JobId)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        let mut out = HashMap::with_capacity(rows.len());
        for (job_id, last) in rows {
            if let Some(last) = last {
                out.insert(job_id, from_millis(last)?);
            }
        }
        Ok(out)
    }

    /// Closes runs left `running` by instances that are gone: the given
    /// instances, or every instance when `instances` is `None`.
    pub async fn close_running(
        &self,
        instances: Option<&[String]>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, StorageError> {
        let mut query = run::Entity::update_many()
            .col_expr(run::Column::Status, RunStatus::Failed.as_str().into())
            .col_expr(run::Column::FinishedAt, Some(to_millis(now)).into())
            .col_expr(run::Column::Error, reason.to_string().into())
            .filter(run::Column::Status.eq(RunStatus::Running.as_str()));
        if let Some(instances) = instances {
            query = query.filter(run::Column::Instance.is_in(instances.iter().cloned()));
        }
        Ok(query.exec(self.store.connection()).await?.rows_affected)
    }

    /// How many runs a fire has, by status (used by tests and the misfire
    /// check).
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
}
