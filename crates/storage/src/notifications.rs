//! Notifications (SPEC §8): editable templates, the inbox, and the webhook
//! outbox that `notify.dispatch` drains.
//!
//! The outbox row is written in the same transaction as its notification,
//! so a notification is never stored without its delivery or the reverse.
//! A claimed row carries a lease (`status = sending`, `next_attempt_at` =
//! lease expiry): if the sender dies mid-send, the lease expires and the row
//! is due again, so nothing is lost (delivery is at least once; receivers
//! de-duplicate by notification id). The lease expiry doubles as a fencing
//! token: only the holder of the current lease can record the outcome.

use std::fmt;

use chrono::{DateTime, Duration, Utc};
use qiwu_domain::notify::{TEMPLATES, TemplateDef};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::json;

use crate::entity::{audit_log, notification, notification_template, outbox};
use crate::keyset::{self, Key};
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Attempts per outbox row before it is `failed` for good.
pub const OUTBOX_MAX_ATTEMPTS: i32 = 3;
/// Longest `last_error` kept.
const MAX_LAST_ERROR_CHARS: usize = 2_000;
/// The audit action of a template edit.
pub const TEMPLATE_MODIFY_ACTION: &str = "template.modify";
/// The audit target type of a template edit (the target id is the code).
pub const TEMPLATE_TARGET: &str = "notification_template";
/// Who seeds templates.
const SYSTEM_ACTOR: &str = "system";

/// How long to wait after the `attempts`-th failed attempt: 1 minute, then
/// 5, so a receiver that is briefly down gets time to come back.
pub fn outbox_retry_delay(attempts: i32) -> Duration {
    if attempts <= 1 {
        Duration::minutes(1)
    } else {
        Duration::minutes(5)
    }
}

// ---------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------

/// A stored template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateRecord {
    pub code: String,
    pub title_zh: String,
    pub body_zh: String,
    pub title_en: String,
    pub body_en: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl TryFrom<notification_template::Model> for TemplateRecord {
    type Error = StorageError;

    fn try_from(m: notification_template::Model) -> Result<Self, Self::Error> {
        Ok(TemplateRecord {
            code: m.code,
            title_zh: m.title_zh,
            body_zh: m.body_zh,
            title_en: m.title_en,
            body_en: m.body_en,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
        })
    }
}

/// The four editable texts of a template; already validated by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateTexts {
    pub title_zh: String,
    pub body_zh: String,
    pub title_en: String,
    pub body_en: String,
}

impl From<&TemplateDef> for TemplateTexts {
    fn from(d: &TemplateDef) -> Self {
        TemplateTexts {
            title_zh: d.title_zh.to_owned(),
            body_zh: d.body_zh.to_owned(),
            title_en: d.title_en.to_owned(),
            body_en: d.body_en.to_owned(),
        }
    }
}

/// Template table access; obtained from [`Store::templates`].
pub struct TemplateRepo<'a> {
    store: &'a Store,
}

// ---------------------------------------------------------------------------
// Inbox
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Outbox
// ---------------------------------------------------------------------------

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
    pub fn templates(&self) -> TemplateRepo<'_> {
        TemplateRepo { store: self }
    }

    pub fn notifications(&self) -> NotificationRepo<'_> {
        NotificationRepo { store: self }
    }

    pub fn outbox(&self) -> OutboxRepo<'_> {
        OutboxRepo { store: self }
    }
}

impl TemplateRepo<'_> {
    pub async fn get(&self, code: &str) -> Result<Option<TemplateRecord>, StorageError> {
        notification_template::Entity::find_by_id(code.to_owned())
            .one(self.store.connection())
            .await?
            .map(TemplateRecord::try_from)
            .transpose()
    }

    /// Every stored template, by code.
    pub async fn list(&self) -> Result<Vec<TemplateRecord>, StorageError> {
        let mut rows = notification_template::Entity::find()
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(TemplateRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        rows.sort_by(|a, b| a.code.cmp(&b.code));
        Ok(rows)
    }

    /// Replaces the texts of a stored template and audits the change
    /// (`template.modify`, before/after texts) in the same transaction.
    /// `NotFound` when no such template is stored.
    pub async fn update(
        &self,
        code: &str,
        texts: &TemplateTexts,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<TemplateRecord, StorageError> {
        let txn = self.store.begin_write().await?;
        let current = notification_template::Entity::find_by_id(code.to_owned())
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        let now_ms = to_millis(now);
        let updated = notification_template::ActiveModel {
            code: Set(code.to_owned()),
            title_zh: Set(texts.title_zh.clone()),
            body_zh: Set(texts.body_zh.clone()),
            title_en: Set(texts.title_en.clone()),
            body_en: Set(texts.body_en.clone()),
            updated_at: Set(now_ms),
            updated_by: Set(actor.to_owned()),
        }
        .update(&txn)
        .await?;
        let texts_json = |m: &notification_template::Model| {
            json!({
                "titleZh": m.title_zh,
                "bodyZh": m.body_zh,
                "titleEn": m.title_en,
                "bodyEn": m.body_en,
            })
            .to_string()
        };
        audit_log::ActiveModel {
            id: NotSet,
            at: Set(now_ms),
            actor: Set(actor.to_owned()),
            action: Set(TEMPLATE_MODIFY_ACTION.to_owned()),
            target_type: Set(TEMPLATE_TARGET.to_owned()),
            target_id: Set(Some(code.to_owned())),
            summary: Set(format!("修改站内信模板 {code}")),
            before_json: Set(Some(texts_json(&current))),
            after_json: Set(Some(texts_json(&updated))),
        }
        .insert(&txn)
        .await?;
        txn.commit().await?;
        TemplateRecord::try_from(updated)
    }

    /// Seeds every template of `qiwu_domain::notify::TEMPLATES` once, ever
    /// (seed marker `template:{code}`), never overwriting a stored one.
    /// Returns the codes inserted by this call.
    ///
    /// The row goes in before the marker, with "insert unless present", so a
    /// crash between the two is repaired by the next start and can never
    /// overwrite an edit.
    pub async fn seed_defaults(&self, now: DateTime<Utc>) -> Result<Vec<String>, StorageError> {
        let db = self.store.connection();
        let mut seeded = Vec::new();
        for def in &TEMPLATES {
            let marker = format!("template:{}", def.code);
            if self.store.is_seeded(&marker).await? {
                continue;
            }
            let row = notification_template::ActiveModel {
                code: Set(def.code.to_owned()),
                title_zh: Set(def.title_zh.to_owned()),
                body_zh: Set(def.body_zh.to_owned()),
                title_en: Set(def.title_en.to_owned()),
                body_en: Set(def.body_en.to_owned()),
                updated_at: Set(to_millis(now)),
                updated_by: Set(SYSTEM_ACTOR.to_owned()),
            };
            // Whether this call inserted it is only reported, so a plain read
            // first will do (MySQL counts a conflicting row as affected).
            let present = notification_template::Entity::find_by_id(def.code.to_owned())
                .one(db)
                .await?
                .is_some();
            notification_template::Entity::insert(row)
                .on_conflict(
                    OnConflict::column(notification_template::Column::Code)
                        .do_nothing_on([notification_template::Column::Code])
                        .to_owned(),
                )
                .exec_without_returning(db)
                .await?;
            if !present {
                seeded.push(def.code.to_owned());
            }
            self.store.mark_seed_once(&marker, now).await?;
        }
        Ok(seeded)
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
