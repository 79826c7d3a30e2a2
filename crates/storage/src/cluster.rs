//! Membership of a cluster in the database: heart-beats of live instances,
//! the database's clock, and the zone every instance must share.

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Statement};

use crate::entity::{instance, setting};
use crate::store::Backend;
use crate::timestamp::{from_millis, to_millis};
use crate::{StorageError, Store};

/// The setting holding the cluster's `QIWU_TIMEZONE`.
pub const CLUSTER_TIMEZONE_KEY: &str = "cluster.timezone";

/// One live instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceRecord {
    pub id: String,
    pub role: String,
    pub timezone: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
}

pub struct ClusterRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn cluster(&self) -> ClusterRepo<'_> {
        ClusterRepo { store: self }
    }
}

impl ClusterRepo<'_> {
    /// Records that `id` is alive now.
    pub async fn heartbeat(
        &self,
        id: &str,
        role: &str,
        timezone: &str,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<(), StorageError> {
        let row = instance::ActiveModel {
            id: Set(id.to_string()),
            role: Set(role.to_string()),
            timezone: Set(timezone.to_string()),
            started_at: Set(to_millis(started_at)),
            heartbeat_at: Set(to_millis(now)),
        };
        instance::Entity::insert(row)
            .on_conflict(
                OnConflict::column(instance::Column::Id)
                    .update_columns([instance::Column::HeartbeatAt, instance::Column::Role])
                    .to_owned(),
            )
            .exec_without_returning(self.store.connection())
            .await?;
        Ok(())
    }

    /// Instances whose last heart-beat is at or after `since`.
    pub async fn live(&self, since: DateTime<Utc>) -> Result<Vec<InstanceRecord>, StorageError> {
        let rows = instance::Entity::find()
            .filter(instance::Column::HeartbeatAt.gte(to_millis(since)))
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(to_record).collect()
    }

    /// Instances that stopped heart-beating before `since`.
    pub async fn dead(&self, since: DateTime<Utc>) -> Result<Vec<InstanceRecord>, StorageError> {
        let rows = instance::Entity::find()
            .filter(instance::Column::HeartbeatAt.lt(to_millis(since)))
            .all(self.store.connection())
            .await?;
        rows.into_iter().map(to_record).collect()
    }

    /// Forgets an instance (after a clean stop, or once its runs are closed).
    pub async fn remove(&self, id: &str) -> Result<(), StorageError> {
        instance::Entity::delete_by_id(id.to_string())
            .exec(self.store.connection())
            .await?;
        Ok(())
    }

    /// The database server's clock, the one clock of the cluster.
    pub async fn database_now(&self) -> Result<DateTime<Utc>, StorageError> {
        let sql = match self.store.backend() {
            Backend::Postgres => {
                "SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT) AS ms"
            }
            Backend::MySql => "SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED) AS ms",
            Backend::Sqlite => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS ms"
            }
        };
        let db = self.store.connection();
        let row = db
            .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
            .await?
            .ok_or_else(|| StorageError::Corrupt("the clock query returned no row".into()))?;
        from_millis(row.try_get::<i64>("", "ms")?)
    }

    /// The cluster's zone; the first instance to ask records its own.
    pub async fn agree_timezone(
        &self,
        mine: &str,
        now: DateTime<Utc>,
    ) -> Result<String, StorageError> {
        let row = setting::ActiveModel {
            key: Set(CLUSTER_TIMEZONE_KEY.to_string()),
            value: Set(mine.to_string()),
            updated_at: Set(to_millis(now)),
            updated_by: Set("system".to_string()),
        };
        setting::Entity::insert(row)
            .on_conflict(
                OnConflict::column(setting::Column::Key)
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(self.store.connection())
            .await?;
        let stored = setting::Entity::find_by_id(CLUSTER_TIMEZONE_KEY.to_string())
            .one(self.store.connection())
            .await?
            .map(|s| s.value)
            .unwrap_or_else(|| mine.to_string());
        Ok(stored)
    }
}

fn to_record(m: instance::Model) -> Result<InstanceRecord, StorageError> {
    Ok(InstanceRecord {
        started_at: from_millis(m.started_at)?,
        heartbeat_at: from_millis(m.heartbeat_at)?,
        id: m.id,
        role: m.role,
        timezone: m.timezone,
    })
}
