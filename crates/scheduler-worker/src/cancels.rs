//! Cancel requests for the runs this instance is running.
//!
//! The API stores a request in the run's row (`cancel_requested_at`,
//! `cancelled_by`) and then tells the instances (in-process in `serve`,
//! over Redis in a cluster). The message only wakes a check: the database
//! says which of our running runs are to be cancelled, so a stray message
//! can cancel nothing. While fires run here the check also repeats every
//! [`CHECK_EVERY`], so a lost message still stops the run within a few
//! seconds; with nothing running, nothing is read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::context::shutting_down;
use crate::engine::Shared;

/// How often the running runs' cancel requests are read while any run.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The running runs of this instance that can be cancelled.
#[derive(Debug, Default)]
pub(crate) struct Cancels {
    /// Run id → where its cancel is signalled (who asked).
    running: Mutex<HashMap<i64, watch::Sender<Option<String>>>>,
    /// A message arrived: check at once.
    check: Notify,
    /// A run was registered: start checking.
    registered: Notify,
}

/// One registered run; dropping it unregisters the run.
pub(crate) struct CancelWatch {
    shared: Arc<Shared>,
    run_id: i64,
    signal: watch::Receiver<Option<String>>,
}

impl CancelWatch {
    /// Resolves with who cancelled the run, once someone did.
    pub(crate) async fn cancelled(&mut self) -> String {
        let by = match self.signal.wait_for(Option::is_some).await {
            Ok(by) => by.clone(),
            Err(_) => None,
        };
        match by {
            Some(by) => by,
            // The registry holds the sender while this watch lives: not
            // reached, and never a cancel.
            None => std::future::pending().await,
        }
    }
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        if let Ok(mut running) = self.shared.cancels.running.lock() {
            running.remove(&self.run_id);
        }
    }
}

impl Cancels {
    /// Registers a running run of this instance.
    pub(crate) fn watch(shared: &Arc<Shared>, run_id: i64) -> CancelWatch {
        let (tx, rx) = watch::channel(None);
        if let Ok(mut running) = shared.cancels.running.lock() {
            running.insert(run_id, tx);
        }
        shared.cancels.registered.notify_one();
        CancelWatch {
            shared: Arc::clone(shared),
            run_id,
            signal: rx,
        }
    }

    /// A cancel message arrived: check the database now.
    pub(crate) fn check_now(&self) {
        self.check.notify_one();
    }

    fn running_ids(&self) -> Vec<i64> {
        self.running
            .lock()
            .map(|running| running.keys().copied().collect())
            .unwrap_or_default()
    }

    fn signal(&self, run_id: i64, by: String) {
        if let Ok(running) = self.running.lock()
            && let Some(tx) = running.get(&run_id)
        {
            tx.send_if_modified(|current| {
                if current.is_none() {
                    *current = Some(by);
                    true
                } else {
                    false
                }
            });
        }
    }
}

/// Reads the cancel requests of this instance's running runs when told to,
/// and every [`CHECK_EVERY`] while any run; stops with the engine.
pub(crate) async fn cancel_loop(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let idle = shared.cancels.running_ids().is_empty();
        tokio::select! {
            () = shutting_down(&mut shutdown) => return,
            () = shared.cancels.check.notified() => {}
            () = tokio::time::sleep(CHECK_EVERY), if !idle => {}
            // Nothing runs: wait for a run before reading anything.
            () = shared.cancels.registered.notified(), if idle => continue,
        }
        let ids = shared.cancels.running_ids();
        if ids.is_empty() {
            continue;
        }
        match shared.store.fires().cancel_requests(&ids).await {
            Ok(requests) => {
                for (run_id, by) in requests {
                    tracing::info!(run = run_id, by = %by, "cancel requested");
                    shared.cancels.signal(run_id, by);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read cancel requests; checking again shortly")
            }
        }
    }
}
