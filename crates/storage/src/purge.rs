//! Deletion of expired rows for `audit.purge`: runs (soft-deleted ones
//! included), audit entries, notifications with their outbox rows, and the
//! fire ledger's old records (each job's latest one stays: the next claim
//! of its schedule follows it).
//!
//! Each call deletes one batch and returns how many rows went, so the caller
//! decides when to stop (between batches) and no statement holds locks on
//! more than one batch of rows.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::entity::{audit_log, fire, notification, outbox, run, run_once_key};
use crate::timestamp::to_millis;
use crate::{StorageError, Store};

/// Ids per `IN (...)` list, well under every backend's bind-parameter limit.
const IN_CHUNK: usize = 500;

/// What one notification batch removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotificationPurge {
    pub notifications: u64,
    pub outbox: u64,
}

/// Purge access; obtained from [`Store::purge`].
pub struct PurgeRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn purge(&self) -> PurgeRepo<'_> {
        PurgeRepo { store: self }
    }
}

impl PurgeRepo<'_> {
    /// Deletes the rows with these ids in one transaction, a bounded `IN`
    /// list at a time.
    async fn delete_ids<E: EntityTrait>(
        &self,
        id: E::Column,
        ids: &[i64],
    ) -> Result<u64, StorageError> {
        let txn = self.store.begin_write().await?;
        let mut deleted = 0;
        for chunk in ids.chunks(IN_CHUNK) {
            deleted += E::delete_many()
                .filter(id.is_in(chunk.iter().copied()))
                .exec(&txn)
                .await?
                .rows_affected;
        }
        txn.commit().await?;
        Ok(deleted)
    }

    /// Deletes up to `limit` runs that started before `cutoff`, oldest
    /// first, whether soft-deleted or not. A run still `running` is left
    /// alone: the engine may be about to write its outcome.
    pub async fn runs_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u64,
    ) -> Result<u64, StorageError> {
        let ids: Vec<i64> = run::Entity::find()
            .select_only()
            .column(run::Column::Id)
            .filter(run::Column::StartedAt.lt(to_millis(cutoff)))
            .filter(run::Column::Status.ne("running"))
            .order_by_asc(run::Column::StartedAt)
            .order_by_asc(run::Column::Id)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        self.delete_ids::<run::Entity>(run::Column::Id, &ids).await
    }

    /// Looks at up to `limit` fire rows created before `cutoff` with an id
    /// above `after`, oldest first, and deletes them, except each job's
    /// latest record on its schedule (the chain's tip), run-once requests
    /// still pending and a backfill's fires still queued. Returns how many
    /// went and the last id looked at (`None` once no row is left to look
    /// at): the caller continues after it, so kept tips never stall the
    /// purge.
    pub async fn fires_before(
        &self,
        cutoff: DateTime<Utc>,
        after: i64,
        limit: u64,
    ) -> Result<(u64, Option<i64>), StorageError> {
        let rows: Vec<(i64, i64, i16, i64)> = fire::Entity::find()
            .select_only()
            .column(fire::Column::Id)
            .column(fire::Column::JobId)
            .column(fire::Column::Lane)
            .column(fire::Column::ScheduledAt)
            .filter(fire::Column::Id.gt(after))
            .filter(fire::Column::CreatedAt.lt(to_millis(cutoff)))
            // Waiting fires (run-once requests, a backfill's fires not
            // released yet) are still to run.
            .filter(fire::Column::State.is_not_in(["pending", "queued"]))
            .order_by_asc(fire::Column::Id)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        let Some(&(last, _, _, _)) = rows.last() else {
            return Ok((0, None));
        };
        let mut jobs: Vec<i64> = rows.iter().map(|r| r.1).collect();
        jobs.sort_unstable();
        jobs.dedup();
        let tips = self.store.fires().tips(&jobs).await?;
        let ids: Vec<i64> = rows
            .iter()
            .filter(|(_, job, lane, at)| {
                !(*lane == crate::fires::LANE_SCHEDULE
                    && tips.get(job).map(|t| to_millis(*t)) == Some(*at))
            })
            .map(|r| r.0)
            .collect();
        let deleted = self
            .delete_ids::<fire::Entity>(fire::Column::Id, &ids)
            .await?;
        Ok((deleted, Some(last)))
    }

    /// Deletes up to `limit` run-once `Idempotency-Key`s written before
    /// `cutoff` (expired: a request with one starts a new fire anyway).
    pub async fn run_once_keys_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u64,
    ) -> Result<u64, StorageError> {
        let cutoff = to_millis(cutoff);
        let rows: Vec<(String, String)> = run_once_key::Entity::find()
            .select_only()
            .column(run_once_key::Column::Caller)
            .column(run_once_key::Column::IdemKey)
            .filter(run_once_key::Column::CreatedAt.lt(cutoff))
            .order_by_asc(run_once_key::Column::CreatedAt)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        let mut deleted = 0;
        for (caller, key) in rows {
            // Still expired: a request may have just replaced it.
            deleted += run_once_key::Entity::delete_many()
                .filter(run_once_key::Column::Caller.eq(caller))
                .filter(run_once_key::Column::IdemKey.eq(key))
                .filter(run_once_key::Column::CreatedAt.lt(cutoff))
                .exec(self.store.connection())
                .await?
                .rows_affected;
        }
        Ok(deleted)
    }

    /// Deletes up to `limit` audit entries written before `cutoff`.
    pub async fn audit_logs_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u64,
    ) -> Result<u64, StorageError> {
        let ids: Vec<i64> = audit_log::Entity::find()
            .select_only()
            .column(audit_log::Column::Id)
            .filter(audit_log::Column::At.lt(to_millis(cutoff)))
            .order_by_asc(audit_log::Column::At)
            .order_by_asc(audit_log::Column::Id)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        self.delete_ids::<audit_log::Entity>(audit_log::Column::Id, &ids)
            .await
    }

    /// Deletes up to `limit` notifications created before `cutoff`, read or
    /// not, together with their outbox rows (one transaction, so no outbox
    /// row outlives its notification).
    pub async fn notifications_before(
        &self,
        cutoff: DateTime<Utc>,
        limit: u64,
    ) -> Result<NotificationPurge, StorageError> {
        let ids: Vec<i64> = notification::Entity::find()
            .select_only()
            .column(notification::Column::Id)
            .filter(notification::Column::CreatedAt.lt(to_millis(cutoff)))
            .order_by_asc(notification::Column::CreatedAt)
            .order_by_asc(notification::Column::Id)
            .limit(limit)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        let txn = self.store.begin_write().await?;
        let mut done = NotificationPurge::default();
        for chunk in ids.chunks(IN_CHUNK) {
            done.outbox += delete_outbox_of(&txn, chunk).await?;
            done.notifications += notification::Entity::delete_many()
                .filter(notification::Column::Id.is_in(chunk.iter().copied()))
                .exec(&txn)
                .await?
                .rows_affected;
        }
        txn.commit().await?;
        Ok(done)
    }
}

async fn delete_outbox_of<C: ConnectionTrait>(
    db: &C,
    notification_ids: &[i64],
) -> Result<u64, StorageError> {
    Ok(outbox::Entity::delete_many()
        .filter(outbox::Column::NotificationId.is_in(notification_ids.iter().copied()))
        .exec(db)
        .await?
        .rows_affected)
}
