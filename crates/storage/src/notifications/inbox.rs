//! The inbox (SPEC §8): notifications paged by keyset on
//! `(created_at, id)`, each stored with its outbox rows in one transaction.

use std::fmt;

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::outbox::{OutboxRecord, OutboxStatus};
use crate::entity::{notification, outbox};
use crate::keyset::{self, Key};
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// A notification in an inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRecord {
    pub id: i64,
    pub recipient: String,
    pub template_code: String,
    pub title: String,
    pub body: String,
    pub created_at: DateTime<Utc>,
    pub read_at: Option<DateTime<Utc>>,
}

impl TryFrom<notification::Model> for NotificationRecord {
    type Error = StorageError;

    fn try_from(m: notification::Model) -> Result<Self, Self::Error> {
        Ok(NotificationRecord {
            id: m.id,
            recipient: m.recipient,
            template_code: m.template_code,
            title: m.title,
            body: m.body,
            created_at: from_millis(m.created_at)?,
            read_at: m.read_at.map(from_millis).transpose()?,
        })
    }
}

/// A notification to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNotification {
    pub recipient: String,
    pub template_code: String,
    pub title: String,
    pub body: String,
}

/// Where the next page of an inbox starts: just after this (created_at, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotificationCursor {
    pub created_at_ms: i64,
    pub id: i64,
}

impl NotificationCursor {
    fn after(n: &NotificationRecord) -> NotificationCursor {
        NotificationCursor {
            created_at_ms: to_millis(n.created_at),
            id: n.id,
        }
    }

    fn key(self) -> Key {
        Key {
            time_ms: self.created_at_ms,
            id: self.id,
        }
    }

    /// Reads what `to_string` wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<NotificationCursor> {
        let key = Key::decode(s).ok()?;
        Some(NotificationCursor {
            created_at_ms: key.time_ms,
            id: key.id,
        })
    }
}

/// The same opaque, URL-safe form as the run log's and audit log's cursors.
impl fmt::Display for NotificationCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key().encode())
    }
}

/// One page of an inbox, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationPage {
    pub items: Vec<NotificationRecord>,
    /// Set when more items follow.
    pub next_cursor: Option<NotificationCursor>,
}

/// Inbox access; obtained from [`Store::notifications`].
pub struct NotificationRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn notifications(&self) -> NotificationRepo<'_> {
        NotificationRepo { store: self }
    }
}

impl NotificationRepo<'_> {
    /// Stores a notification in its recipient's inbox, without delivery.
    pub async fn create(
        &self,
        new: &NewNotification,
        now: DateTime<Utc>,
    ) -> Result<NotificationRecord, StorageError> {
        let txn = self.store.begin_write().await?;
        let created = insert_notification(&txn, new, now).await?;
        txn.commit().await?;
        Ok(created)
    }

    /// Stores a notification and, in the same transaction, its outbox row
    /// with the body `payload` builds from the stored notification (which
    /// knows its id), due at once.
    pub async fn create_with_delivery(
        &self,
        new: &NewNotification,
        payload: impl FnOnce(&NotificationRecord) -> String,
        now: DateTime<Utc>,
    ) -> Result<(NotificationRecord, OutboxRecord), StorageError> {
        let txn = self.store.begin_write().await?;
        let created = insert_notification(&txn, new, now).await?;
        let now_ms = to_millis(now);
        let row = outbox::ActiveModel {
            id: NotSet,
            notification_id: Set(created.id),
            payload: Set(payload(&created)),
            status: Set(OutboxStatus::Pending.as_str().to_owned()),
            attempts: Set(0),
            next_attempt_at: Set(now_ms),
            last_error: Set(None),
            created_at: Set(now_ms),
            sent_at: Set(None),
            channel_id: Set(None),
            url: Set(None),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok((created, OutboxRecord::try_from(row)?))
    }

    /// Stores a notification and, in the same transaction, one outbox row
    /// per target (`None`: the `notify.webhook_url` delivery; `Some(id)`:
    /// alert channel `id`), each with the body `payload` builds for it from
    /// the stored notification, due at once.
    pub async fn create_with_deliveries(
        &self,
        new: &NewNotification,
        targets: &[Option<i64>],
        payload: impl Fn(Option<i64>, &NotificationRecord) -> String,
        now: DateTime<Utc>,
    ) -> Result<(NotificationRecord, Vec<OutboxRecord>), StorageError> {
        let txn = self.store.begin_write().await?;
        let created = insert_notification(&txn, new, now).await?;
        let now_ms = to_millis(now);
        let mut rows = Vec::with_capacity(targets.len());
        for &channel_id in targets {
            let row = outbox::ActiveModel {
                id: NotSet,
                notification_id: Set(created.id),
                payload: Set(payload(channel_id, &created)),
                status: Set(OutboxStatus::Pending.as_str().to_owned()),
                attempts: Set(0),
                next_attempt_at: Set(now_ms),
                last_error: Set(None),
                created_at: Set(now_ms),
                sent_at: Set(None),
                channel_id: Set(channel_id),
                url: Set(None),
            }
            .insert(&txn)
            .await?;
            rows.push(OutboxRecord::try_from(row)?);
        }
        txn.commit().await?;
        Ok((created, rows))
    }

    /// Stores a notification (a run-once callback, kept for the record)
    /// and, in the same transaction, its outbox row to `url` with the body
    /// `payload`, due at once.
    pub async fn create_with_callback(
        &self,
        new: &NewNotification,
        url: &str,
        payload: &str,
        now: DateTime<Utc>,
    ) -> Result<(NotificationRecord, OutboxRecord), StorageError> {
        let txn = self.store.begin_write().await?;
        let created = insert_notification(&txn, new, now).await?;
        let now_ms = to_millis(now);
        let row = outbox::ActiveModel {
            id: NotSet,
            notification_id: Set(created.id),
            payload: Set(payload.to_owned()),
            status: Set(OutboxStatus::Pending.as_str().to_owned()),
            attempts: Set(0),
            next_attempt_at: Set(now_ms),
            last_error: Set(None),
            created_at: Set(now_ms),
            sent_at: Set(None),
            channel_id: Set(None),
            url: Set(Some(url.to_owned())),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        Ok((created, OutboxRecord::try_from(row)?))
    }

    pub async fn get(&self, id: i64) -> Result<Option<NotificationRecord>, StorageError> {
        notification::Entity::find_by_id(id)
            .one(self.store.connection())
            .await?
            .map(NotificationRecord::try_from)
            .transpose()
    }

    /// One page of `recipient`'s inbox, newest first (by created_at, then
    /// id), starting after `cursor`. Keyset paging: deep pages cost the same
    /// as the first, and rows added meanwhile never shift a page.
    pub async fn list(
        &self,
        recipient: &str,
        unread_only: bool,
        limit: u64,
        cursor: Option<NotificationCursor>,
    ) -> Result<NotificationPage, StorageError> {
        use notification::Column;
        if limit == 0 {
            return Ok(NotificationPage {
                items: Vec::new(),
                next_cursor: None,
            });
        }
        let mut query = notification::Entity::find().filter(Column::Recipient.eq(recipient));
        if unread_only {
            query = query.filter(Column::ReadAt.is_null());
        }
        if let Some(c) = cursor {
            query = query.filter(keyset::after(Column::CreatedAt, Column::Id, c.key()));
        }
        // One row more than asked tells whether another page follows.
        let mut items = query
            .order_by_desc(Column::CreatedAt)
            .order_by_desc(Column::Id)
            .limit(limit.saturating_add(1))
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(NotificationRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let more = items.len() as u64 > limit;
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next_cursor = if more {
            items.last().map(NotificationCursor::after)
        } else {
            None
        };
        Ok(NotificationPage { items, next_cursor })
    }

    /// How many unread notifications `recipient` has.
    pub async fn count_unread(&self, recipient: &str) -> Result<u64, StorageError> {
        use notification::Column;
        Ok(notification::Entity::find()
            .filter(Column::Recipient.eq(recipient))
            .filter(Column::ReadAt.is_null())
            .count(self.store.connection())
            .await?)
    }

    /// Marks one notification of `recipient` read (keeping the first read
    /// time when it already was). `None` when it is not in that inbox.
    pub async fn mark_read(
        &self,
        recipient: &str,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<NotificationRecord>, StorageError> {
        use notification::Column;
        let db = self.store.connection();
        notification::Entity::update_many()
            .col_expr(Column::ReadAt, Expr::val(to_millis(now)))
            .filter(Column::Id.eq(id))
            .filter(Column::Recipient.eq(recipient))
            .filter(Column::ReadAt.is_null())
            .exec(db)
            .await?;
        Ok(self.get(id).await?.filter(|n| n.recipient == recipient))
    }

    /// Marks every unread notification of `recipient` read; returns how many.
    pub async fn mark_all_read(
        &self,
        recipient: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, StorageError> {
        use notification::Column;
        let res = notification::Entity::update_many()
            .col_expr(Column::ReadAt, Expr::val(to_millis(now)))
            .filter(Column::Recipient.eq(recipient))
            .filter(Column::ReadAt.is_null())
            .exec(self.store.connection())
            .await?;
        Ok(res.rows_affected)
    }
}

async fn insert_notification<C: ConnectionTrait>(
    db: &C,
    new: &NewNotification,
    now: DateTime<Utc>,
) -> Result<NotificationRecord, StorageError> {
    let row = notification::ActiveModel {
        id: NotSet,
        recipient: Set(new.recipient.clone()),
        template_code: Set(new.template_code.clone()),
        title: Set(new.title.clone()),
        body: Set(new.body.clone()),
        created_at: Set(to_millis(now)),
        read_at: Set(None),
    }
    .insert(db)
    .await?;
    NotificationRecord::try_from(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips() {
        let c = NotificationCursor {
            created_at_ms: -5,
            id: 42,
        };
        assert_eq!(NotificationCursor::parse(&c.to_string()), Some(c));
        let big = NotificationCursor {
            created_at_ms: i64::MAX,
            id: i64::MAX,
        };
        assert_eq!(NotificationCursor::parse(&big.to_string()), Some(big));
        for bad in ["", "5", "-5_42", "zz", &"0".repeat(31), &"g".repeat(32)] {
            assert_eq!(NotificationCursor::parse(bad), None, "{bad}");
        }
    }
}
