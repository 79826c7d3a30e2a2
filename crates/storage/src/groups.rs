//! Job groups: the dictionary behind a job's `group`.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, QueryOrder};

use crate::entity::job_group::{self, Column};
use crate::error::is_unique_violation;
use crate::timestamp::to_millis;
use crate::{StorageError, Store};

/// A job group; `builtin` groups (`default`, `system`) come with the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRecord {
    pub code: String,
    pub label_zh: String,
    pub label_en: String,
    pub builtin: bool,
}

impl From<job_group::Model> for GroupRecord {
    fn from(m: job_group::Model) -> Self {
        GroupRecord {
            code: m.code,
            label_zh: m.label_zh,
            label_en: m.label_en,
            builtin: m.builtin,
        }
    }
}

/// Job-group table access; obtained from [`Store::groups`].
pub struct GroupRepo<'a> {
    store: &'a Store,
}

impl<'a> GroupRepo<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        GroupRepo { store }
    }
}

impl GroupRepo<'_> {
    /// Built-in groups first, then by code (byte order, the same on every backend).
    pub async fn list(&self) -> Result<Vec<GroupRecord>, StorageError> {
        let mut groups: Vec<GroupRecord> = job_group::Entity::find()
            .order_by_asc(Column::Code)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(GroupRecord::from)
            .collect();
        // Sorted here rather than in SQL: PostgreSQL orders text by the
        // database locale, SQLite and MySQL (utf8mb4_bin) by bytes.
        groups.sort_by(|a, b| b.builtin.cmp(&a.builtin).then_with(|| a.code.cmp(&b.code)));
        Ok(groups)
    }

    pub async fn get(&self, code: &str) -> Result<Option<GroupRecord>, StorageError> {
        // No code holds U+0000, which PostgreSQL refuses even to look up.
        if !crate::keyset::storable(code) {
            return Ok(None);
        }
        Ok(job_group::Entity::find_by_id(code.to_owned())
            .one(self.store.connection())
            .await?
            .map(GroupRecord::from))
    }

    /// Creates a non-built-in group; `AlreadyExists` when the code is taken.
    pub async fn create(
        &self,
        code: &str,
        label_zh: &str,
        label_en: &str,
        now: DateTime<Utc>,
    ) -> Result<GroupRecord, StorageError> {
        let row = job_group::ActiveModel {
            code: Set(code.to_owned()),
            label_zh: Set(label_zh.to_owned()),
            label_en: Set(label_en.to_owned()),
            builtin: Set(false),
            created_at: Set(to_millis(now)),
        };
        match row.insert(self.store.connection()).await {
            Ok(m) => Ok(m.into()),
            Err(e) if is_unique_violation(&e) => Err(StorageError::AlreadyExists),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the group; false when it did not exist. Whether a group may be
    /// deleted (built-in, still used by jobs) is the caller's decision.
    pub async fn delete(&self, code: &str) -> Result<bool, StorageError> {
        let res = job_group::Entity::delete_by_id(code.to_owned())
            .exec(self.store.connection())
            .await?;
        Ok(res.rows_affected > 0)
    }
}
