//! The audit log: [`NewAudit`] entries, written in the transaction of the
//! change they describe where the storage crate makes it (jobs, settings,
//! templates) or after it otherwise, and read back newest first with
//! cursor paging through [`AuditRepo`].

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ActiveValue::Set, ColumnTrait, Condition, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};

use crate::entity::audit_log::{self, Column};
use crate::keyset::{self, Key};
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// Largest before/after JSON stored as is. MySQL's TEXT holds 65 535 bytes;
/// a larger value is replaced by a note saying so rather than fail the write.
const MAX_JSON_BYTES: usize = 60_000;
/// Widths of the VARCHAR columns (see the migration).
const ACTOR_CHARS: usize = 128;
const ACTION_CHARS: usize = 64;
const TARGET_TYPE_CHARS: usize = 32;
const TARGET_ID_CHARS: usize = 64;
/// Rows per multi-row INSERT: 9 columns each, well under every backend's
/// bind-parameter limit.
const INSERT_CHUNK: usize = 100;
/// A summary is one line; this bounds a runaway one well inside TEXT.
const SUMMARY_CHARS: usize = 2000;

/// One entry to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAudit {
    /// Who did it (the token's `sub`).
    pub actor: String,
    /// A code such as `job.modify` or `run.clear`.
    pub action: String,
    /// What kind of object: `job`, `run`, `apikey`.
    pub target_type: String,
    /// Which one; `None` for actions on many (export, clear).
    pub target_id: Option<String>,
    /// One line a person reads.
    pub summary: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub target_type: String,
    pub target_id: Option<String>,
    pub summary: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl TryFrom<audit_log::Model> for AuditRecord {
    type Error = StorageError;

    fn try_from(m: audit_log::Model) -> Result<Self, Self::Error> {
        let id = m.id;
        let parse = |text: Option<String>, what: &str| {
            text.map(|t| serde_json::from_str(&t))
                .transpose()
                .map_err(|e| {
                    StorageError::Corrupt(format!("audit entry {id}: {what} is not JSON: {e}"))
                })
        };
        Ok(AuditRecord {
            id,
            at: from_millis(m.at)?,
            actor: m.actor,
            action: m.action,
            target_type: m.target_type,
            target_id: m.target_id,
            summary: m.summary,
            before: parse(m.before_json, "before")?,
            after: parse(m.after_json, "after")?,
        })
    }
}

/// Filters of the audit list; `None` means "any". Strings match exactly.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    pub target_type: Option<String>,
    pub target_id: Option<String>,
    /// Inclusive bounds of `at`.
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// Where the next page of the audit list starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCursor {
    pub at_ms: i64,
    pub id: i64,
}

impl AuditCursor {
    /// An opaque, URL-safe string.
    pub fn encode(&self) -> String {
        self.key().encode()
    }

    /// Reads [`AuditCursor::encode`]'s output; anything else is
    /// [`StorageError::InvalidCursor`].
    pub fn decode(s: &str) -> Result<AuditCursor, StorageError> {
        let key = Key::decode(s)?;
        Ok(AuditCursor {
            at_ms: key.time_ms,
            id: key.id,
        })
    }

    fn key(&self) -> Key {
        Key {
            time_ms: self.at_ms,
            id: self.id,
        }
    }
}

impl Store {
    pub fn audit(&self) -> AuditRepo<'_> {
        AuditRepo { store: self }
    }
}

/// The audit log table; obtained from [`Store::audit`].
pub struct AuditRepo<'a> {
    store: &'a Store,
}

impl AuditRepo<'_> {
    /// Appends an entry stamped `now`. Over-long strings are cut to their
    /// column's width and an over-large before/after is replaced by a note,
    /// so that an entry is never lost to a column limit.
    pub async fn record(
        &self,
        entry: &NewAudit,
        now: DateTime<Utc>,
    ) -> Result<AuditRecord, StorageError> {
        AuditRecord::try_from(row(entry, now).insert(self.store.connection()).await?)
    }

    /// Appends several entries stamped `now` in one transaction (a batch
    /// delete writes one per job), as [`AuditRepo::record`] would.
    pub async fn record_many(
        &self,
        entries: &[NewAudit],
        now: DateTime<Utc>,
    ) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let txn = self.store.begin_write().await?;
        insert_many(&txn, entries, now).await?;
        txn.commit().await?;
        Ok(())
    }

    /// At most `limit` entries matching `filter`, newest first by (at, id),
    /// starting after `cursor`; plus the next page's cursor, `None` on the
    /// last page.
    pub async fn list(
        &self,
        filter: &AuditFilter,
        limit: u64,
        cursor: Option<AuditCursor>,
    ) -> Result<(Vec<AuditRecord>, Option<AuditCursor>), StorageError> {
        if limit == 0 {
            return Ok((Vec::new(), None));
        }
        let mut cond = filter_condition(filter);
        if let Some(c) = cursor {
            cond = cond.add(keyset::after(Column::At, Column::Id, c.key()));
        }
        let rows = audit_log::Entity::find()
            .filter(cond)
            .order_by_desc(Column::At)
            .order_by_desc(Column::Id)
            .limit(limit.saturating_add(1))
            .all(self.store.connection())
            .await?;
        let mut items = rows
            .into_iter()
            .map(AuditRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let more = items.len() as u64 > limit;
        items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next = if more {
            items.last().map(|a| AuditCursor {
                at_ms: to_millis(a.at),
                id: a.id,
            })
        } else {
            None
        };
        Ok((items, next))
    }
}

/// The row for an entry, cut to the columns' limits.
/// Appends an entry inside a caller's transaction (a change the system
/// makes and audits at once).
pub(crate) async fn insert(
    conn: &impl sea_orm::ConnectionTrait,
    entry: &NewAudit,
    now: DateTime<Utc>,
) -> Result<(), StorageError> {
    audit_log::Entity::insert(row(entry, now))
        .exec_without_returning(conn)
        .await?;
    Ok(())
}

/// Appends entries inside a caller's transaction, so that they commit or
/// roll back with the change they describe (a job write and its entries).
pub(crate) async fn insert_many(
    conn: &impl sea_orm::ConnectionTrait,
    entries: &[NewAudit],
    now: DateTime<Utc>,
) -> Result<(), StorageError> {
    for chunk in entries.chunks(INSERT_CHUNK) {
        audit_log::Entity::insert_many(chunk.iter().map(|e| row(e, now)))
            .exec_without_returning(conn)
            .await?;
    }
    Ok(())
}

fn row(entry: &NewAudit, now: DateTime<Utc>) -> audit_log::ActiveModel {
    audit_log::ActiveModel {
        id: NotSet,
        at: Set(to_millis(now)),
        actor: Set(cut(&entry.actor, ACTOR_CHARS)),
        action: Set(cut(&entry.action, ACTION_CHARS)),
        target_type: Set(cut(&entry.target_type, TARGET_TYPE_CHARS)),
        target_id: Set(entry.target_id.as_deref().map(|t| cut(t, TARGET_ID_CHARS))),
        summary: Set(cut(&entry.summary, SUMMARY_CHARS)),
        before_json: Set(entry.before.as_ref().map(bounded_json)),
        after_json: Set(entry.after.as_ref().map(bounded_json)),
    }
}

fn filter_condition(filter: &AuditFilter) -> Condition {
    let mut cond = Condition::all();
    if let Some(actor) = &filter.actor {
        cond = cond.add(keyset::text_eq(Column::Actor, actor));
    }
    if let Some(action) = &filter.action {
        cond = cond.add(keyset::text_eq(Column::Action, action));
    }
    if let Some(target_type) = &filter.target_type {
        cond = cond.add(keyset::text_eq(Column::TargetType, target_type));
    }
    if let Some(target_id) = &filter.target_id {
        cond = cond.add(keyset::text_eq(Column::TargetId, target_id));
    }
    if let Some(from) = filter.from {
        cond = cond.add(Column::At.gte(to_millis(from)));
    }
    if let Some(to) = filter.to {
        cond = cond.add(Column::At.lte(to_millis(to)));
    }
    cond
}

/// The first `max` characters of `s`.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => s[..end].to_owned(),
        None => s.to_owned(),
    }
}

/// `value` as JSON text, or a note when it is too large to store.
fn bounded_json(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= MAX_JSON_BYTES {
        text
    } else {
        json!({"omitted": "too large to keep in the audit log", "bytes": text.len()}).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_counts_characters() {
        assert_eq!(cut("任务名称", 2), "任务");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("", 0), "");
    }

    #[test]
    fn large_json_is_replaced_by_a_note() {
        let small = json!({"a": 1});
        assert_eq!(bounded_json(&small), r#"{"a":1}"#);
        let big = json!({"text": "x".repeat(MAX_JSON_BYTES)});
        let stored: Value = serde_json::from_str(&bounded_json(&big)).unwrap();
        assert_eq!(stored["bytes"], MAX_JSON_BYTES + 11);
    }
}
