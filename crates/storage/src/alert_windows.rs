//! Coalescing of repeated alerts: one row per key (an alert kind of one
//! job) holds when its window opened and how many alerts it folded, so a
//! storm of the same alert is one notification plus a count, across every
//! instance of a cluster.

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use sea_orm::{ActiveModelTrait, EntityTrait, IntoActiveModel, QuerySelect};

use crate::entity::alert_window;
use crate::error::is_unique_violation;
use crate::timestamp::to_millis;
use crate::{StorageError, Store};

/// Whether an alert is sent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Send it; `folded` alerts of the same key were held back since the
    /// last one sent.
    Send { folded: u32 },
    /// Hold it back: one was sent within the window.
    Fold,
}

pub struct AlertWindowRepo<'a> {
    store: &'a Store,
}

impl Store {
    pub fn alert_windows(&self) -> AlertWindowRepo<'_> {
        AlertWindowRepo { store: self }
    }
}

impl AlertWindowRepo<'_> {
    /// Decides an alert of `key` at `now`: the first of each `window` is
    /// sent, the rest folded into the next one sent. The decision is one
    /// locked row, so two instances never both send.
    pub async fn admit(
        &self,
        key: &str,
        now: DateTime<Utc>,
        window: chrono::Duration,
    ) -> Result<Admission, StorageError> {
        for _ in 0..3 {
            let txn = self.store.begin_write().await?;
            let row = alert_window::Entity::find_by_id(key.to_string())
                .lock_exclusive()
                .one(&txn)
                .await?;
            let now_ms = to_millis(now);
            let admission = match row {
                None => {
                    let fresh = alert_window::ActiveModel {
                        key: Set(key.to_string()),
                        window_start: Set(now_ms),
                        folded: Set(0),
                        updated_at: Set(now_ms),
                    };
                    match fresh.insert(&txn).await {
                        Ok(_) => Admission::Send { folded: 0 },
                        // Another instance opened the window first: decide again.
                        Err(e) if is_unique_violation(&e) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Some(row) if now_ms - row.window_start < window.num_milliseconds() => {
                    let folded = row.folded + 1;
                    let mut active = row.into_active_model();
                    active.folded = Set(folded);
                    active.updated_at = Set(now_ms);
                    active.update(&txn).await?;
                    Admission::Fold
                }
                Some(row) => {
                    let folded = u32::try_from(row.folded).unwrap_or(0);
                    let mut active = row.into_active_model();
                    active.window_start = Set(now_ms);
                    active.folded = Set(0);
                    active.updated_at = Set(now_ms);
                    active.update(&txn).await?;
                    Admission::Send { folded }
                }
            };
            txn.commit().await?;
            return Ok(admission);
        }
        // Three lost races in a row: send rather than lose the alert.
        Ok(Admission::Send { folded: 0 })
    }
}
