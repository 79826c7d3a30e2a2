//! Freeze windows in the engine (issue 11, part 4).
//!
//! The engine keeps the freezes that have not ended long ago in memory
//! (read at start, after each change message and at each reconciliation)
//! and never polls for them. Where they enter the fire path:
//!
//! - a timer fire time that a freeze holds for its job is not claimed; the
//!   first one of each window asks the claimer for a catch-up instead, and
//!   the catch-up planner (`first_span`) records every time the window
//!   holds as ONE skipped record on the job's chain (lane 0), so it is
//!   written exactly once across a cluster like any record of the chain;
//! - the loop wakes at each window's end and, for every job the window
//!   froze, asks the claimer for the end of the window: a `run_once` job
//!   (within its `misfireGraceMs`) gets one catch-up run, a fire in a lane
//!   of its own keyed by the window's end (`claim_freeze_catch_up`).

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use qiwu_domain::MisfirePolicy;
use qiwu_domain::freeze::{Freeze, catch_up_note, freezing, frozen_times};
use qiwu_domain::misfire::within_grace;
use qiwu_storage::{ClaimContext, ClaimOutcome, Claimed, FirstRun, StorageError, Trigger};

use crate::engine::Shared;
use crate::schedules;

/// How long after its end a freeze is still kept: a catch-up after a
/// downtime spanning it still records its times as frozen.
const KEEP_AFTER_END: chrono::Duration = chrono::Duration::days(7);

/// The freezes the engine knows, shared by the loop and the claimer.
#[derive(Debug, Default)]
pub(crate) struct FreezeBook {
    list: RwLock<Arc<Vec<Freeze>>>,
}

impl FreezeBook {
    pub(crate) fn current(&self) -> Arc<Vec<Freeze>> {
        match self.list.read() {
            Ok(list) => Arc::clone(&list),
            // A panic while replacing left the previous list: still valid.
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn replace(&self, freezes: Vec<Freeze>) {
        match self.list.write() {
            Ok(mut list) => *list = Arc::new(freezes),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(freezes),
        }
    }
}

/// Reads the freezes again.
pub(crate) async fn reload(shared: &Shared) -> Result<(), StorageError> {
    let since = shared.clock.now() - KEEP_AFTER_END;
    let records = shared.store.freezes().ending_after(since).await?;
    let count = records.len();
    shared
        .freezes
        .replace(records.iter().map(|r| r.to_freeze()).collect());
    tracing::debug!(count, "freezes read");
    Ok(())
}

/// The loop's side: which windows it has asked a record for, and up to
/// when it has handled window ends.
#[derive(Debug)]
pub(crate) struct FreezeWatch {
    asked: HashSet<(i64, i64)>,
    line: DateTime<Utc>,
}

impl FreezeWatch {
    pub(crate) fn new(now: DateTime<Utc>) -> FreezeWatch {
        FreezeWatch {
            asked: HashSet::new(),
            line: now,
        }
    }

    /// The freeze holding `at` for this job, if any, and whether this is
    /// the first such time seen here for that window (the one that asks for
    /// the window's record).
    pub(crate) fn frozen(
        &mut self,
        freezes: &[Freeze],
        job: (i64, &str, &str),
        at: DateTime<Utc>,
    ) -> Option<(i64, bool)> {
        let freeze = freezing(freezes, job.0, job.1, job.2, at)?;
        Some((freeze.id, self.asked.insert((job.0, freeze.id))))
    }

    /// The next window end after those already handled.
    pub(crate) fn next_end(&self, freezes: &[Freeze]) -> Option<DateTime<Utc>> {
        freezes
            .iter()
            .map(|f| f.to)
            .filter(|to| *to > self.line)
            .min()
    }

    /// The windows that ended since the last call, up to `now`.
    pub(crate) fn ended(&mut self, freezes: &[Freeze], now: DateTime<Utc>) -> Vec<Freeze> {
        let line = self.line;
        let ended: Vec<Freeze> = freezes
            .iter()
            .filter(|f| f.to > line && f.to <= now)
            .cloned()
            .collect();
        self.line = self.line.max(now);
        let over: HashSet<i64> = ended.iter().map(|f| f.id).collect();
        self.asked.retain(|(_, id)| !over.contains(id));
        ended
    }
}

/// The catch-up runs at the end of windows, for the `run_once` jobs they
/// froze: claimed (exactly once across a cluster), ready to start with
/// their first log line.
pub(crate) async fn claim_end_catch_ups(
    shared: &Shared,
    batch: &[(i64, Freeze)],
    ctx: &ClaimContext<'_>,
) -> Result<Vec<(Claimed, String)>, StorageError> {
    let ids: Vec<i64> = batch.iter().map(|(id, _)| *id).collect();
    let store = &shared.store;
    let jobs = store.jobs().get_many(&ids).await?;
    let calendars = schedules::user_calendars(store, jobs.values().map(|j| &j.time_rules)).await?;
    let mut started = Vec::new();
    for (job_id, freeze) in batch {
        let Some(job) = jobs.get(job_id).filter(|j| j.enabled) else {
            continue;
        };
        if job.misfire_policy != MisfirePolicy::RunOnce {
            continue;
        }
        let tz = shared.zone_of(job.timezone);
        let Some(schedule) =
            schedules::build(job.id, job.cron.clone(), tz, &job.time_rules, &calendars)
        else {
            continue;
        };
        // Times before the job's last change were not the current
        // schedule's: only the frozen times since count.
        let Some(frozen) = frozen_times(&schedule, freeze, job.schedule_from) else {
            continue;
        };
        if !within_grace(&frozen, job.time_rules.misfire_grace_ms, shared.clock.now()) {
            tracing::info!(
                job = job.id,
                freeze = freeze.id,
                "freeze ended; its last frozen time is past the catch-up window"
            );
            continue;
        }
        let outcome = store
            .fires()
            .claim_freeze_catch_up(job.id, frozen.first, freeze.to, &FirstRun::running(), ctx)
            .await?;
        crate::observe::claimed(Trigger::Misfire, &outcome);
        if let ClaimOutcome::Claimed(claimed) = outcome {
            tracing::info!(
                job = job.id,
                freeze = freeze.id,
                "freeze ended: catching up once"
            );
            started.push((*claimed, catch_up_note(freeze)));
        }
    }
    Ok(started)
}
