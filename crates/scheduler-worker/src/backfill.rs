//! Backfills (issue 11, part 3) on the engine's side: a backfill's fires
//! run one at a time, oldest first. When one of its fires ends here, the
//! next is released (`pending`) and claimed here like a run-once request;
//! every instance also moves the running backfills on at its pending poll,
//! which picks up a backfill whose fire ended on an instance that is gone.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::claimer::Feedback;
use crate::engine::Shared;

/// The backfill fires this process runs (between attempts too).
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashSet<i64>>);

impl InFlight {
    pub(crate) fn add(&self, fire_id: i64) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(fire_id);
        }
    }

    pub(crate) fn remove(&self, fire_id: i64) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(&fire_id);
        }
    }

    fn contains(&self, fire_id: i64) -> bool {
        // A poisoned lock answers "in flight": the backfill then waits for
        // this process's own end of the fire, never runs two at once.
        self.0.lock().map_or(true, |set| set.contains(&fire_id))
    }
}

/// Whether a claimed fire with no run `running` may still go on (a retry
/// to come): it is in flight here, or claimed by another live instance.
fn in_flight(shared: &Shared, fire_id: i64, claimed_by: &str) -> bool {
    if claimed_by == shared.config.instance {
        return shared.backfill_fires.contains(fire_id);
    }
    shared
        .membership
        .borrow()
        .live
        .iter()
        .any(|id| id == claimed_by)
}

/// A fire of a backfill ended here: release the backfill's next fire and
/// have it claimed.
pub(crate) fn fire_ended(
    shared: &Arc<Shared>,
    feedback: &mpsc::UnboundedSender<Feedback>,
    fire_id: i64,
) {
    shared.backfill_fires.remove(fire_id);
    let shared = Arc::clone(shared);
    let feedback = feedback.clone();
    shared.tracker.clone().spawn(async move {
        let store = &shared.store;
        let backfill = match store.backfills().of_fire(fire_id).await {
            Ok(Some(id)) => id,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(fire = fire_id, error = %e, "cannot read a fire's backfill; the next poll moves it on");
                return;
            }
        };
        advance(&shared, &feedback, backfill, Some(fire_id)).await;
    });
}

/// Moves every running backfill on (the pending poll).
pub(crate) async fn poll(shared: &Arc<Shared>, feedback: &mpsc::UnboundedSender<Feedback>) {
    match shared.store.backfills().running().await {
        Ok(ids) => {
            for id in ids {
                advance(shared, feedback, id, None).await;
            }
        }
        Err(e) => tracing::error!(error = %e, "reading running backfills failed"),
    }
}

async fn advance(
    shared: &Arc<Shared>,
    feedback: &mpsc::UnboundedSender<Feedback>,
    backfill: i64,
    finished: Option<i64>,
) {
    let check = |fire: i64, claimed_by: &str| in_flight(shared, fire, claimed_by);
    match shared
        .store
        .backfills()
        .advance(backfill, finished, &check, shared.clock.now())
        .await
    {
        Ok(Some(next)) => {
            tracing::debug!(backfill, fire = next, "backfill fire released");
            // The loop ends only at shutdown, when nothing is claimed.
            let _ = feedback.send(Feedback::Released(next));
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(backfill, error = %e, "cannot move a backfill on; the next poll retries")
        }
    }
}
