//! The end of a pause (issue 10 part 3): at a paused job's `pausedUntil`
//! the job is enabled again, exactly once across the cluster.
//!
//! Every engine runs [`resume_loop`]. It sleeps until the earliest
//! `paused_until` in the database (read through `idx_jobs_paused_until`),
//! is woken early when a job changes (the loop nudges [`ResumeWake`]), and
//! then asks storage to resume each due job. The database decides: the
//! write is conditional on the job still being disabled with that same
//! end, so of all the engines that woke only one enables it and writes the
//! audit entry (as the system). Every engine that tried then re-reads the
//! job, so it is armed from its new schedule (which starts at the end of
//! the pause: no time of the paused period is fired or caught up); the
//! winner also tells the other workers over Redis.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_coord::Change;
use tokio::sync::{Notify, mpsc, watch};

use crate::clock::sleep_for;
use crate::context::shutting_down;
use crate::engine::{Command, Shared};
use crate::texts;

/// Jobs resumed per statement batch; more are taken at once after.
const BATCH: u64 = 100;
/// How long to wait before reading again after a database error.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Wakes the resume loop to read the next end again (a job changed).
#[derive(Debug, Default)]
pub(crate) struct ResumeWake(Notify);

impl ResumeWake {
    /// A burst of changes coalesces into one read.
    pub(crate) fn nudge(&self) {
        self.0.notify_one();
    }
}

/// Resumes paused jobs at their end until shutdown.
pub(crate) async fn resume_loop(
    shared: Arc<Shared>,
    engine: mpsc::UnboundedSender<Command>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // No pause with an end: nothing to wait for but a change. An end
        // is slept towards at most `MAX_SLEEP` at a time, so a stepped
        // wall clock is noticed, as the timers do.
        let sleep = match next_step(&shared, &engine).await {
            Ok(Some(next)) => Some(sleep_for(shared.clock.now(), next)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or resume paused jobs; retrying");
                Some(RETRY_AFTER)
            }
        };
        let wait = async {
            match sleep {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = wait => {}
            () = shared.resume_wake.0.notified() => {}
            () = shutting_down(&mut shutdown) => return,
        }
    }
}

/// Resumes every job due now, then returns the next end to wait for.
async fn next_step(
    shared: &Shared,
    engine: &mpsc::UnboundedSender<Command>,
) -> Result<Option<DateTime<Utc>>, qiwu_storage::StorageError> {
    let jobs = shared.store.jobs();
    loop {
        let now = shared.clock.now();
        let due = jobs.due_resumes(now, BATCH).await?;
        let full = due.len() as u64 == BATCH;
        for (id, until) in due {
            let resumed = jobs
                .resume(
                    id,
                    until,
                    texts::SYSTEM_ACTOR,
                    texts::pause_ended,
                    shared.clock.now(),
                )
                .await?;
            if resumed.is_some() {
                tracing::info!(job = id, %until, "pause ended: job enabled");
                if let Some(cluster) = &shared.config.cluster
                    && let Err(e) = cluster.coord.publish(Change::Job(id)).await
                {
                    // The other workers' reconciliation repairs it.
                    tracing::warn!(job = id, error = %e, "cannot announce a resumed job");
                }
            }
            // Winner or not, the job is read again here: it is enabled now.
            let _ = engine.send(Command::JobChanged(id));
        }
        if !full {
            return jobs.next_resume().await;
        }
    }
}
