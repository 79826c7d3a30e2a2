//! The one place run ends are written. Ends are group-committed: whatever
//! queued up while the previous write was in flight goes in the next one.
//!
//! A database that cannot be reached is waited for: the end is written
//! when it is back (a run never stays `running` while its process lives).
//! An end the database itself refuses is tried alone a few times and then
//! replaced by a short `failed` end with no output, so a run is never left
//! `running` (nor a slot held, for a fire that keeps its guards until its
//! end is written: `fire::frees_guards_early`) by a write that cannot
//! succeed.

use std::time::Duration;

use qiwu_storage::{END_WRITE_FALLBACK, EndWritten, RunEnd, RunStatus, Store};
use tokio::sync::{mpsc, oneshot};

/// Ends written per transaction at most.
const MAX_GROUP: usize = 200;
/// Tries of an end the database refuses before its fallback is written.
const MAX_REFUSALS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

struct EndRequest {
    run_id: i64,
    end: RunEnd,
    done: oneshot::Sender<EndWritten>,
}

/// Sends ends to the writer task; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    tx: mpsc::UnboundedSender<EndRequest>,
}

impl Recorder {
    /// Starts the writer; it ends once every `Recorder` is dropped and the
    /// queue is written.
    pub(crate) fn start(store: Store) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Recorder { tx }, tokio::spawn(write_loop(store, rx)))
    }

    /// Writes a run's end and waits until the database took it. `None`
    /// when the writer is gone (the process is stopping; the shutdown sweep
    /// closes the run).
    pub(crate) async fn record(&self, run_id: i64, end: RunEnd) -> Option<EndWritten> {
        let (done, written) = oneshot::channel();
        self.tx.send(EndRequest { run_id, end, done }).ok()?;
        written.await.ok()
    }
}

/// The fallback written instead of an end the database keeps refusing.
fn fallback(end: &RunEnd) -> RunEnd {
    RunEnd {
        status: RunStatus::Failed,
        finished_at: end.finished_at,
        duration_ms: end.duration_ms,
        output: String::new(),
        error: END_WRITE_FALLBACK.to_string(),
        trace_id: None,
        started_at: end.started_at,
    }
}

async fn write_loop(store: Store, mut rx: mpsc::UnboundedReceiver<EndRequest>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(more) => group.push(more),
                Err(_) => break,
            }
        }
        write_group(&store, group).await;
    }
}

/// Writes a group; if the database refuses it, each end alone.
async fn write_group(store: &Store, group: Vec<EndRequest>) {
    let ends: Vec<(i64, RunEnd)> = group.iter().map(|r| (r.run_id, r.end.clone())).collect();
    let mut backoff = FIRST_BACKOFF;
    loop {
        match store.fires().finish_runs(&ends).await {
            Ok(written) => {
                for (request, written) in group.into_iter().zip(written) {
                    let _ = request.done.send(written);
                }
                return;
            }
            Err(e) if e.is_unavailable() => {
                crate::observe::end_write_failed("unreachable");
                tracing::warn!(error = %e, runs = ends.len(), "the database is unreachable; run ends wait for it");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => {
                crate::observe::end_write_failed("refused");
                tracing::error!(error = ?e, runs = ends.len(), "the database refused run ends; writing each alone");
                for request in group {
                    write_alone(store, request).await;
                }
                return;
            }
        }
    }
}

async fn write_alone(store: &Store, request: EndRequest) {
    let mut end = request.end.clone();
    let mut refusals = 0;
    let mut backoff = FIRST_BACKOFF;
    loop {
        match store.fires().finish_run(request.run_id, &end).await {
            Ok(written) => {
                let _ = request.done.send(written);
                return;
            }
            Err(e) if e.is_unavailable() => {
                crate::observe::end_write_failed("unreachable");
                tracing::warn!(run = request.run_id, error = %e, "the database is unreachable; the run end waits for it");
            }
            Err(e) => {
                refusals += 1;
                crate::observe::end_write_failed("refused");
                tracing::error!(run = request.run_id, refusals, error = ?e, "the database refused a run end");
                if refusals == MAX_REFUSALS {
                    crate::observe::end_write_failed("fallback");
                }
                if refusals >= MAX_REFUSALS {
                    end = fallback(&end);
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
