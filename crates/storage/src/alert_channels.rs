//! Alert channels (issue 10) and the alert state the engine keeps on each
//! job.
//!
//! A channel's `url` and `secret` are stored as written (the sender needs
//! them to sign) and never leave this crate through `Debug`; the API shows
//! only the URL's scheme and host and whether a secret is set.
//!
//! The alert state (`jobs.alert_streak`, `jobs.alert_alerted`) changes in
//! one locked read-decide-write per fire end, so fires of one job ending
//! on two workers at once never lose a count. It is not part of the job's
//! `version`: an edit neither writes nor conflicts with it.

use chrono::{DateTime, Utc};
use qiwu_domain::alert::{AlertDecision, AlertPolicy, AlertState, ChannelKind, ChannelSpec};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::entity::{alert_channel, job};
use crate::error::is_unique_violation;
use crate::timestamp::{from_millis, to_millis};
use crate::{JobRecord, StorageError, Store};

/// A stored channel.
#[derive(Clone, PartialEq)]
pub struct ChannelRecord {
    pub id: i64,
    pub name: String,
    pub kind: ChannelKind,
    pub url: Option<String>,
    pub secret: Option<String>,
    pub enabled: bool,
    pub is_default: bool,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

// URLs carry robot tokens and secrets sign messages: neither reaches a log.
impl std::fmt::Debug for ChannelRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("enabled", &self.enabled)
            .field("is_default", &self.is_default)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl TryFrom<alert_channel::Model> for ChannelRecord {
    type Error = StorageError;

    fn try_from(m: alert_channel::Model) -> Result<Self, Self::Error> {
        Ok(ChannelRecord {
            kind: ChannelKind::parse(&m.kind).ok_or_else(|| {
                StorageError::Corrupt(format!("alert channel {}: unknown kind {:?}", m.id, m.kind))
            })?,
            id: m.id,
            name: m.name,
            url: m.url,
            secret: m.secret,
            enabled: m.enabled,
            is_default: m.is_default,
            version: m.version,
            created_at: from_millis(m.created_at)?,
            created_by: m.created_by,
            updated_at: from_millis(m.updated_at)?,
            updated_by: m.updated_by,
        })
    }
}

/// Alert channel access; obtained from [`Store::alert_channels`].
pub struct AlertChannelRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn alert_channels(&self) -> AlertChannelRepo<'_> {
        AlertChannelRepo { store: self }
    }
}

impl AlertChannelRepo<'_> {
    /// Every channel, by id.
    pub async fn list(&self) -> Result<Vec<ChannelRecord>, StorageError> {
        alert_channel::Entity::find()
            .order_by_asc(alert_channel::Column::Id)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(ChannelRecord::try_from)
            .collect()
    }

    pub async fn get(&self, id: i64) -> Result<Option<ChannelRecord>, StorageError> {
        alert_channel::Entity::find_by_id(id)
            .one(self.store.connection())
            .await?
            .map(ChannelRecord::try_from)
            .transpose()
    }

    /// The ids of every channel (what a job may name).
    pub async fn ids(&self) -> Result<Vec<i64>, StorageError> {
        Ok(alert_channel::Entity::find()
            .select_only()
            .column(alert_channel::Column::Id)
            .into_tuple::<i64>()
            .all(self.store.connection())
            .await?)
    }

    /// Where an alert of a job naming `named` goes: those channels, or the
    /// default ones when it names none; only enabled ones, by id. Empty
    /// when nothing applies (the caller falls back to the inbox).
    pub async fn resolve(&self, named: &[i64]) -> Result<Vec<ChannelRecord>, StorageError> {
        use alert_channel::Column;
        let mut query = alert_channel::Entity::find().filter(Column::Enabled.eq(true));
        query = if named.is_empty() {
            query.filter(Column::IsDefault.eq(true))
        } else {
            query.filter(Column::Id.is_in(named.iter().copied()))
        };
        query
            .order_by_asc(Column::Id)
            .all(self.store.connection())
            .await?
            .into_iter()
            .map(ChannelRecord::try_from)
            .collect()
    }

    /// Creates a channel; `NameTaken` when the name is.
    pub async fn create(
        &self,
        spec: &ChannelSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<ChannelRecord, StorageError> {
        let now = to_millis(now);
        let row = alert_channel::ActiveModel {
            id: NotSet,
            name: Set(spec.name.clone()),
            kind: Set(spec.kind.as_str().to_owned()),
            url: Set(spec.url.clone()),
            secret: Set(spec.secret.clone().flatten()),
            enabled: Set(spec.enabled),
            is_default: Set(spec.is_default),
            version: Set(1),
            created_at: Set(now),
            created_by: Set(actor.to_owned()),
            updated_at: Set(now),
            updated_by: Set(actor.to_owned()),
        };
        match row.insert(self.store.connection()).await {
            Ok(m) => ChannelRecord::try_from(m),
            Err(e) if is_unique_violation(&e) => Err(StorageError::NameTaken),
            Err(e) => Err(e.into()),
        }
    }

    /// Updates a channel based on `expected_version` (`StaleVersion` when
    /// another edit came first, `NotFound`, `NameTaken`). A `spec` without
    /// `url` or `secret` keeps the stored ones. Returns (before, after).
    pub async fn update(
        &self,
        id: i64,
        expected_version: i64,
        spec: &ChannelSpec,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<(ChannelRecord, ChannelRecord), StorageError> {
        use alert_channel::Column;
        let txn = self.store.begin_write().await?;
        let current = alert_channel::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        if current.version != expected_version {
            return Err(StorageError::StaleVersion {
                current: current.version,
            });
        }
        let mut update = alert_channel::Entity::update_many()
            .col_expr(Column::Name, Expr::val(spec.name.clone()))
            .col_expr(Column::Enabled, Expr::val(spec.enabled))
            .col_expr(Column::IsDefault, Expr::val(spec.is_default))
            .col_expr(Column::Version, Expr::val(current.version + 1))
            .col_expr(Column::UpdatedAt, Expr::val(to_millis(now)))
            .col_expr(Column::UpdatedBy, Expr::val(actor.to_owned()))
            .filter(Column::Id.eq(id));
        if let Some(url) = &spec.url {
            update = update.col_expr(Column::Url, Expr::val(url.clone()));
        }
        if let Some(secret) = &spec.secret {
            update = update.col_expr(Column::Secret, Expr::val(secret.clone()));
        }
        match update.exec(&txn).await {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StorageError::NameTaken),
            Err(e) => return Err(e.into()),
        }
        let updated = alert_channel::Entity::find_by_id(id)
            .one(&txn)
            .await?
            .ok_or(StorageError::NotFound)?;
        txn.commit().await?;
        Ok((
            ChannelRecord::try_from(current)?,
            ChannelRecord::try_from(updated)?,
        ))
    }

    /// Deletes a channel; returns it, or `None` when missing.
    pub async fn delete(&self, id: i64) -> Result<Option<ChannelRecord>, StorageError> {
        let txn = self.store.begin_write().await?;
        let Some(row) = alert_channel::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        alert_channel::Entity::delete_by_id(id).exec(&txn).await?;
        txn.commit().await?;
        ChannelRecord::try_from(row).map(Some)
    }

    /// The ids of the jobs that name channel `id` (a channel in use is not
    /// deleted). Read in full: lists of channel ids are short, and only
    /// jobs that name channels at all are read.
    pub async fn jobs_naming(&self, id: i64) -> Result<Vec<i64>, StorageError> {
        let rows: Vec<(i64, Option<String>)> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .column(job::Column::AlertChannels)
            .filter(job::Column::AlertChannels.is_not_null())
            .order_by_asc(job::Column::Id)
            .into_tuple()
            .all(self.store.connection())
            .await?;
        Ok(rows
            .into_iter()
            .filter(|(_, list)| {
                list.as_deref()
                    .and_then(|l| serde_json::from_str::<Vec<i64>>(l).ok())
                    .is_some_and(|ids| ids.contains(&id))
            })
            .map(|(job, _)| job)
            .collect())
    }
}

impl crate::JobRepo<'_> {
    /// Moves a job's alert state by `decide` (given the job's current
    /// policy and state) in one locked read-decide-write, and returns the
    /// job as it was read (its state before the move) with the decision.
    /// `None` when the job is gone.
    pub async fn alert_transition(
        &self,
        id: i64,
        decide: impl FnOnce(&AlertPolicy, AlertState) -> AlertDecision,
    ) -> Result<Option<(JobRecord, AlertDecision)>, StorageError> {
        use job::Column;
        let txn = self.store.begin_write().await?;
        let Some(row) = job::Entity::find_by_id(id)
            .lock_exclusive()
            .one(&txn)
            .await?
        else {
            return Ok(None);
        };
        let record = JobRecord::try_from(row)?;
        let decision = decide(&record.alert, record.alert_state);
        if decision.next != record.alert_state {
            job::Entity::update_many()
                .col_expr(
                    Column::AlertStreak,
                    Expr::val(i32::try_from(decision.next.failed_in_a_row).unwrap_or(i32::MAX)),
                )
                .col_expr(Column::AlertAlerted, Expr::val(decision.next.alerted))
                .filter(Column::Id.eq(id))
                .exec(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(Some((record, decision)))
    }
}
