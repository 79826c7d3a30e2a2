//! Freeze windows (issue 11, part 4): create, read, list, and the edits
//! and deletions allowed only before a window starts.
//!
//! "Before it starts" is decided by the write itself (`starts_at > now`
//! in the statement's condition), so an edit racing the window's start
//! either lands before it or is refused; a window the engine has begun
//! to apply never changes under it.

use chrono::{DateTime, Utc};
use qiwu_domain::freeze::{Freeze, FreezeScope, FreezeSpec};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

use crate::entity::freeze;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// A stored freeze.
#[derive(Debug, Clone, PartialEq)]
pub struct FreezeRecord {
    pub id: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub scope: FreezeScope,
    pub reason: String,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl FreezeRecord {
    /// The window as the engine matches fire times against it.
    pub fn to_freeze(&self) -> Freeze {
        Freeze {
            id: self.id,
            from: self.from,
            to: self.to,
            scope: self.scope.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// Why an edit or a deletion was not made.
#[derive(Debug, Clone, PartialEq)]
pub enum FreezeRefusal {
    NotFound,
    /// The window has started (or ended): it is kept as it is.
    Started(Box<FreezeRecord>),
    StaleVersion {
        current: i64,
    },
}

fn scope_columns(scope: &FreezeScope) -> (String, Option<String>) {
    let value = match scope {
        FreezeScope::All => None,
        FreezeScope::Group(g) => Some(g.clone()),
        FreezeScope::Handler(h) => Some(h.clone()),
        FreezeScope::JobIds(ids) => serde_json::to_string(ids).ok(),
    };
    (scope.kind().to_string(), value)
}

impl TryFrom<freeze::Model> for FreezeRecord {
    type Error = StorageError;

    fn try_from(m: freeze::Model) -> Result<Self, Self::Error> {
        let corrupt = || StorageError::Corrupt(format!("freeze {}: bad scope {:?}", m.id, m.scope));
        let scope = match (m.scope.as_str(), &m.scope_value) {
            ("all", _) => FreezeScope::All,
            ("group", Some(g)) => FreezeScope::Group(g.clone()),
            ("handler", Some(h)) => FreezeScope::Handler(h.clone()),
            ("jobIds", Some(ids)) => {
                FreezeScope::JobIds(serde_json::from_str(ids).map_err(|_| corrupt())?)
            }
            _ => return Err(corrupt()),
        };
        Ok(FreezeRecord {
            id: m.id,
            from: from_millis(m.starts_at)?,
            to: from_millis(m.ends_at)?,
            scope,
            reason: m.reason,
            version: m.version,
            created_at: from_millis(m.created_at)?,
            created_by: m.created_by,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
        })
    }
}

/// Freeze access; obtained from [`Store::freezes`].
pub struct FreezeRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn freezes(&self) -> FreezeRepo<'_> {
        FreezeRepo { store: self }
    }
}

impl FreezeRepo<'_> {
    pub async fn create(
        &self,
        spec: &FreezeSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<FreezeRecord, StorageError> {
        let (scope, scope_value) = scope_columns(&spec.scope);
        let at = to_millis(now);
        let model = freeze::ActiveModel {
            id: NotSet,
            starts_at: Set(to_millis(spec.from)),
            ends_at: Set(to_millis(spec.to)),
            scope: Set(scope),
            scope_value: Set(scope_value),
            reason: Set(spec.reason.clone()),
            version: Set(1),
            created_at: Set(at),
            created_by: Set(actor.to_string()),
            updated_at: Set(at),
            updated_by: Set(actor.to_string()),
        };
        model.insert(self.store.connection()).await?.try_into()
    }

    pub async fn get(&self, id: i64) -> Result<Option<FreezeRecord>, StorageError> {
        freeze::Entity::find_by_id(id)
            .one(self.store.connection())
            .await?
            .map(FreezeRecord::try_from)
            .transpose()
    }

    /// Every freeze, the latest-starting first.
    pub async fn list(&self) -> Result<Vec<FreezeRecord>, StorageError> {
        freeze::Entity::find()
            .order_by_desc(freeze::Column::StartsAt)
            .order_by_desc(freeze::Column::Id)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(FreezeRecord::try_from)
            .collect()
    }

    /// The freezes that end after `after`, earliest start first: what the
    /// engine keeps in memory.
    pub async fn ending_after(
        &self,
        after: DateTime<Utc>,
    ) -> Result<Vec<FreezeRecord>, StorageError> {
        freeze::Entity::find()
            .filter(freeze::Column::EndsAt.gt(to_millis(after)))
            .order_by_asc(freeze::Column::StartsAt)
            .order_by_asc(freeze::Column::Id)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(FreezeRecord::try_from)
            .collect()
    }

    /// Replaces a freeze that has not started at `now`, at `version`.
    /// Answers the freeze before and after.
    pub async fn update(
        &self,
        id: i64,
        version: i64,
        spec: &FreezeSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<(FreezeRecord, FreezeRecord), FreezeRefusal>, StorageError> {
        let Some(before) = self.get(id).await? else {
            return Ok(Err(FreezeRefusal::NotFound));
        };
        let (scope, scope_value) = scope_columns(&spec.scope);
        let done = freeze::Entity::update_many()
            .col_expr(freeze::Column::StartsAt, Expr::value(to_millis(spec.from)))
            .col_expr(freeze::Column::EndsAt, Expr::value(to_millis(spec.to)))
            .col_expr(freeze::Column::Scope, Expr::value(scope))
            .col_expr(freeze::Column::ScopeValue, Expr::value(scope_value))
            .col_expr(freeze::Column::Reason, Expr::value(spec.reason.clone()))
            .col_expr(freeze::Column::Version, Expr::value(version + 1))
            .col_expr(freeze::Column::UpdatedAt, Expr::value(to_millis(now)))
            .col_expr(freeze::Column::UpdatedBy, Expr::value(actor.to_string()))
            .filter(freeze::Column::Id.eq(id))
            .filter(freeze::Column::Version.eq(version))
            .filter(freeze::Column::StartsAt.gt(to_millis(now)))
            .exec(self.store.connection())
            .await?;
        if done.rows_affected == 0 {
            return Ok(Err(self.refusal(id, now).await?));
        }
        match self.get(id).await? {
            Some(after) => Ok(Ok((before, after))),
            None => Ok(Err(FreezeRefusal::NotFound)),
        }
    }

    /// Deletes a freeze that has not started at `now`; answers it.
    pub async fn delete(
        &self,
        id: i64,
        now: DateTime<Utc>,
    ) -> Result<Result<FreezeRecord, FreezeRefusal>, StorageError> {
        let Some(before) = self.get(id).await? else {
            return Ok(Err(FreezeRefusal::NotFound));
        };
        let done = freeze::Entity::delete_many()
            .filter(freeze::Column::Id.eq(id))
            .filter(freeze::Column::StartsAt.gt(to_millis(now)))
            .exec(self.store.connection())
            .await?;
        if done.rows_affected == 0 {
            return Ok(Err(self.refusal(id, now).await?));
        }
        Ok(Ok(before))
    }

    /// Why a conditional write touched nothing.
    async fn refusal(&self, id: i64, now: DateTime<Utc>) -> Result<FreezeRefusal, StorageError> {
        Ok(match self.get(id).await? {
            None => FreezeRefusal::NotFound,
            Some(current) if current.from <= now => FreezeRefusal::Started(Box::new(current)),
            Some(current) => FreezeRefusal::StaleVersion {
                current: current.version,
            },
        })
    }
}
