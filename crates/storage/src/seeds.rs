//! Reading seed markers: whether a one-time seed was applied, without
//! applying it (`Store::mark_seed_once` writes them).

use sea_orm::EntityTrait;

use crate::entity::seed_marker;
use crate::{StorageError, Store};

impl Store {
    /// True when the seed `key` was marked applied.
    pub async fn is_seeded(&self, key: &str) -> Result<bool, StorageError> {
        Ok(seed_marker::Entity::find_by_id(key.to_owned())
            .one(self.connection())
            .await?
            .is_some())
    }
}
