//! Run-once requests: a pending manual fire with who asked and where its
//! end is reported, and the caller's `Idempotency-Key` naming it.
//!
//! The key row is written first, in the fire's transaction: its primary key
//! `(caller, idem_key)` lets one of two concurrent requests with the same
//! key through; the other waits for it (PostgreSQL, MySQL) or runs after it
//! (SQLite writers are serial), fails on the key, rolls back its own fire
//! and answers the winner's. Nothing else is read or locked before that
//! insert, so no gap lock on MySQL can make the two deadlock.

use chrono::{DateTime, Duration, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, TransactionSession, TransactionTrait,
};

use super::{FireRepo, LANE_MANUAL, Trigger};
use crate::StorageError;
use crate::entity::{fire, run, run_once_key};
use crate::error::is_unique_violation;
use crate::timestamp::{from_millis, to_millis};

/// Times a keyed request tries again when the row it lost to disappeared
/// (the winner rolled back, or its key expired meanwhile).
const KEY_ROUNDS: usize = 3;

/// A "run once" request.
#[derive(Debug, Clone, Copy)]
pub struct ManualRequest<'a> {
    pub job_id: i64,
    pub now: DateTime<Utc>,
    /// The W3C trace context of the request: the fire's trace continues it.
    pub traceparent: Option<&'a str>,
    /// A user's `sub`, or `apikey:<name>`.
    pub started_by: Option<&'a str>,
    /// Where the fire's end is reported.
    pub callback_url: Option<&'a str>,
}

/// A caller's `Idempotency-Key`.
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyKey<'a> {
    pub caller: &'a str,
    pub key: &'a str,
    /// Keys written longer ago than this are ignored (and replaced).
    pub ttl: Duration,
}

/// The fire a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedFire {
    pub job_id: i64,
    pub fire_id: i64,
}

/// What a keyed request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManualQueued {
    /// A new pending fire.
    Created(i64),
    /// The key already names this fire (of this job or another one).
    Existing(KeyedFire),
}

/// Where a run-once fire's end is reported, with how it ended as the run
/// log has it.
#[derive(Debug, Clone, PartialEq)]
pub struct FireCallback {
    pub url: String,
    pub job_id: i64,
    /// The start of its first attempt.
    pub started_at: Option<DateTime<Utc>>,
    /// Its last attempt: number, status, error and end (`None` while it
    /// has no run, or its last one is still running).
    pub last: Option<LastAttempt>,
}

/// The last attempt of a fire.
#[derive(Debug, Clone, PartialEq)]
pub struct LastAttempt {
    pub attempt: i32,
    pub status: String,
    pub error: String,
    pub finished_at: DateTime<Utc>,
}

impl FireRepo<'_> {
    /// Queues a run-once request as a pending manual fire (see
    /// [`FireRepo::create_manual`]), recording who asked and where its end
    /// is reported.
    pub async fn create_manual_request(
        &self,
        request: &ManualRequest<'_>,
    ) -> Result<i64, StorageError> {
        insert_manual(self.store.connection(), request).await
    }

    /// The fire the caller's key names, unless the key is older than its
    /// TTL at `now`.
    pub async fn keyed(
        &self,
        key: &IdempotencyKey<'_>,
        now: DateTime<Utc>,
    ) -> Result<Option<KeyedFire>, StorageError> {
        fresh_key(self.store.connection(), key, now).await
    }

    /// [`FireRepo::create_manual_request`] under the caller's key: the
    /// first request with a key creates the fire, every later one within
    /// the TTL (concurrent ones included) gets [`ManualQueued::Existing`].
    pub async fn create_manual_keyed(
        &self,
        request: &ManualRequest<'_>,
        key: &IdempotencyKey<'_>,
    ) -> Result<ManualQueued, StorageError> {
        let db = self.store.connection();
        let cutoff = to_millis(request.now - key.ttl);
        for _ in 0..KEY_ROUNDS {
            if let Some(found) = fresh_key(db, key, request.now).await? {
                return Ok(ManualQueued::Existing(found));
            }
            // An expired key is replaced; outside the transaction so that
            // it takes no lock another request with the key could wait on.
            run_once_key::Entity::delete_many()
                .filter(run_once_key::Column::Caller.eq(key.caller))
                .filter(run_once_key::Column::IdemKey.eq(key.key))
                .filter(run_once_key::Column::CreatedAt.lt(cutoff))
                .exec(db)
                .await?;
            let txn = self.store.begin_write().await?;
            let claimed = run_once_key::ActiveModel {
                caller: Set(key.caller.to_owned()),
                idem_key: Set(key.key.to_owned()),
                job_id: Set(request.job_id),
                // Set below, once the fire has its id.
                fire_id: Set(0),
                created_at: Set(to_millis(request.now)),
            }
            .insert(&txn)
            .await;
            match claimed {
                Ok(_) => {}
                Err(e) if is_unique_violation(&e) => {
                    // Lost to a request with the same key: its fire stands.
                    txn.rollback().await?;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let fire_id = insert_manual(&txn, request).await?;
            run_once_key::Entity::update_many()
                .col_expr(run_once_key::Column::FireId, fire_id.into())
                .filter(run_once_key::Column::Caller.eq(key.caller))
                .filter(run_once_key::Column::IdemKey.eq(key.key))
                .exec(&txn)
                .await?;
            txn.commit().await?;
            return Ok(ManualQueued::Created(fire_id));
        }
        Err(StorageError::Corrupt(format!(
            "the Idempotency-Key of caller {} kept changing hands",
            key.caller
        )))
    }

    /// Who asked for a run-once fire; `None` for other fires.
    pub async fn started_by(&self, fire_id: i64) -> Result<Option<String>, StorageError> {
        let found: Option<Option<String>> = fire::Entity::find_by_id(fire_id)
            .select_only()
            .column(fire::Column::StartedBy)
            .into_tuple()
            .one(self.store.connection())
            .await?;
        Ok(found.flatten())
    }

    /// The run-once fires with a callback among the runs a sweep has just
    /// closed: ended `failed` at `closed_at` with the sweep's `reason`, by
    /// the given instances (any when `None`). No process of theirs will
    /// report them, so the sweep does; one that closed nothing need not ask.
    pub async fn callbacks_of_swept(
        &self,
        instances: Option<&[String]>,
        reason: &str,
        closed_at: DateTime<Utc>,
    ) -> Result<Vec<i64>, StorageError> {
        let db = self.store.connection();
        let mut query = run::Entity::find()
            .select_only()
            .column(run::Column::FireId)
            .distinct()
            .filter(run::Column::Status.eq(super::RunStatus::Failed.as_str()))
            .filter(run::Column::FinishedAt.eq(to_millis(closed_at)))
            .filter(run::Column::Error.eq(reason))
            .filter(run::Column::Trigger.eq(Trigger::Manual.as_str()));
        if let Some(instances) = instances {
            query = query.filter(run::Column::Instance.is_in(instances.iter().cloned()));
        }
        let fires: Vec<i64> = query.into_tuple().all(db).await?;
        let mut out = Vec::new();
        for chunk in fires.chunks(super::claim::MAX_BATCH) {
            let ids: Vec<i64> = fire::Entity::find()
                .select_only()
                .column(fire::Column::Id)
                .filter(fire::Column::Id.is_in(chunk.iter().copied()))
                .filter(fire::Column::CallbackUrl.is_not_null())
                .into_tuple()
                .all(db)
                .await?;
            out.extend(ids);
        }
        Ok(out)
    }

    /// Where the fire's end is reported, if anywhere, with how it ended.
    pub async fn callback(&self, fire_id: i64) -> Result<Option<FireCallback>, StorageError> {
        let db = self.store.connection();
        let found: Option<(i64, Option<String>)> = fire::Entity::find_by_id(fire_id)
            .select_only()
            .column(fire::Column::JobId)
            .column(fire::Column::CallbackUrl)
            .into_tuple()
            .one(db)
            .await?;
        let Some((job_id, Some(url))) = found else {
            return Ok(None);
        };
        // Not the output: it can be long and the report does not carry it.
        let runs: Vec<(i32, String, String, i64, Option<i64>)> = run::Entity::find()
            .select_only()
            .column(run::Column::Attempt)
            .column(run::Column::Status)
            .column(run::Column::Error)
            .column(run::Column::StartedAt)
            .column(run::Column::FinishedAt)
            .filter(run::Column::FireId.eq(fire_id))
            .order_by_asc(run::Column::Attempt)
            .into_tuple()
            .all(db)
            .await?;
        let started_at = runs
            .iter()
            .map(|r| r.3)
            .min()
            .map(from_millis)
            .transpose()?;
        let last = match runs.into_iter().last() {
            Some((attempt, status, error, started, finished))
                if status != super::RunStatus::Running.as_str() =>
            {
                Some(LastAttempt {
                    attempt,
                    status,
                    error,
                    finished_at: from_millis(finished.unwrap_or(started))?,
                })
            }
            _ => None,
        };
        Ok(Some(FireCallback {
            url,
            job_id,
            started_at,
            last,
        }))
    }
}

async fn fresh_key<C: ConnectionTrait>(
    db: &C,
    key: &IdempotencyKey<'_>,
    now: DateTime<Utc>,
) -> Result<Option<KeyedFire>, StorageError> {
    let found = run_once_key::Entity::find()
        .filter(run_once_key::Column::Caller.eq(key.caller))
        .filter(run_once_key::Column::IdemKey.eq(key.key))
        .filter(run_once_key::Column::CreatedAt.gte(to_millis(now - key.ttl)))
        .one(db)
        .await?;
    Ok(found.map(|k| KeyedFire {
        job_id: k.job_id,
        fire_id: k.fire_id,
    }))
}

/// Inserts the pending fire; two requests in the same millisecond get
/// distinct times so both are kept. Each try is a savepoint inside a
/// transaction, so a clash does not abort it on PostgreSQL.
async fn insert_manual<C: ConnectionTrait + TransactionTrait>(
    db: &C,
    request: &ManualRequest<'_>,
) -> Result<i64, StorageError> {
    let mut at = to_millis(request.now);
    for _ in 0..100 {
        let model = fire::ActiveModel {
            id: NotSet,
            job_id: Set(request.job_id),
            trigger: Set(Trigger::Manual.as_str().to_string()),
            lane: Set(LANE_MANUAL),
            prev_at: Set(None),
            first_at: Set(Some(at)),
            scheduled_at: Set(at),
            state: Set("pending".to_string()),
            claimed_by: Set(None),
            claimed_at: Set(None),
            created_at: Set(to_millis(request.now)),
            traceparent: Set(request.traceparent.map(str::to_string)),
            started_by: Set(request.started_by.map(str::to_string)),
            callback_url: Set(request.callback_url.map(str::to_string)),
        };
        let try_once = db.begin().await?;
        match model.insert(&try_once).await {
            Ok(fire) => {
                try_once.commit().await?;
                return Ok(fire.id);
            }
            Err(e) if is_unique_violation(&e) => {
                try_once.rollback().await?;
                at += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(StorageError::Corrupt(format!(
        "cannot find a free millisecond for a manual fire of job {}",
        request.job_id
    )))
}
