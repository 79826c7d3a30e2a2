//! The catch-up run a `run_once` job gets when a freeze window that froze
//! some of its fire times ends (issue 11, part 4).
//!
//! It lives in a lane of its own, keyed by the window's end
//! (`UNIQUE(job_id, lane, scheduled_at)`): every worker that sees the window
//! end may try, and one writes the fire and its first run.

use chrono::{DateTime, Utc};
use sea_orm::ActiveModelTrait;
use sea_orm::ActiveValue::{NotSet, Set};

use super::claim::{TakenFire, record_first_runs};
use super::{FireRepo, LANE_FREEZE, Trigger};
use crate::entity::fire;
use crate::error::is_unique_violation;
use crate::timestamp::to_millis;
use crate::{ClaimContext, ClaimOutcome, FirstRun, StorageError};

impl FireRepo<'_> {
    /// Claims the catch-up run at the end of a freeze window: a fire of
    /// trigger `misfire` at `ended_at` standing for the frozen times from
    /// `first_at`. `Taken` when another instance wrote it.
    pub async fn claim_freeze_catch_up(
        &self,
        job_id: i64,
        first_at: DateTime<Utc>,
        ended_at: DateTime<Utc>,
        first: &FirstRun,
        ctx: &ClaimContext<'_>,
    ) -> Result<ClaimOutcome, StorageError> {
        let txn = self.store.begin_claim().await?;
        let now = to_millis(ctx.now);
        let model = fire::ActiveModel {
            id: NotSet,
            job_id: Set(job_id),
            trigger: Set(Trigger::Misfire.as_str().to_string()),
            lane: Set(LANE_FREEZE),
            prev_at: Set(None),
            first_at: Set(Some(to_millis(first_at))),
            scheduled_at: Set(to_millis(ended_at)),
            state: Set("claimed".to_string()),
            claimed_by: Set(Some(ctx.instance.to_string())),
            claimed_at: Set(Some(now)),
            created_at: Set(now),
            traceparent: Set(None),
            started_by: Set(None),
            callback_url: Set(None),
        };
        let inserted = match model.insert(&txn).await {
            Ok(row) => row,
            // The transaction is rolled back when dropped.
            Err(e) if is_unique_violation(&e) => return Ok(ClaimOutcome::Taken),
            Err(e) => return Err(e.into()),
        };
        let taken = vec![TakenFire {
            fire_id: inserted.id,
            job_id,
            scheduled_at: inserted.scheduled_at,
            trigger: Trigger::Misfire,
            index: 0,
        }];
        let mut claimed = record_first_runs(&txn, taken, &[first], ctx).await?;
        txn.commit().await?;
        Ok(match claimed.remove(&0) {
            Some(c) => ClaimOutcome::Claimed(Box::new(c)),
            None => ClaimOutcome::Taken,
        })
    }
}
