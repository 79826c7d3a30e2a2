//! One claimed fire, from its claim to its recorded end: a [`Fire`] owns
//! what it holds (the permit that bounds fires in flight, the job's local
//! slot, the cluster lock) as guards, runs the attempts, and after each one
//! [`decide`] says what is written and what comes next.
//!
//! ```text
//! claimed ─▶ runnable? ─▶ slot ─▶ lock ─▶ attempt ─▶ decide ─▶ record ─┬─▶ done
//!              │ no        │busy   │held                              ├─▶ retry ─▶ attempt…
//!              ▼           ▼       ▼                                  └─▶ linger (handler still
//!            failed     skipped  skipped                                  running: guards kept
//!                                                                         until it returns)
//! ```

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_coord::Change;
use qiwu_domain::OverlapPolicy;
use qiwu_domain::alert::FireEnd;
use qiwu_domain::params;
use qiwu_domain::retry::{RetryBackoff, RetryTiming, jitter_seed};
use qiwu_storage::{EndWritten, JobRecord, RunEnd, RunStart, RunStatus, Trigger};
use serde_json::{Map, Value};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::ahead::Hold;
use crate::cancels::Cancels;
use crate::clock::sleep_for;
use crate::context::{
    LogSink, MAX_ERROR_CHARS, RunContext, StopReason, Stopper, cut, output_of, shutting_down,
    stop_pair,
};
use crate::engine::{Shared, TimeoutInfo};
use crate::handlers::Handler;
use crate::lease::{LockLease, Slot};
use crate::observe::Withdrawal;
use crate::texts;

/// How often a fire waiting its turn in a cluster tries the job's lock.
const LOCK_RETRY: Duration = Duration::from_millis(500);

/// A claimed fire and everything it holds.
pub(crate) struct Fire {
    pub shared: Arc<Shared>,
    /// The job as it was when the fire was claimed.
    pub job: JobRecord,
    pub fire_id: i64,
    pub trigger: Trigger,
    /// The nominal time (`scheduledAt`).
    pub scheduled_at: DateTime<Utc>,
    /// When it was to start: the nominal time plus the job's jitter for a
    /// timer fire; the lag is measured from here.
    pub due: DateTime<Utc>,
    /// The run row of the current attempt.
    pub run_id: i64,
    pub attempt: u32,
    /// A first log line of the run (what a catch-up stands for).
    pub note: Option<String>,
    /// Declared before the slot, so dropped first: the next fire of the
    /// job that the freed slot lets in finds the lock to take over.
    pub lock: Option<LockLease>,
    pub slot: Option<Slot>,
    /// Set for a fire claimed ahead of its time, until that time
    /// (`crate::ahead`).
    pub ahead: Option<Hold>,
    /// The job had a run `running` on another instance when this fire was
    /// claimed (`Claimed::busy`): claimed ahead, the fire asks the ledger
    /// again at its time whether that run has ended.
    pub busy_at_claim: bool,
    /// Held for its drop: a place among the fires in flight.
    pub _permit: OwnedSemaphorePermit,
}

/// How one attempt ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The handler returned this value.
    Returned(String),
    /// The handler failed with this message.
    Failed(String),
    Panicked(String),
    TimedOut,
    LockLost,
    /// Someone cancelled the run (named here).
    Cancelled(String),
    /// The process is stopping; the handler's answer after it was told to
    /// stop (`Err` when it failed or panicked).
    Shutdown(Result<String, String>),
}

/// What is written for an attempt, and whether another one follows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub status: RunStatus,
    pub output: String,
    pub error: String,
    pub retry: bool,
}

/// Decides an attempt's record from its outcome. `log` is what the handler
/// wrote; retries follow failures and timeouts while attempts remain, never
/// a lost lock or a shutdown.
pub(crate) fn decide(
    outcome: &Outcome,
    log: &str,
    timeout_ms: i64,
    attempts_left: bool,
) -> Decision {
    let with = |status, output: String, error: String, retryable: bool| Decision {
        status,
        output,
        error: cut(&error, MAX_ERROR_CHARS),
        retry: retryable && attempts_left,
    };
    match outcome {
        Outcome::Returned(value) => with(
            RunStatus::Success,
            output_of(log, value),
            String::new(),
            false,
        ),
        Outcome::Failed(message) => {
            with(RunStatus::Failed, output_of(log, ""), message.clone(), true)
        }
        Outcome::Panicked(message) => with(
            RunStatus::Failed,
            output_of(log, ""),
            format!("处理器异常退出 / The handler panicked: {message}"),
            true,
        ),
        Outcome::TimedOut => with(
            RunStatus::Timeout,
            output_of(log, ""),
            texts::timed_out(timeout_ms),
            true,
        ),
        Outcome::LockLost => with(
            RunStatus::Failed,
            output_of(log, ""),
            texts::LOCK_LOST.to_string(),
            false,
        ),
        Outcome::Cancelled(by) => with(
            RunStatus::Cancelled,
            output_of(log, ""),
            texts::cancelled(by),
            false,
        ),
        Outcome::Shutdown(Ok(value)) => with(
            RunStatus::Success,
            output_of(log, value),
            String::new(),
            false,
        ),
        Outcome::Shutdown(Err(message)) => with(
            RunStatus::Failed,
            output_of(log, ""),
            format!("{}\n{message}", texts::REASON_SHUTDOWN),
            false,
        ),
    }
}

/// How a fire whose last attempt ended so counts for alerts: a process
/// shutting down is no verdict on the job, so neither a success nor a
/// failure.
fn final_end(outcome: &Outcome, status: RunStatus) -> FireEnd {
    match (outcome, status) {
        (Outcome::Shutdown(_), _) => FireEnd::Skipped,
        (_, RunStatus::Success) => FireEnd::Success,
        (_, RunStatus::Timeout) => FireEnd::Timeout,
        (_, RunStatus::Failed) => FireEnd::Failed,
        _ => FireEnd::Skipped,
    }
}

/// Whether a fire's slot and lock may go before its final end is written:
/// its handler returned (nothing of it lingers) and nothing after the end
/// depends on the job staying guarded (a `queue_one` or `replace` fire's
/// turn is read from the ledger; `maxRuns` counts the success after the
/// end, before the next fire may start). Ends are group-committed, so
/// under load an end waits for its batch; a guard held meanwhile made the
/// next second's fire a false "previous run has not finished".
fn frees_guards_early(outcome: &Outcome, waits_its_turn: bool, has_max_runs: bool) -> bool {
    matches!(
        outcome,
        Outcome::Returned(_) | Outcome::Failed(_) | Outcome::Panicked(_)
    ) && !waits_its_turn
        && !has_max_runs
}

/// What a fire claimed ahead does at its time.
enum AtTime {
    Run,
    /// Taken back: the time is unclaimed again.
    TakenBack,
    /// Not to run, and the claim could not be taken back: recorded skipped.
    Skip,
    /// Someone cancelled the run before its time (named here).
    Cancelled(String),
}

/// The handler of a job that can run, with its checked params.
type Runnable = (Arc<dyn Handler>, Map<String, Value>);

/// An attempt whose handler may still be running.
struct Attempt {
    outcome: Outcome,
    log: LogSink,
    started: tokio::time::Instant,
    started_at: DateTime<Utc>,
    /// The handler's task, when it has not returned.
    task: Option<JoinHandle<Result<String, String>>>,
    stopper: Stopper,
}

impl Fire {
    /// Runs the fire to its end and records every attempt.
    /// Rare paths that wait on the database (or Redis) are awaited boxed:
    /// every fire's task reserves room for the largest future it may
    /// await, and thousands of fires claimed ahead wait at once.
    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>) {
        // Claimed ahead: everything below is judged at the time, as if the
        // claim had come then; the run's real start is written at its end.
        let claimed_ahead = self.ahead.is_some();
        if claimed_ahead {
            self.guard_while_waiting().await;
        }
        match self.wait_for_time(&mut stop).await {
            AtTime::Run => {}
            AtTime::TakenBack => return,
            AtTime::Skip => {
                return self
                    .end_at_once(RunStatus::Skipped, texts::NOT_TAKEN_BACK, "")
                    .await;
            }
            AtTime::Cancelled(by) => {
                crate::observe::decided_at_time(false);
                let error = texts::cancelled(&by);
                return self.end_at_once(RunStatus::Cancelled, "", &error).await;
            }
        }
        if claimed_ahead {
            // The overlap rule at its time; counted as its claim would
            // have been then.
            if !self.job.allow_concurrent && self.slot.is_none() {
                self.slot = self.shared.slots.try_take(self.job.id);
            }
            let overlaps = !self.job.allow_concurrent && self.slot.is_none();
            let elsewhere = !overlaps && self.runs_elsewhere().await;
            crate::observe::decided_at_time(overlaps || elsewhere);
            if elsewhere {
                return self
                    .end_at_once(RunStatus::Skipped, texts::SKIP_ELSEWHERE, "")
                    .await;
            }
        }
        let (handler, params) = match self.runnable() {
            Ok(ready) => ready,
            Err(reason) => return self.end_at_once(RunStatus::Failed, "", &reason).await,
        };
        if self.job.waits_its_turn() {
            if let Err((status, output, error)) = Box::pin(self.wait_turn(&mut stop)).await {
                if status != RunStatus::Skipped {
                    Box::pin(self.never_started()).await;
                }
                return self.end_at_once(status, &output, &error).await;
            }
        } else if !self.job.allow_concurrent && self.slot.is_none() {
            match self.shared.slots.try_take(self.job.id) {
                Some(slot) => self.slot = Some(slot),
                None => {
                    return self
                        .end_at_once(RunStatus::Skipped, texts::SKIP_OVERLAP, "")
                        .await;
                }
            }
        }
        if !self.job.waits_its_turn()
            && let Err((status, output, error)) = self.take_lock().await
        {
            return self.end_at_once(status, output, error).await;
        }
        crate::observe::fire_started(self.trigger, self.due, self.shared.clock.now());
        loop {
            let attempts_left = self.attempt < self.attempts();
            let span = crate::observe::attempt_span(
                &self.job,
                self.attempt,
                self.trigger,
                self.scheduled_at,
            );
            let running = qiwu_telemetry::metrics().running();
            let mut attempt = self
                .attempt_once(&handler, &params, &mut stop)
                .instrument(span.clone())
                .await;
            let ended = (tokio::time::Instant::now(), self.shared.clock.now());
            // The end is written after every other fire ready now has
            // started: at a busy instant (thousands of fires due at once)
            // each fire's start then waits only for the starts before it,
            // not for their ends too. The attempt's end and duration are
            // taken above, so the wait does not count in them.
            tokio::task::yield_now().await;
            let decision = decide(
                &attempt.outcome,
                &attempt.log.contents(),
                self.job.timeout_ms,
                attempts_left,
            );
            let seconds = (ended.0 - attempt.started).as_secs_f64();
            crate::observe::attempt_decided(&span, &self.job.handler, &decision, seconds);
            let retry = decision.retry;
            let (status, error) = (decision.status, decision.error.clone());
            let succeeded = status == RunStatus::Success;
            let real_start = (claimed_ahead && self.attempt == 1).then_some(attempt.started_at);
            let end = self.end_of(&attempt, ended, decision, real_start);
            if !retry
                && frees_guards_early(
                    &attempt.outcome,
                    self.job.waits_its_turn(),
                    self.job.time_rules.max_runs.is_some(),
                )
            {
                // Its end is taken (`finished_at` included): the next fire
                // of the job may start while the end waits for its batch.
                // The lock first: the fire the slot lets in takes it over.
                self.lock = None;
                self.slot = None;
            }
            self.write_end(end).await;
            if succeeded {
                Box::pin(self.count_towards_limit()).await;
            }
            drop(running);
            if !retry {
                self.alert_end(final_end(&attempt.outcome, status), status, &error);
                self.report_end();
            }
            match attempt.outcome {
                Outcome::TimedOut | Outcome::Cancelled(_) => {
                    if matches!(attempt.outcome, Outcome::TimedOut) {
                        Box::pin(self.alert_timeout(attempt.started_at)).await;
                    }
                    // As after a timeout, the job's next fire waits until
                    // the handler really returned.
                    if !self.job.allow_concurrent
                        && !self.wait_for_handler(&mut attempt, &mut stop).await
                    {
                        // The retry will not come: this attempt was the last.
                        if retry {
                            self.report_end();
                        }
                        return self.linger(attempt.task);
                    }
                }
                Outcome::LockLost => {
                    if let Some(lock) = &mut self.lock {
                        lock.keep_until_expiry();
                    }
                    return self.linger(attempt.task);
                }
                _ => {}
            }
            if !retry {
                return;
            }
            if !self.pause_before_retry(&mut stop).await || !self.next_attempt(&mut stop).await {
                // The retry will not come: the last written attempt ends it.
                self.report_end();
                return;
            }
        }
    }

    /// `maxRuns`: a successful scheduled fire (a timer fire or a catch-up
    /// run, not a run-once request or a backfill) counts, and the one reaching the limit
    /// disables the job, audited as the system. The next claim of the job
    /// then finds it disabled (`Stale`), so every instance disarms it.
    async fn count_towards_limit(&self) {
        if self.job.time_rules.max_runs.is_none()
            || matches!(self.trigger, Trigger::Manual | Trigger::Backfill)
        {
            return;
        }
        let summary = texts::limit_reached(&self.job.name, self.job.time_rules.max_runs);
        match self
            .shared
            .store
            .jobs()
            .count_scheduled_success(
                self.job.id,
                texts::SYSTEM_ACTOR,
                &summary,
                self.shared.clock.now(),
            )
            .await
        {
            Ok(Some(job)) => {
                tracing::info!(job = job.id, max_runs = ?job.time_rules.max_runs, "the job reached its maxRuns and disabled itself")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(job = self.job.id, error = %e, "counting a success towards maxRuns failed; this success is not counted")
            }
        }
    }

    fn attempts(&self) -> u32 {
        u32::try_from(self.job.retry_count.max(0)).unwrap_or(0) + 1
    }

    /// The handler and params, or why the job cannot run at all (such runs
    /// are `failed` and never retried).
    fn runnable(&self) -> Result<Runnable, String> {
        let job = &self.job;
        let Some(descriptor) = self.shared.registry.catalog().get(&job.handler) else {
            return Err(texts::handler_missing(&job.handler));
        };
        let Some(handler) = self.shared.registry.get(&job.handler).cloned() else {
            return Err(texts::handler_not_here(&job.handler));
        };
        let params = params::check(&descriptor.schema, Some(&job.params)).map_err(|errors| {
            let list = errors
                .iter()
                .map(|e| format!("{}: {}", e.field(), e.message(qiwu_domain::Lang::En)))
                .collect::<Vec<_>>()
                .join("; ");
            texts::params_invalid(&list)
        })?;
        Ok((handler, params))
    }

    /// For `queue_one` and `replace`: waits until the running fire of the
    /// job has ended (its slot here; in a cluster, its lock), having asked
    /// it to stop first for `replace`. `Err` is how the run ends instead: a
    /// second fire waiting (`queue_one`), a cancel, shutdown, Redis gone.
    async fn wait_turn(
        &mut self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), (RunStatus, String, String)> {
        let asked = tokio::time::Instant::now();
        // Whether anything ran before this fire's turn came.
        let mut waited = false;
        let job_id = self.job.id;
        // Its own handle: the fire itself is changed while these are held.
        let shared = Arc::clone(&self.shared);
        let fires = shared.store.fires();
        if self.job.overlap_policy == OverlapPolicy::Replace {
            let by = texts::replaced_by(self.scheduled_at);
            match fires
                .cancel_others(job_id, self.run_id, &by, self.shared.clock.now())
                .await
            {
                Ok(replaced) => {
                    waited = !replaced.is_empty();
                    for run in replaced {
                        tracing::info!(job = job_id, run, "replacing the running fire");
                        self.shared.cancels.check_now();
                        if let Some(cluster) = &self.shared.config.cluster
                            && let Err(e) = cluster.coord.publish(Change::Cancel(run)).await
                        {
                            // Its instance still finds the request within seconds.
                            tracing::warn!(run, error = %e, "cannot announce the replacement");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "cannot ask the running fire to stop; waiting for it")
                }
            }
        } else {
            match fires.running_before(job_id, self.run_id, None).await {
                // The running fire and one already waiting.
                Ok(n) if n >= 2 => {
                    return Err((
                        RunStatus::Skipped,
                        texts::SKIP_QUEUE_FULL.into(),
                        String::new(),
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(job = job_id, error = %e, "cannot count waiting fires; waiting")
                }
            }
        }
        let mut cancel = Cancels::watch(&self.shared, self.run_id);
        let stopping = || {
            (
                RunStatus::Failed,
                String::new(),
                texts::REASON_SHUTDOWN.to_string(),
            )
        };
        if self.slot.is_none() {
            self.slot = self.shared.slots.try_take(job_id);
        }
        if self.slot.is_none() {
            let slots = self.shared.slots.clone();
            waited = true;
            tokio::select! {
                slot = slots.take(job_id) => self.slot = Some(slot),
                () = shutting_down(stop) => return Err(stopping()),
                by = cancel.cancelled() => {
                    return Err((RunStatus::Cancelled, String::new(), texts::cancelled_waiting(&by)));
                }
            }
        }
        if let Some(locks) = &shared.locks {
            loop {
                match LockLease::acquire(locks, job_id, &shared.config.instance).await {
                    Ok(Some(lease)) => {
                        self.keep_lock(lease);
                        break;
                    }
                    Ok(None) => waited = true,
                    Err(e) => {
                        tracing::warn!(job = job_id, error = %e, "job lock unavailable");
                        return Err((
                            RunStatus::Failed,
                            String::new(),
                            texts::LOCK_UNAVAILABLE.to_string(),
                        ));
                    }
                }
                // The holder runs elsewhere: its end frees the lock.
                tokio::select! {
                    () = tokio::time::sleep(LOCK_RETRY) => {}
                    () = shutting_down(stop) => return Err(stopping()),
                    by = cancel.cancelled() => {
                        return Err((RunStatus::Cancelled, String::new(), texts::cancelled_waiting(&by)));
                    }
                }
            }
        }
        // Its run starts now, after the one before ended.
        if waited {
            let note = texts::waited(asked.elapsed().as_millis());
            self.note = Some(match self.note.take() {
                Some(first) => format!("{first}\n{note}"),
                None => note,
            });
            if let Err(e) = fires
                .restart_run(self.run_id, self.shared.clock.now())
                .await
            {
                tracing::warn!(run = self.run_id, error = %e, "cannot move the waited run's start");
            }
        }
        Ok(())
    }

    /// For a fire claimed ahead, at its time: the ledger still shows an
    /// earlier run of its non-concurrent job `running` on another instance
    /// (or a crashed one's not yet closed; this instance's own are its
    /// slot's business), which the claim found then and a claim at this
    /// time would have skipped for. The job lock alone would not: Redis may
    /// have lost it. Asked only when the claim found one (which it looks
    /// for only in a cluster), so a job that ran alone then costs nothing
    /// here; a database that cannot answer leaves the decision to the lock.
    async fn runs_elsewhere(&self) -> bool {
        if !self.busy_at_claim || self.job.allow_concurrent {
            return false;
        }
        match self
            .shared
            .store
            .fires()
            .running_before(self.job.id, self.run_id, Some(&self.shared.config.instance))
            .await
        {
            Ok(running) => running > 0,
            Err(e) => {
                tracing::warn!(job = self.job.id, error = %e, "cannot check for a run elsewhere");
                false
            }
        }
    }

    /// A fire claimed ahead takes its non-concurrent job's slot and, in a
    /// cluster, its lock while it waits for its time, when both are free
    /// now: at a busy instant the fire then only has to start. One still
    /// held (an earlier run goes on) is looked at again at the time, as if
    /// the claim had come then; a held slot or lock only keeps other fires
    /// of the job from starting before this one.
    async fn guard_while_waiting(&mut self) {
        if self.job.allow_concurrent || self.job.waits_its_turn() {
            return;
        }
        if self.slot.is_none() {
            self.slot = self.shared.slots.try_take(self.job.id);
        }
        let Some(locks) = &self.shared.locks else {
            return;
        };
        if self.slot.is_none() || self.lock.is_some() {
            return;
        }
        let taken = LockLease::try_acquire(locks, self.job.id, &self.shared.config.instance).await;
        match taken {
            Ok(Some(lease)) => self.keep_lock(lease),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(job = self.job.id, error = %e, "job lock not taken ahead; trying at the time");
            }
        }
    }

    /// Holds a lock just taken, with its trace event.
    fn keep_lock(&mut self, lease: LockLease) {
        tracing::debug!(job = self.job.id, token = lease.token(), "job lock taken");
        crate::observe::lock_event("lock.acquired", self.job.id, lease.token());
        self.lock = Some(lease);
    }

    /// In a cluster, a non-concurrent job also needs its Redis lock (unless
    /// it took it while it waited, and still holds it). `Err` is how the
    /// claimed run must end instead.
    async fn take_lock(&mut self) -> Result<(), (RunStatus, &'static str, &'static str)> {
        let Some(locks) = &self.shared.locks else {
            return Ok(());
        };
        if self.job.allow_concurrent {
            return Ok(());
        }
        if self.lock.as_ref().is_some_and(|lock| !lock.is_lost()) {
            return Ok(());
        }
        // Lost while it waited: it is taken afresh, as at any time.
        self.lock = None;
        let taken = LockLease::acquire(locks, self.job.id, &self.shared.config.instance).await;
        match taken {
            Ok(Some(lease)) => {
                self.keep_lock(lease);
                Ok(())
            }
            Ok(None) => Err((RunStatus::Skipped, texts::SKIP_ELSEWHERE, "")),
            Err(e) => {
                tracing::warn!(job = self.job.id, error = %e, "job lock unavailable");
                Err((RunStatus::Failed, "", texts::LOCK_UNAVAILABLE))
            }
        }
    }

    /// Runs one attempt until the handler returns, the deadline passes, the
    /// run is cancelled, the process stops or the lock is lost.
    async fn attempt_once(
        &self,
        handler: &Arc<dyn Handler>,
        params: &Map<String, Value>,
        stop: &mut watch::Receiver<bool>,
    ) -> Attempt {
        let timeout =
            (self.job.timeout_ms > 0).then(|| Duration::from_millis(self.job.timeout_ms as u64));
        // Registered before the handler starts: a cancel request is seen
        // however early it comes.
        let mut cancel = Cancels::watch(&self.shared, self.run_id);
        let mut attempt = self.start_handler(handler, params, timeout);
        let Some(task) = attempt.task.as_mut() else {
            return attempt;
        };
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let lost = async {
            match &self.lock {
                Some(lock) => lock.lost().await,
                None => std::future::pending().await,
            }
        };
        let (outcome, reason) = tokio::select! {
            joined = task => {
                attempt.task = None;
                attempt.outcome = match joined {
                    Ok(Ok(value)) => Outcome::Returned(value),
                    Ok(Err(message)) => Outcome::Failed(message),
                    Err(join) => Outcome::Panicked(join.to_string()),
                };
                return attempt;
            }
            () = deadline => (Outcome::TimedOut, StopReason::Timeout),
            () = lost => (Outcome::LockLost, StopReason::LockLost),
            by = cancel.cancelled() => (Outcome::Cancelled(by), StopReason::Cancelled),
            () = shutting_down(stop) => (Outcome::Shutdown(Ok(String::new())), StopReason::Shutdown),
        };
        attempt.stopper.stop(reason);
        attempt.outcome = outcome;
        if matches!(attempt.outcome, Outcome::Shutdown(_))
            && let Some(task) = attempt.task.take()
        {
            // The engine bounds this wait by the grace period.
            attempt.outcome = Outcome::Shutdown(match task.await {
                Ok(answer) => answer,
                Err(join) => Err(join.to_string()),
            });
        }
        attempt
    }

    /// Spawns the handler with its context; the attempt's outcome is set
    /// once it is known.
    fn start_handler(
        &self,
        handler: &Arc<dyn Handler>,
        params: &Map<String, Value>,
        timeout: Option<Duration>,
    ) -> Attempt {
        let started_at = self.shared.clock.now();
        let (stopper, signal) = stop_pair();
        let log = LogSink::default();
        if let Some(note) = &self.note {
            log.line(note);
        }
        let ctx = RunContext {
            job_id: self.job.id,
            job_name: self.job.name.clone(),
            fire_id: self.fire_id,
            attempt: self.attempt,
            deadline: timeout
                .and_then(|t| chrono::Duration::from_std(t).ok())
                .map(|t| started_at + t),
            stop: signal,
            log: log.clone(),
        };
        Attempt {
            outcome: Outcome::Returned(String::new()),
            log,
            started: tokio::time::Instant::now(),
            started_at,
            // In the attempt's span: an outgoing call carries its traceparent.
            task: Some(tokio::spawn(
                handler.run(params.clone(), ctx).in_current_span(),
            )),
            stopper,
        }
    }

    /// The record of an attempt that ended at `ended` (`write_end` writes
    /// it); `real_start` for the first attempt of a fire claimed ahead,
    /// whose row holds the planned start.
    fn end_of(
        &self,
        attempt: &Attempt,
        (ended, finished_at): (tokio::time::Instant, DateTime<Utc>),
        decision: Decision,
        real_start: Option<DateTime<Utc>>,
    ) -> RunEnd {
        RunEnd {
            status: decision.status,
            finished_at,
            duration_ms: i64::try_from((ended - attempt.started).as_millis()).unwrap_or(i64::MAX),
            output: decision.output,
            error: decision.error,
            trace_id: crate::observe::trace_id(),
            started_at: real_start,
        }
    }

    /// A fire claimed ahead waits for its time. It then runs only while
    /// its job is the version it was claimed with and no freeze window
    /// holds the time; otherwise, or when the process stops first, the
    /// claim is taken back and (unless stopping) the time handed back to
    /// the loop (`crate::ahead`). Its run shows `running` meanwhile, so a
    /// cancel of it is heard and ends it before it starts. A fire not
    /// claimed ahead runs at once.
    async fn wait_for_time(&mut self, stop: &mut watch::Receiver<bool>) -> AtTime {
        let Some(hold) = self.ahead.take() else {
            return AtTime::Run;
        };
        let wait = sleep_for(self.shared.clock.now(), self.due);
        let mut cancel = Cancels::watch(&self.shared, self.run_id);
        let stopping = tokio::select! {
            biased;
            () = shutting_down(stop) => true,
            by = cancel.cancelled() => return AtTime::Cancelled(by),
            () = tokio::time::sleep(wait) => false,
        };
        drop(cancel);
        let why = if stopping {
            Withdrawal::Stopping
        } else if !hold.current(self.job.version) {
            Withdrawal::Changed
        } else if self.frozen() {
            Withdrawal::Frozen
        } else {
            return AtTime::Run;
        };
        let fires = self.shared.store.fires();
        // Boxed: rarely taken, and a waiting fire would otherwise hold the
        // room for the database call all along.
        match Box::pin(fires.withdraw(self.fire_id, self.run_id, &self.shared.config.instance))
            .await
        {
            Ok(true) => {
                crate::observe::withdrawn(self.job.id, self.scheduled_at, why);
                if why != Withdrawal::Stopping {
                    hold.hand_back(self.scheduled_at);
                }
                AtTime::TakenBack
            }
            Ok(false) => {
                // Swept meanwhile (this instance counted as lost): the
                // record stands as the sweep wrote it.
                tracing::warn!(
                    job = self.job.id,
                    run = self.run_id,
                    "a fire claimed ahead was closed before its time; nothing to take back"
                );
                AtTime::TakenBack
            }
            Err(e) => {
                tracing::warn!(job = self.job.id, run = self.run_id, error = %e, ?why, "cannot take back a fire claimed ahead; recording it skipped");
                AtTime::Skip
            }
        }
    }

    /// A freeze window holds this fire's time.
    fn frozen(&self) -> bool {
        let job = &self.job;
        self.shared
            .freezes
            .current()
            .iter()
            .any(|f| f.freezes(job.id, &job.group, &job.handler, self.scheduled_at))
    }

    /// A fire that waited for its turn and ends without it (cancelled,
    /// replaced, shutting down): its start moves to now, so its record
    /// occupies no time beside the fire it waited for.
    async fn never_started(&self) {
        let fires = self.shared.store.fires();
        if let Err(e) = fires
            .restart_run(self.run_id, self.shared.clock.now())
            .await
        {
            tracing::warn!(run = self.run_id, error = %e, "cannot move the start of a fire that never ran");
        }
    }

    /// Ends the claimed run without running the handler.
    async fn end_at_once(self, status: RunStatus, output: &str, error: &str) {
        let end = RunEnd {
            status,
            finished_at: self.shared.clock.now(),
            duration_ms: 0,
            output: output.to_string(),
            error: cut(error, MAX_ERROR_CHARS),
            trace_id: crate::observe::trace_id(),
            started_at: None,
        };
        self.write_end(end).await;
        if status == RunStatus::Failed {
            self.alert_end(FireEnd::Failed, status, error);
        }
        self.report_end();
    }

    /// After the fire's final end is written: a run-once fire reports it to
    /// the callback URL its request named (if any).
    fn report_end(&self) {
        if self.trigger == Trigger::Manual {
            crate::callbacks::report(&self.shared, self.fire_id);
        }
    }

    async fn write_end(&self, end: RunEnd) {
        let status = end.status;
        let written = self.shared.recorder.record(self.run_id, end).await;
        crate::observe::run_end_written(&self.job.handler, status, written);
        match written {
            Some(EndWritten::Recorded) => {}
            Some(EndWritten::NoRow) => tracing::error!(
                job = self.job.id,
                run = self.run_id,
                "the run's end matched no open run (closed by someone else, or deleted); its outcome is lost"
            ),
            None => tracing::warn!(
                run = self.run_id,
                "stopping: the run's end was not written; the shutdown sweep closes it"
            ),
        }
    }

    async fn alert_timeout(&self, started_at: DateTime<Utc>) {
        (self.shared.config.on_timeout)(TimeoutInfo {
            job_id: self.job.id,
            job_name: self.job.name.clone(),
            handler: self.job.handler.clone(),
            timeout_ms: self.job.timeout_ms,
            started_at,
            attempt: self.attempt,
            timezone: self.shared.zone_of(self.job.timezone),
            channels: self.job.alert.channels.clone(),
        })
        .await;
    }

    /// After the fire's final end is written: moves the job's alert state
    /// and raises what its policy decides, on the tracker so the fire's
    /// guards are not held meanwhile. A success of a job with no alert
    /// state (the job row read at the claim says so, and this process did
    /// not leave any since) costs nothing.
    fn alert_end(&self, end: FireEnd, status: RunStatus, error: &str) {
        if end == FireEnd::Skipped {
            return;
        }
        let marked = self
            .shared
            .alert_marks
            .lock()
            .map(|marks| marks.contains(&self.job.id))
            // A poisoned lock only loses the shortcut.
            .unwrap_or(true);
        if end == FireEnd::Success && self.job.alert_state.is_clear() && !marked {
            return;
        }
        let facts = crate::alerts::FireEndFacts {
            job_id: self.job.id,
            end,
            status: status.as_str().to_owned(),
            error: error.to_owned(),
            attempt: self.attempt,
            run_id: self.run_id,
            finished_at: self.shared.clock.now(),
            timezone: self.shared.zone_of(self.job.timezone),
        };
        let shared = self.shared.clone();
        self.shared.tracker.spawn(async move {
            let now = shared.clock.now();
            match crate::alerts::fire_ended(&shared.store, &facts, now).await {
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(job = facts.job_id, run = facts.run_id, error = ?e, "cannot decide the fire's alert");
                    return;
                }
            }
            // Remember whether the state is left non-clear, for the
            // shortcut above.
            let clear = end == FireEnd::Success;
            if let Ok(mut marks) = shared.alert_marks.lock() {
                if clear {
                    marks.remove(&facts.job_id);
                } else {
                    marks.insert(facts.job_id);
                }
            }
        });
    }

    /// After a timeout, a non-concurrent job keeps its slot and lock until
    /// the handler really returns. False when the wait was cut short (the
    /// process stops, or the lock is lost) with the handler still running.
    async fn wait_for_handler(
        &mut self,
        attempt: &mut Attempt,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        enum Waited {
            Returned,
            Stopping,
            LockLost,
        }
        let Some(task) = attempt.task.as_mut() else {
            return true;
        };
        let lost = async {
            match &self.lock {
                Some(lock) => lock.lost().await,
                None => std::future::pending().await,
            }
        };
        let waited = tokio::select! {
            _ = task => Waited::Returned,
            () = shutting_down(stop) => Waited::Stopping,
            () = lost => Waited::LockLost,
        };
        match waited {
            Waited::Returned => {
                attempt.task = None;
                true
            }
            Waited::Stopping => false,
            Waited::LockLost => {
                attempt.stopper.stop(StopReason::LockLost);
                if let Some(lock) = &mut self.lock {
                    lock.keep_until_expiry();
                }
                false
            }
        }
    }

    /// Keeps the fire's guards until a handler that ignores its stop signal
    /// really returns, so no later fire of the job overlaps it here.
    fn linger(self, task: Option<JoinHandle<Result<String, String>>>) {
        let Some(task) = task else {
            return;
        };
        let tracker = self.shared.tracker.clone();
        tracker.spawn(async move {
            let _ = task.await;
            drop(self);
        });
    }

    /// The wait before the retry that follows the current attempt, by the
    /// job's `retryBackoff` (attempt n is followed by retry n).
    fn retry_delay(&self) -> Duration {
        let timing = RetryTiming {
            backoff: RetryBackoff::parse(&self.job.retry_backoff).unwrap_or(RetryBackoff::Fixed),
            interval_ms: self.job.retry_interval_ms,
            max_interval_ms: self.job.retry_max_interval_ms,
            jitter: self.job.retry_jitter,
        };
        let n = self.attempt;
        Duration::from_millis(timing.delay_ms(n, jitter_seed(self.fire_id, n)))
    }

    /// Waits the retry delay; false when the fire must end instead.
    async fn pause_before_retry(&mut self, stop: &mut watch::Receiver<bool>) -> bool {
        let interval = self.retry_delay();
        let lost = async {
            match &self.lock {
                Some(lock) => lock.lost().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(interval) => true,
            () = shutting_down(stop) => false,
            () = lost => false,
        }
    }

    /// Records the next attempt's run row; false when it cannot be written
    /// before the process stops.
    async fn next_attempt(&mut self, stop: &mut watch::Receiver<bool>) -> bool {
        crate::observe::retry(&self.job.handler);
        self.attempt += 1;
        let mut backoff = Duration::from_millis(200);
        loop {
            let start = RunStart {
                job_id: self.job.id,
                job_name: &self.job.name,
                handler: &self.job.handler,
                trigger: self.trigger,
                scheduled_at: self.scheduled_at,
                attempt: self.attempt as i32,
                instance: &self.shared.config.instance,
                started_at: self.shared.clock.now(),
            };
            match self
                .shared
                .store
                .fires()
                .start_run(self.fire_id, &start)
                .await
            {
                Ok(run_id) => {
                    self.run_id = run_id;
                    return true;
                }
                Err(e) => {
                    tracing::error!(job = self.job.id, fire = self.fire_id, error = %e, "cannot record the next attempt; retrying")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutting_down(stop) => return false,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_ends_free_the_guards_before_they_are_written() {
        let returned = || Outcome::Returned("ok".into());
        // (outcome, waits its turn, has maxRuns, frees early)
        let cases = [
            (returned(), false, false, true),
            (Outcome::Failed("no".into()), false, false, true),
            (Outcome::Panicked("boom".into()), false, false, true),
            // The handler may still run: the guards stay until it returned.
            (Outcome::TimedOut, false, false, false),
            (Outcome::Cancelled("admin".into()), false, false, false),
            (Outcome::LockLost, false, false, false),
            (Outcome::Shutdown(Ok("ok".into())), false, false, false),
            // The next fire's turn or the success count reads the ledger.
            (returned(), true, false, false),
            (returned(), false, true, false),
        ];
        for (at, (outcome, waits, max_runs, want)) in cases.iter().enumerate() {
            assert_eq!(
                frees_guards_early(outcome, *waits, *max_runs),
                *want,
                "case {at}: {outcome:?}"
            );
        }
    }

    #[test]
    fn decisions_table() {
        let cases: [(Outcome, bool, RunStatus, bool, &str); 10] = [
            (
                Outcome::Returned("ok".into()),
                true,
                RunStatus::Success,
                false,
                "",
            ),
            (
                Outcome::Failed("boom".into()),
                true,
                RunStatus::Failed,
                true,
                "boom",
            ),
            (
                Outcome::Failed("boom".into()),
                false,
                RunStatus::Failed,
                false,
                "boom",
            ),
            (
                Outcome::Panicked("oops".into()),
                true,
                RunStatus::Failed,
                true,
                "panicked: oops",
            ),
            (Outcome::TimedOut, true, RunStatus::Timeout, true, "300 ms"),
            (
                Outcome::TimedOut,
                false,
                RunStatus::Timeout,
                false,
                "300 ms",
            ),
            (
                Outcome::LockLost,
                true,
                RunStatus::Failed,
                false,
                "lock renewal",
            ),
            (
                Outcome::Cancelled("alice".into()),
                true,
                RunStatus::Cancelled,
                false,
                "Cancelled by alice",
            ),
            (
                Outcome::Shutdown(Ok("done".into())),
                true,
                RunStatus::Success,
                false,
                "",
            ),
            (
                Outcome::Shutdown(Err("cut".into())),
                true,
                RunStatus::Failed,
                false,
                "shut down",
            ),
        ];
        for (outcome, attempts_left, status, retry, error) in cases {
            let d = decide(&outcome, "line\n", 300, attempts_left);
            assert_eq!((d.status, d.retry), (status, retry), "{outcome:?}");
            assert!(d.error.contains(error), "{outcome:?}: {}", d.error);
            assert!(d.output.starts_with("line\n"), "{outcome:?}: {}", d.output);
        }
        let long = "x".repeat(MAX_ERROR_CHARS + 10);
        assert_eq!(
            decide(&Outcome::Failed(long), "", 0, false)
                .error
                .chars()
                .count(),
            MAX_ERROR_CHARS
        );
    }
}
