//! Operator settings (`settings` table): read, list, and change with an
//! audit entry written in the same transaction.
//!
//! Which keys exist and which values are valid is the domain's business
//! (`qiwu_domain::settings`); this file stores whatever it is given.

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder};
use serde_json::json;

use crate::entity::{audit_log, setting};
use crate::error::is_unique_violation;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// The audit action of a setting change.
pub const SETTING_MODIFY_ACTION: &str = "setting.modify";
/// The audit target type of a setting change (the target id is the key).
pub const SETTING_TARGET: &str = "setting";

/// How often [`SettingRepo::set`] starts over when another writer got in
/// between its read and its write.
const MAX_TRIES: u32 = 5;

/// Why one try of a write did not land.
enum SetError {
    /// Another writer changed the row first: read again and retry.
    Raced,
    Storage(StorageError),
}

impl From<StorageError> for SetError {
    fn from(e: StorageError) -> Self {
        SetError::Storage(e)
    }
}

/// A stored setting.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingRecord {
    pub key: String,
    pub value: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl TryFrom<setting::Model> for SettingRecord {
    type Error = StorageError;

    fn try_from(m: setting::Model) -> Result<Self, Self::Error> {
        Ok(SettingRecord {
            key: m.key,
            value: m.value,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
        })
    }
}

/// What [`SettingRepo::set`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingChange {
    /// The value before, `None` when the key was not stored.
    pub before: Option<String>,
    /// The row as it is now.
    pub record: SettingRecord,
    /// False when the value was already the same: nothing was written and
    /// nothing audited.
    pub changed: bool,
}

/// Settings table access; obtained from [`Store::settings`].
pub struct SettingRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn settings(&self) -> SettingRepo<'_> {
        SettingRepo { store: self }
    }
}

impl SettingRepo<'_> {
    pub async fn get(&self, key: &str) -> Result<Option<SettingRecord>, StorageError> {
        setting::Entity::find_by_id(key.to_owned())
            .one(self.store.connection())
            .await?
            .map(SettingRecord::try_from)
            .transpose()
    }

    /// Every stored setting, by key.
    pub async fn list(&self) -> Result<Vec<SettingRecord>, StorageError> {
        let mut rows = setting::Entity::find()
            .order_by_asc(setting::Column::Key)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(SettingRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        // Byte order on every backend (PostgreSQL sorts text by locale).
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(rows)
    }

    /// Stores `value` under `key` and records an audit entry
    /// (`setting.modify`, before/after values) in the same transaction, so a
    /// change is never left unaudited. Writing the same value again changes
    /// nothing and audits nothing.
    ///
    /// Optimistic: the write only lands if the row is still what was read
    /// (a plain insert when it was missing, a compare-and-set update when it
    /// was there); a concurrent writer makes it start over. No locking read,
    /// because on MySQL two locking reads of a missing key take gap locks
    /// that deadlock the two inserts that follow.
    pub async fn set(
        &self,
        key: &str,
        value: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<SettingChange, StorageError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_set(key, value, actor, now).await {
                Err(SetError::Raced) if tries < MAX_TRIES => continue,
                Err(SetError::Raced) => {
                    return Err(StorageError::Db(DbErr::Custom(format!(
                        "setting {key}: still changing under us after {MAX_TRIES} tries"
                    ))));
                }
                Err(SetError::Storage(e)) => return Err(e),
                Ok(change) => return Ok(change),
            }
        }
    }

    async fn try_set(
        &self,
        key: &str,
        value: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<SettingChange, SetError> {
        let txn = self.store.begin_write().await.map_err(StorageError::from)?;
        let current = setting::Entity::find_by_id(key.to_owned())
            .one(&txn)
            .await
            .map_err(StorageError::from)?;
        if let Some(row) = &current
            && row.value == value
        {
            return Ok(SettingChange {
                before: Some(row.value.clone()),
                record: SettingRecord::try_from(row.clone())?,
                changed: false,
            });
        }
        let now_ms = to_millis(now);
        match &current {
            None => {
                let row = setting::ActiveModel {
                    key: Set(key.to_owned()),
                    value: Set(value.to_owned()),
                    updated_at: Set(now_ms),
                    updated_by: Set(actor.to_owned()),
                };
                match setting::Entity::insert(row)
                    .exec_without_returning(&txn)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_unique_violation(&e) => return Err(SetError::Raced),
                    Err(e) => return Err(StorageError::from(e).into()),
                }
            }
            Some(old) => {
                let res = setting::Entity::update_many()
                    .col_expr(setting::Column::Value, Expr::val(value))
                    .col_expr(setting::Column::UpdatedAt, Expr::val(now_ms))
                    .col_expr(setting::Column::UpdatedBy, Expr::val(actor))
                    .filter(setting::Column::Key.eq(key))
                    .filter(setting::Column::Value.eq(old.value.as_str()))
                    .filter(setting::Column::UpdatedAt.eq(old.updated_at))
                    .exec(&txn)
                    .await
                    .map_err(StorageError::from)?;
                if res.rows_affected != 1 {
                    return Err(SetError::Raced);
                }
            }
        }
        let before = current.map(|r| r.value);
        let summary = match &before {
            Some(old) => format!("修改参数 {key}：{old} → {value}"),
            None => format!("修改参数 {key}：（未设置）→ {value}"),
        };
        audit_log::ActiveModel {
            id: NotSet,
            at: Set(now_ms),
            actor: Set(actor.to_owned()),
            action: Set(SETTING_MODIFY_ACTION.to_owned()),
            target_type: Set(SETTING_TARGET.to_owned()),
            target_id: Set(Some(key.to_owned())),
            summary: Set(summary),
            before_json: Set(before
                .as_ref()
                .map(|v| json!({"key": key, "value": v}).to_string())),
            after_json: Set(Some(json!({"key": key, "value": value}).to_string())),
        }
        .insert(&txn)
        .await
        .map_err(StorageError::from)?;
        txn.commit().await.map_err(StorageError::from)?;
        Ok(SettingChange {
            before,
            record: SettingRecord {
                key: key.to_owned(),
                value: value.to_owned(),
                updated_at: from_millis(now_ms)?,
                updated_by: actor.to_owned(),
            },
            changed: true,
        })
    }
}
