//! The webhook outbox that `notify.dispatch` drains.
//!
//! A claimed row carries a lease (`status = sending`, `next_attempt_at` =
//! lease expiry): if the sender dies mid-send, the lease expires and the row
//! is due again, so nothing is lost (delivery is at least once; receivers
//! de-duplicate by notification id). The lease expiry doubles as a fencing
//! token: only the holder of the current lease can record the outcome.

use chrono::{DateTime, Duration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, Condition, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};

use crate::entity::outbox;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Attempts per outbox row before it is `failed` for good.
pub const OUTBOX_MAX_ATTEMPTS: i32 = 3;
/// Longest `last_error` kept.
const MAX_LAST_ERROR_CHARS: usize = 2_000;

/// How long to wait after the `attempts`-th failed attempt: 1 minute, then
/// 5, so a receiver that is briefly down gets time to come back.
pub fn outbox_retry_delay(attempts: i32) -> Duration {
    if attempts <= 1 {
        Duration::minutes(1)
    } else {
        Duration::minutes(5)
    }
}

/// Where an outbox row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxStatus {
    /// Waiting for `next_attempt_at`.
    Pending,
    /// Claimed by a sender until `next_attempt_at` (the lease expiry).
    Sending,
    /// Delivered.
    Sent,
    /// Gave up after [`OUTBOX_MAX_ATTEMPTS`] attempts.
    Failed,
}

impl OutboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OutboxStatus::Pending => "pending",
            OutboxStatus::Sending => "sending",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<OutboxStatus> {
        [
            OutboxStatus::Pending,
            OutboxStatus::Sending,
            OutboxStatus::Sent,
            OutboxStatus::Failed,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// A webhook delivery of one notification.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRecord {
    pub id: i64,
    pub notification_id: i64,
    /// The JSON body to POST.
    pub payload: String,
    pub status: OutboxStatus,
    /// Finished attempts (a sender that died mid-send does not count).
    pub attempts: i32,
    /// When the row is due; while `Sending`, when the lease expires.
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    /// The alert channel it goes to; `None` for `notify.webhook_url`.
    pub channel_id: Option<i64>,
    /// A run-once callback's URL (then `channel_id` is `None`).
    pub url: Option<String>,
}

impl TryFrom<outbox::Model> for OutboxRecord {
    type Error = StorageError;

    fn try_from(m: outbox::Model) -> Result<Self, Self::Error> {
        Ok(OutboxRecord {
            status: OutboxStatus::parse(&m.status).ok_or_else(|| {
                StorageError::Corrupt(format!("outbox {}: unknown status {:?}", m.id, m.status))
            })?,
            id: m.id,
            notification_id: m.notification_id,
            payload: m.payload,
            attempts: m.attempts,
            next_attempt_at: from_millis(m.next_attempt_at)?,
            last_error: m.last_error,
            created_at: from_millis(m.created_at)?,
            sent_at: m.sent_at.map(from_millis).transpose()?,
            channel_id: m.channel_id,
            url: m.url,
        })
    }
}

/// Outbox access; obtained from [`Store::outbox`].
pub struct OutboxRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn outbox(&self) -> OutboxRepo<'_> {
        OutboxRepo { store: self }
    }
}

impl OutboxRepo<'_> {
    pub async fn get(&self, id: i64) -> Result<Option<OutboxRecord>, StorageError> {
        outbox::Entity::find_by_id(id)
            .one(self.store.connection())
            .await?
            .map(OutboxRecord::try_from)
            .transpose()
    }

    /// Claims up to `limit` due rows (pending and due, or sending with an
    /// expired lease), oldest due first: each becomes `Sending` with a lease
    /// until `now + lease`. Each row is taken with a compare-and-set on its
    /// status and due time, so two senders never claim the same row.
    pub async fn claim_due(
        &self,
        now: DateTime<Utc>,
        lease: Duration,
        limit: u64,
    ) -> Result<Vec<OutboxRecord>, StorageError> {
        self.claim_due_for(now, lease, limit, true).await
    }

    /// [`OutboxRepo::claim_due`], leaving the `notify.webhook_url` rows
    /// and run-once callbacks alone unless `with_webhook_url` (they wait
    /// while no URL is set).
    pub async fn claim_due_for(
        &self,
        now: DateTime<Utc>,
        lease: Duration,
        limit: u64,
        with_webhook_url: bool,
    ) -> Result<Vec<OutboxRecord>, StorageError> {
        self.claim_due_where(now, lease, limit, with_webhook_url, with_webhook_url)
            .await
    }

    /// [`OutboxRepo::claim_due`] for the alert channels' rows, plus the
    /// `notify.webhook_url` rows when `with_webhook_url` and the run-once
    /// callbacks when `with_callbacks` (each kind waits while it cannot be
    /// sent: no URL set, no signing secret).
    pub async fn claim_due_where(
        &self,
        now: DateTime<Utc>,
        lease: Duration,
        limit: u64,
        with_webhook_url: bool,
        with_callbacks: bool,
    ) -> Result<Vec<OutboxRecord>, StorageError> {
        use outbox::Column;
        let db = self.store.connection();
        let now_ms = to_millis(now);
        let until = to_millis(now + lease);
        let mut kinds = Condition::any().add(Column::ChannelId.is_not_null());
        if with_webhook_url {
            kinds = kinds.add(
                Condition::all()
                    .add(Column::ChannelId.is_null())
                    .add(Column::Url.is_null()),
            );
        }
        if with_callbacks {
            kinds = kinds.add(Column::Url.is_not_null());
        }
        let candidates = outbox::Entity::find()
            .filter(kinds)
            .filter(Column::Status.is_in([
                OutboxStatus::Pending.as_str(),
                OutboxStatus::Sending.as_str(),
            ]))
            .filter(Column::NextAttemptAt.lte(now_ms))
            .order_by_asc(Column::NextAttemptAt)
            .order_by_asc(Column::Id)
            .limit(limit)
            .all(db)
            .await?;
        let mut claimed = Vec::with_capacity(candidates.len());
        for row in candidates {
            let res = outbox::Entity::update_many()
                .col_expr(Column::Status, Expr::val(OutboxStatus::Sending.as_str()))
                .col_expr(Column::NextAttemptAt, Expr::val(until))
                .filter(Column::Id.eq(row.id))
                .filter(Column::Status.eq(row.status.as_str()))
                .filter(Column::NextAttemptAt.eq(row.next_attempt_at))
                .exec(db)
                .await?;
            if res.rows_affected == 1 {
                let taken = outbox::Model {
                    status: OutboxStatus::Sending.as_str().to_owned(),
                    next_attempt_at: until,
                    ..row
                };
                claimed.push(OutboxRecord::try_from(taken)?);
            }
        }
        Ok(claimed)
    }

    /// Records a delivery. False when `claimed` no longer holds the lease
    /// (it expired and the row was claimed again).
    pub async fn mark_sent(
        &self,
        claimed: &OutboxRecord,
        now: DateTime<Utc>,
    ) -> Result<bool, StorageError> {
        use outbox::Column;
        let res = outbox::Entity::update_many()
            .col_expr(Column::Status, Expr::val(OutboxStatus::Sent.as_str()))
            .col_expr(Column::Attempts, Expr::val(claimed.attempts + 1))
            .col_expr(Column::SentAt, Expr::val(to_millis(now)))
            .col_expr(Column::LastError, Expr::val(Option::<String>::None))
            .filter(lease_held(claimed))
            .exec(self.store.connection())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// Records a failed attempt: due again after [`outbox_retry_delay`], or
    /// `Failed` for good after [`OUTBOX_MAX_ATTEMPTS`]. Returns the new
    /// status, `None` when `claimed` no longer holds the lease.
    pub async fn mark_failed(
        &self,
        claimed: &OutboxRecord,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<OutboxStatus>, StorageError> {
        use outbox::Column;
        let attempts = claimed.attempts + 1;
        let (status, next) = if attempts >= OUTBOX_MAX_ATTEMPTS {
            (OutboxStatus::Failed, now)
        } else {
            (OutboxStatus::Pending, now + outbox_retry_delay(attempts))
        };
        let error: String = error.chars().take(MAX_LAST_ERROR_CHARS).collect();
        let res = outbox::Entity::update_many()
            .col_expr(Column::Status, Expr::val(status.as_str()))
            .col_expr(Column::Attempts, Expr::val(attempts))
            .col_expr(Column::NextAttemptAt, Expr::val(to_millis(next)))
            .col_expr(Column::LastError, Expr::val(Some(error)))
            .filter(lease_held(claimed))
            .exec(self.store.connection())
            .await?;
        Ok((res.rows_affected == 1).then_some(status))
    }

    /// Gives up on a claimed row at once (its channel was deleted): it is
    /// `Failed` with `error`. False when the lease was lost.
    pub async fn give_up(&self, claimed: &OutboxRecord, error: &str) -> Result<bool, StorageError> {
        use outbox::Column;
        let error: String = error.chars().take(MAX_LAST_ERROR_CHARS).collect();
        let res = outbox::Entity::update_many()
            .col_expr(Column::Status, Expr::val(OutboxStatus::Failed.as_str()))
            .col_expr(Column::LastError, Expr::val(Some(error)))
            .filter(lease_held(claimed))
            .exec(self.store.connection())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// Gives a claimed row back unsent and due at once (the sender was told
    /// to stop); the attempt does not count. False when the lease was lost.
    pub async fn release(
        &self,
        claimed: &OutboxRecord,
        now: DateTime<Utc>,
    ) -> Result<bool, StorageError> {
        use outbox::Column;
        let res = outbox::Entity::update_many()
            .col_expr(Column::Status, Expr::val(OutboxStatus::Pending.as_str()))
            .col_expr(Column::NextAttemptAt, Expr::val(to_millis(now)))
            .filter(lease_held(claimed))
            .exec(self.store.connection())
            .await?;
        Ok(res.rows_affected == 1)
    }

    /// Rows not finished yet (pending, or being sent).
    pub async fn count_unfinished(&self) -> Result<u64, StorageError> {
        use outbox::Column;
        Ok(outbox::Entity::find()
            .filter(Column::Status.is_in([
                OutboxStatus::Pending.as_str(),
                OutboxStatus::Sending.as_str(),
            ]))
            .count(self.store.connection())
            .await?)
    }
}

/// The row is still `Sending` under the lease this claim was given.
fn lease_held(claimed: &OutboxRecord) -> Condition {
    use outbox::Column;
    Condition::all()
        .add(Column::Id.eq(claimed.id))
        .add(Column::Status.eq(OutboxStatus::Sending.as_str()))
        .add(Column::NextAttemptAt.eq(to_millis(claimed.next_attempt_at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_delays() {
        for s in ["pending", "sending", "sent", "failed"] {
            assert_eq!(OutboxStatus::parse(s).map(OutboxStatus::as_str), Some(s));
        }
        assert_eq!(OutboxStatus::parse("done"), None);
        assert_eq!(outbox_retry_delay(1), Duration::minutes(1));
        assert_eq!(outbox_retry_delay(2), Duration::minutes(5));
    }
}
