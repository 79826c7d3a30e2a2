//! Backfills (issue 11, part 3): a request to fire a job's missed times,
//! and its fires in the ledger.
//!
//! Asking for a backfill writes, in one transaction, its row and one
//! `fires` row per missing time under the ledger's key of the schedule's
//! lane, `(job_id, lane 0, scheduled_at)`: the key the scheduled fire of
//! that time would take, so a time is recorded at most once whoever
//! writes it. A time is written only when no record covers it and the
//! schedule will not record it (it lies at or before the job's
//! `schedule_from`, or the job is disabled): the engine never claims such
//! a time. The fires wait `queued`; [`BackfillRepo::advance`] releases
//! them one at a time, oldest first, as `pending` fires that any instance
//! claims like a run-once request.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Value,
};

use crate::entity::{backfill, run};
use crate::fires::sql::Sql;
use crate::store::Backend;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Who cancels a backfill whose job is gone.
const SYSTEM_ACTOR: &str = "system";

/// Most rows per statement: well under every backend's bind limit.
const CHUNK: usize = 200;

/// A backfill as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct BackfillRecord {
    pub id: i64,
    pub job_id: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// How many fires it wrote.
    pub total: i32,
    /// `running`, `done` or `cancelled`.
    pub status: String,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub cancelled_by: Option<String>,
}

impl TryFrom<backfill::Model> for BackfillRecord {
    type Error = StorageError;

    fn try_from(m: backfill::Model) -> Result<BackfillRecord, StorageError> {
        Ok(BackfillRecord {
            id: m.id,
            job_id: m.job_id,
            from: from_millis(m.range_from)?,
            to: from_millis(m.range_to)?,
            total: m.total,
            status: m.status,
            requested_by: m.requested_by,
            created_at: from_millis(m.created_at)?,
            finished_at: m.finished_at.map(from_millis).transpose()?,
            cancelled_by: m.cancelled_by,
        })
    }
}

/// One fire of a backfill and how far it got.
#[derive(Debug, Clone, PartialEq)]
pub struct BackfillFire {
    pub fire_id: i64,
    pub scheduled_at: DateTime<Utc>,
    /// `queued` (waiting its turn), `pending` (released, not yet claimed),
    /// `claimed` or `done`.
    pub state: String,
    /// The latest run of the fire, when it has one.
    pub run_id: Option<i64>,
    pub run_status: Option<String>,
}

/// A backfill just written.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedBackfill {
    pub record: BackfillRecord,
    /// The times it fires, oldest first (those another record took
    /// meanwhile are left out).
    pub times: Vec<DateTime<Utc>>,
}

/// A cancelled backfill.
#[derive(Debug, Clone, PartialEq)]
pub struct CancelledBackfill {
    pub record: BackfillRecord,
    /// False when it had already ended (nothing was changed).
    pub first: bool,
    /// Fires not yet started, dropped from the ledger.
    pub dropped: u64,
    /// Its running runs, now asked to cancel.
    pub runs: Vec<i64>,
}

/// Backfills and their fires.
pub struct BackfillRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn backfills(&self) -> BackfillRepo<'_> {
        BackfillRepo { store: self }
    }
}

impl BackfillRepo<'_> {
    /// The records of the job's schedule (lane 0) that cover a time in
    /// `from ..= to`, as `(first, last)` time spans.
    pub async fn covered(
        &self,
        job_id: i64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<(DateTime<Utc>, DateTime<Utc>)>, StorageError> {
        let mut sql = Sql::new(self.store.backend());
        sql.push("SELECT COALESCE(first_at, scheduled_at) AS first_at, scheduled_at FROM fires WHERE job_id = ")
            .param(job_id)
            .push(" AND lane = 0 AND scheduled_at >= ")
            .param(to_millis(from))
            .push(" AND COALESCE(first_at, scheduled_at) <= ")
            .param(to_millis(to))
            .push(" ORDER BY scheduled_at");
        let rows = self
            .store
            .connection()
            .query_all_raw(sql.statement())
            .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    from_millis(r.try_get::<i64>("", "first_at")?)?,
                    from_millis(r.try_get::<i64>("", "scheduled_at")?)?,
                ))
            })
            .collect()
    }

    /// Writes a backfill of `times` (missing times of the job's schedule,
    /// oldest first) and its queued fires, in one transaction. A time that
    /// a record covers by now, or that the schedule now owns, is left
    /// out; a backfill left with no time is `done` at once.
    pub async fn create(
        &self,
        job_id: i64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        times: &[DateTime<Utc>],
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<CreatedBackfill, StorageError> {
        let backend = self.store.backend();
        let txn = self.store.begin_claim().await?;
        let row = backfill::ActiveModel {
            id: NotSet,
            job_id: Set(job_id),
            range_from: Set(to_millis(from)),
            range_to: Set(to_millis(to)),
            total: Set(0),
            status: Set("running".to_string()),
            requested_by: Set(crate::fires::storable(by).into_owned()),
            created_at: Set(to_millis(now)),
            finished_at: Set(None),
            cancelled_by: Set(None),
        }
        .insert(&txn)
        .await?;
        for chunk in times.chunks(CHUNK) {
            let rows = chunk
                .iter()
                .map(|t| vec![Value::from(to_millis(*t))])
                .collect();
            let mut sql = Sql::new(backend);
            sql.push(match backend {
                Backend::MySql => "INSERT IGNORE INTO fires ",
                _ => "INSERT INTO fires ",
            })
            .push(
                "(job_id, lane, \"trigger\", prev_at, first_at, scheduled_at, state, \
                 claimed_by, claimed_at, created_at, backfill_id) \
                 SELECT j.id, 0, 'backfill', NULL, u.at, u.at, 'queued', NULL, NULL, ",
            )
            .param(to_millis(now))
            .push(", ")
            .param(row.id)
            .push(" FROM ")
            .rows(&["at"], rows, "u")
            .push(" JOIN jobs j ON j.id = ")
            .param(job_id)
            // The schedule's own times (after its start, job enabled) are
            // the engine's; a time a catch-up covers has its record.
            .push(
                " WHERE (NOT j.enabled OR u.at <= j.schedule_from) \
                 AND NOT EXISTS (SELECT 1 FROM fires f WHERE f.job_id = j.id AND f.lane = 0 \
                 AND f.scheduled_at >= u.at AND COALESCE(f.first_at, f.scheduled_at) <= u.at) \
                 ORDER BY u.at",
            );
            if backend != Backend::MySql {
                sql.push(" ON CONFLICT DO NOTHING");
            }
            txn.execute_raw(sql.statement()).await?;
        }
        let times = fire_times(&txn, backend, row.id).await?;
        let total = i32::try_from(times.len()).unwrap_or(i32::MAX);
        let mut update = backfill::Entity::update_many()
            .col_expr(backfill::Column::Total, total.into())
            .filter(backfill::Column::Id.eq(row.id));
        if times.is_empty() {
            update = update
                .col_expr(backfill::Column::Status, "done".into())
                .col_expr(backfill::Column::FinishedAt, Some(to_millis(now)).into());
        }
        update.exec(&txn).await?;
        let record = backfill::Entity::find_by_id(row.id)
            .one(&txn)
            .await?
            .ok_or_else(|| StorageError::Corrupt(format!("backfill {} vanished", row.id)))?;
        txn.commit().await?;
        Ok(CreatedBackfill {
            record: record.try_into()?,
            times,
        })
    }

    /// A backfill of the job.
    pub async fn get(&self, job_id: i64, id: i64) -> Result<Option<BackfillRecord>, StorageError> {
        backfill::Entity::find_by_id(id)
            .filter(backfill::Column::JobId.eq(job_id))
            .one(self.store.connection())
            .await?
            .map(BackfillRecord::try_from)
            .transpose()
    }

    /// The fires of a backfill, oldest first, each with its latest run.
    pub async fn fires(&self, id: i64) -> Result<Vec<BackfillFire>, StorageError> {
        let mut sql = Sql::new(self.store.backend());
        sql.push("SELECT id, scheduled_at, state FROM fires WHERE backfill_id = ")
            .param(id)
            .push(" ORDER BY scheduled_at");
        let db = self.store.connection();
        let rows = db.query_all_raw(sql.statement()).await?;
        let mut fires = Vec::with_capacity(rows.len());
        for r in rows {
            fires.push(BackfillFire {
                fire_id: r.try_get("", "id")?,
                scheduled_at: from_millis(r.try_get("", "scheduled_at")?)?,
                state: r.try_get("", "state")?,
                run_id: None,
                run_status: None,
            });
        }
        let mut latest: HashMap<i64, (i32, i64, String)> = HashMap::new();
        let ids: Vec<i64> = fires.iter().map(|f| f.fire_id).collect();
        for chunk in ids.chunks(CHUNK) {
            let runs: Vec<(i64, i32, i64, String)> = run::Entity::find()
                .select_only()
                .column(run::Column::FireId)
                .column(run::Column::Attempt)
                .column(run::Column::Id)
                .column(run::Column::Status)
                .filter(run::Column::FireId.is_in(chunk.iter().copied()))
                .into_tuple()
                .all(db)
                .await?;
            for (fire_id, attempt, run_id, status) in runs {
                let slot = latest.entry(fire_id).or_insert((0, run_id, String::new()));
                if attempt >= slot.0 {
                    *slot = (attempt, run_id, status);
                }
            }
        }
        for fire in &mut fires {
            if let Some((_, run_id, status)) = latest.remove(&fire.fire_id) {
                fire.run_id = Some(run_id);
                fire.run_status = Some(status);
            }
        }
        Ok(fires)
    }

    /// The backfill a fire belongs to.
    pub async fn of_fire(&self, fire_id: i64) -> Result<Option<i64>, StorageError> {
        let mut sql = Sql::new(self.store.backend());
        sql.push("SELECT backfill_id FROM fires WHERE id = ")
            .param(fire_id);
        let row = self
            .store
            .connection()
            .query_one_raw(sql.statement())
            .await?;
        Ok(match row {
            Some(row) => row.try_get::<Option<i64>>("", "backfill_id")?,
            None => None,
        })
    }

    /// The backfills still running.
    pub async fn running(&self) -> Result<Vec<i64>, StorageError> {
        Ok(backfill::Entity::find()
            .select_only()
            .column(backfill::Column::Id)
            .filter(backfill::Column::Status.eq("running"))
            .order_by_asc(backfill::Column::Id)
            .into_tuple()
            .all(self.store.connection())
            .await?)
    }

    /// Moves a running backfill on: once its current fire has ended, the
    /// next queued one (oldest first) becomes `pending`, and its id is
    /// answered for the caller to claim; with none left the backfill is
    /// `done`. A claimed fire with no run `running` has ended when it is
    /// `finished` (its instance says so) or when `in_flight(fire, instance)`
    /// says no instance still has it (its instance is gone, say): a fire
    /// between two attempts has no running run but has not ended. The
    /// backfill's row is locked meanwhile, so one instance moves it at a
    /// time. A backfill whose job is gone is cancelled.
    pub async fn advance(
        &self,
        id: i64,
        finished: Option<i64>,
        in_flight: &(dyn Fn(i64, &str) -> bool + Sync),
        now: DateTime<Utc>,
    ) -> Result<Option<i64>, StorageError> {
        let backend = self.store.backend();
        let txn = self.store.begin_claim().await?;
        let mut sql = Sql::new(backend);
        sql.push("SELECT b.status AS status, j.id AS job FROM backfills b LEFT JOIN jobs j ON j.id = b.job_id WHERE b.id = ")
            .param(id)
            // SQLite's immediate transaction already holds the only write
            // lock; MySQL's `FOR UPDATE` also locks the job's row, which
            // is harmless in this short transaction.
            .push(match backend {
                Backend::Postgres => " FOR UPDATE OF b",
                Backend::MySql => " FOR UPDATE",
                Backend::Sqlite => "",
            });
        let Some(row) = txn.query_one_raw(sql.statement()).await? else {
            return Ok(None);
        };
        let status: String = row.try_get("", "status")?;
        if status != "running" {
            return Ok(None);
        }
        if row.try_get::<Option<i64>>("", "job")?.is_none() {
            end(&txn, backend, id, "cancelled", Some(SYSTEM_ACTOR), now).await?;
            txn.commit().await?;
            return Ok(None);
        }
        let mut sql = Sql::new(backend);
        sql.push(
            "SELECT f.id AS id, f.state AS state, f.claimed_by AS claimed_by, \
             (SELECT COUNT(*) FROM runs r WHERE r.fire_id = f.id AND r.status = 'running') AS running \
             FROM fires f WHERE f.backfill_id = ",
        )
        .param(id)
        .push(" AND f.state IN ('pending', 'claimed')");
        let active = txn.query_all_raw(sql.statement()).await?;
        let mut ended = Vec::new();
        for row in active {
            let fire: i64 = row.try_get("", "id")?;
            let state: String = row.try_get("", "state")?;
            let running: i64 = row.try_get("", "running")?;
            let claimed_by: Option<String> = row.try_get("", "claimed_by")?;
            let gone = finished == Some(fire)
                || !in_flight(fire, claimed_by.as_deref().unwrap_or_default());
            if state == "pending" || running > 0 || !gone {
                return Ok(None);
            }
            ended.push(fire);
        }
        if !ended.is_empty() {
            let mut sql = Sql::new(backend);
            sql.push("UPDATE fires SET state = 'done' WHERE id IN ")
                .list(ended.iter().copied());
            txn.execute_raw(sql.statement()).await?;
        }
        let mut sql = Sql::new(backend);
        sql.push("SELECT id FROM fires WHERE backfill_id = ")
            .param(id)
            .push(" AND state = 'queued' ORDER BY scheduled_at LIMIT 1");
        let next = match txn.query_one_raw(sql.statement()).await? {
            Some(row) => Some(row.try_get::<i64>("", "id")?),
            None => None,
        };
        match next {
            Some(fire) => {
                let mut sql = Sql::new(backend);
                sql.push("UPDATE fires SET state = 'pending' WHERE id = ")
                    .param(fire)
                    .push(" AND state = 'queued'");
                txn.execute_raw(sql.statement()).await?;
            }
            None => end(&txn, backend, id, "done", None, now).await?,
        }
        txn.commit().await?;
        Ok(next)
    }

    /// Cancels a running backfill of the job as a whole: its fires not yet
    /// started are dropped from the ledger (their times are missing again),
    /// and its running runs are asked to cancel like `POST
    /// /api/runs/{id}/cancel` does. `None` when there is no such backfill.
    pub async fn cancel(
        &self,
        job_id: i64,
        id: i64,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<CancelledBackfill>, StorageError> {
        let backend = self.store.backend();
        let txn = self.store.begin_claim().await?;
        let first = backfill::Entity::update_many()
            .col_expr(backfill::Column::Status, "cancelled".into())
            .col_expr(backfill::Column::FinishedAt, Some(to_millis(now)).into())
            .col_expr(
                backfill::Column::CancelledBy,
                Some(crate::fires::storable(by).into_owned()).into(),
            )
            .filter(backfill::Column::Id.eq(id))
            .filter(backfill::Column::JobId.eq(job_id))
            .filter(backfill::Column::Status.eq("running"))
            .exec(&txn)
            .await?
            .rows_affected
            == 1;
        let Some(record) = backfill::Entity::find_by_id(id)
            .filter(backfill::Column::JobId.eq(job_id))
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        let (mut dropped, mut runs) = (0, Vec::new());
        if first {
            let mut sql = Sql::new(backend);
            sql.push("DELETE FROM fires WHERE backfill_id = ")
                .param(id)
                .push(" AND state IN ('queued', 'pending')");
            dropped = txn.execute_raw(sql.statement()).await?.rows_affected();
            let mut sql = Sql::new(backend);
            sql.push(
                "SELECT r.id AS id FROM runs r JOIN fires f ON f.id = r.fire_id \
                 WHERE r.status = 'running' AND f.backfill_id = ",
            )
            .param(id)
            .push(" ORDER BY r.id");
            for row in txn.query_all_raw(sql.statement()).await? {
                runs.push(row.try_get::<i64>("", "id")?);
            }
            if !runs.is_empty() {
                run::Entity::update_many()
                    .col_expr(run::Column::CancelRequestedAt, Some(to_millis(now)).into())
                    .col_expr(
                        run::Column::CancelledBy,
                        Some(crate::fires::storable(by).into_owned()).into(),
                    )
                    .filter(run::Column::Id.is_in(runs.iter().copied()))
                    .filter(run::Column::Status.eq("running"))
                    .filter(run::Column::CancelRequestedAt.is_null())
                    .exec(&txn)
                    .await?;
            }
        }
        txn.commit().await?;
        Ok(Some(CancelledBackfill {
            record: record.try_into()?,
            first,
            dropped,
            runs,
        }))
    }
}

/// The times of a backfill's fires, oldest first.
async fn fire_times(
    txn: &DatabaseTransaction,
    backend: Backend,
    id: i64,
) -> Result<Vec<DateTime<Utc>>, StorageError> {
    let mut sql = Sql::new(backend);
    sql.push("SELECT scheduled_at FROM fires WHERE backfill_id = ")
        .param(id)
        .push(" ORDER BY scheduled_at");
    txn.query_all_raw(sql.statement())
        .await?
        .iter()
        .map(|r| from_millis(r.try_get::<i64>("", "scheduled_at")?))
        .collect()
}

/// Ends a backfill (`done`, or `cancelled` by `by`); its fires not yet
/// started are dropped.
async fn end(
    txn: &DatabaseTransaction,
    backend: Backend,
    id: i64,
    status: &str,
    by: Option<&str>,
    now: DateTime<Utc>,
) -> Result<(), StorageError> {
    backfill::Entity::update_many()
        .col_expr(backfill::Column::Status, status.into())
        .col_expr(backfill::Column::FinishedAt, Some(to_millis(now)).into())
        .col_expr(backfill::Column::CancelledBy, by.map(str::to_string).into())
        .filter(backfill::Column::Id.eq(id))
        .filter(backfill::Column::Status.eq("running"))
        .exec(txn)
        .await?;
    let mut sql = Sql::new(backend);
    sql.push("DELETE FROM fires WHERE backfill_id = ")
        .param(id)
        .push(" AND state = 'queued'");
    txn.execute_raw(sql.statement()).await?;
    Ok(())
}
