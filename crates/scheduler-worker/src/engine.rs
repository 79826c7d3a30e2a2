//! The engine: loads jobs, arms their timers, catches up missed fires at
//! start, takes "run once" requests, applies changes, and stops cleanly.
//!
//! It owns the timer queue and a cache of the jobs it armed; every fire it
//! starts is a task running [`crate::executor::execute`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::{CronExpr, MisfirePolicy};
use qiwu_storage::{JobFilter, JobRecord, Store, Trigger};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::clock::{Clock, MAX_SLEEP, sleep_for};
use crate::cluster::{ClusterConfig, Heartbeat, Membership, heartbeat_loop};
use crate::error::WorkerError;
use crate::executor::{self, Source};
use crate::handlers::Registry;
use crate::timer::{Armed, Timers};

/// The run error written when a process finds runs left `running`.
pub const REASON_RESTART: &str = "实例在执行结束前停止（进程退出或崩溃） / The instance stopped before the run finished (exit or crash)";
/// The run error written for runs still going when the grace period ends.
pub const REASON_SHUTDOWN: &str =
    "服务正在关闭，执行被中断 / The service shut down and interrupted the run";

/// How far behind "now" a starting cluster worker draws the line between
/// missed fires and fires it arms (see `Engine::run`).
const CATCH_UP_GRACE_SECS: i64 = 2;
/// How long the once-key guarding a misfire catch-up lives: long enough for
/// every starting worker to see it, short enough that a catch-up cut off by
/// a crash is retried at the next start.
const MISFIRE_ONCE_TTL: Duration = Duration::from_secs(60);

/// How many missed fire times a misfire record counts exactly.
const MISFIRE_COUNT_CAP: usize = 10_000;
/// Jobs read per page when loading them all.
const LOAD_PAGE: u64 = 100;

/// What the engine is told to do from outside its loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// A job was created, edited, enabled, disabled or deleted.
    JobChanged(i64),
    /// A "run once" request was queued as a pending fire.
    FireQueued(i64),
    /// Read every job again (after a lost subscription, say).
    Reconcile,
}

/// Sends commands to a running engine; cheap to clone.
#[derive(Debug, Clone)]
pub struct EngineHandle(mpsc::UnboundedSender<Command>);

impl EngineHandle {
    pub fn send(&self, command: Command) {
        // A stopped engine has nothing left to arm; the database keeps the
        // change and the next start reads it.
        let _ = self.0.send(command);
    }
}

/// Facts about a timed-out attempt, for the alert.
#[derive(Debug, Clone)]
pub struct TimeoutInfo {
    pub job_id: i64,
    pub job_name: String,
    pub handler: String,
    pub timeout_ms: i64,
    pub started_at: DateTime<Utc>,
    pub attempt: u32,
    pub timezone: Tz,
}

/// Raises the alert of a timed-out attempt.
pub type OnTimeout =
    Arc<dyn Fn(TimeoutInfo) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// How an engine behaves.
#[derive(Clone)]
pub struct EngineConfig {
    /// This process's name in the run log.
    pub instance: String,
    /// `QIWU_TIMEZONE`.
    pub timezone: Tz,
    /// How long running handlers get to finish once told to stop.
    pub shutdown_grace: Duration,
    /// How often every job and pending fire is read again, repairing any
    /// change message that was lost.
    pub reconcile_every: Duration,
    /// At start, close every run left `running` (true for the single-process
    /// `serve`, where no other instance can own one).
    pub close_all_running_at_start: bool,
    pub on_timeout: OnTimeout,
    /// Set for `worker` processes of a cluster.
    pub cluster: Option<ClusterConfig>,
}

/// State shared by the loop and the fire tasks.
pub(crate) struct Shared {
    pub store: Store,
    pub registry: Registry,
    pub config: EngineConfig,
    pub clock: Arc<dyn Clock>,
    /// Non-concurrent jobs executing in this process.
    busy: Mutex<HashSet<i64>>,
    /// The live workers, as the heart-beat last saw them.
    pub membership: watch::Receiver<Membership>,
    membership_tx: watch::Sender<Membership>,
    /// This clock minus the database's, in ms (cluster mode).
    pub skew_ms: Arc<AtomicI64>,
}

/// Holds a job's local non-concurrency slot until dropped.
pub(crate) struct BusyGuard {
    shared: Arc<Shared>,
    job_id: i64,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if let Ok(mut busy) = self.shared.busy.lock() {
            busy.remove(&self.job_id);
        }
    }
}

impl Shared {
    /// Takes the job's slot, or `None` when a fire of it is still running.
    pub(crate) fn try_busy(self: &Arc<Shared>, job_id: i64) -> Option<BusyGuard> {
        let mut busy = self.busy.lock().ok()?;
        busy.insert(job_id).then(|| BusyGuard {
            shared: Arc::clone(self),
            job_id,
        })
    }

    /// This instance's rank among the job's owners (always 0 outside a
    /// cluster); `None` when another worker owns the job.
    pub(crate) fn rank(&self, job_id: i64) -> Option<usize> {
        match &self.config.cluster {
            None => Some(0),
            Some(cluster) => {
                self.membership
                    .borrow()
                    .rank(&self.config.instance, job_id, cluster.replicas)
            }
        }
    }

    /// True while the clock is too far from the database's to claim.
    pub(crate) fn skew_too_large(&self) -> bool {
        self.config.cluster.as_ref().is_some_and(|c| {
            self.skew_ms.load(Ordering::Relaxed).unsigned_abs() > c.max_skew.as_millis() as u64
        })
    }

    pub(crate) fn zone_of(&self, job: &JobRecord) -> Tz {
        job.timezone
            .as_deref()
            .and_then(|z| z.parse::<Tz>().ok())
            .unwrap_or(self.config.timezone)
    }
}

/// The engine before it runs.
pub struct Engine {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    sender: mpsc::UnboundedSender<Command>,
}

impl Engine {
    pub fn new(
        store: Store,
        registry: Registry,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
    ) -> (Engine, EngineHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (membership_tx, membership) = watch::channel(Membership::default());
        let shared = Arc::new(Shared {
            store,
            registry,
            config,
            clock,
            busy: Mutex::new(HashSet::new()),
            membership,
            membership_tx,
            skew_ms: Arc::new(AtomicI64::new(0)),
        });
        (
            Engine {
                shared,
                commands: rx,
                sender: tx.clone(),
            },
            EngineHandle(tx),
        )
    }

    /// The measured clock skew against the database, in ms.
    pub fn skew(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.shared.skew_ms)
    }

    /// Runs until `shutdown` turns true, then stops the running handlers
    /// and waits for them at most the grace period.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let shared = Arc::clone(&self.shared);
        let store = &shared.store;
        let mut membership = shared.membership.clone();
        let mut helpers = JoinSet::new();
        if let Some(cluster) = &shared.config.cluster {
            helpers.spawn(heartbeat_loop(
                Heartbeat {
                    store: store.clone(),
                    config: cluster.clone(),
                    instance: shared.config.instance.clone(),
                    timezone: shared.config.timezone.name().to_string(),
                    skew_ms: Arc::clone(&shared.skew_ms),
                    membership: shared.membership_tx.clone(),
                },
                shutdown.clone(),
            ));
            helpers.spawn(forward_changes(
                cluster.clone(),
                self.sender.clone(),
                shutdown.clone(),
            ));
            // The first heart-beat tells who is alive before jobs are armed.
            let _ = tokio::time::timeout(Duration::from_secs(5), membership.changed()).await;
        }
        let pending_every = shared
            .config
            .cluster
            .as_ref()
            .map_or(shared.config.reconcile_every, |c| c.pending_every);
        let mut next_pending = tokio::time::Instant::now() + pending_every;
        // Runs left `running` by an earlier process cannot still be going:
        // in `serve` that is every such run, in a cluster those of this
        // instance id (a worker restarted under the same id).
        {
            let own = [shared.config.instance.clone()];
            let scope = (!shared.config.close_all_running_at_start).then_some(&own[..]);
            let closed = store
                .fires()
                .close_running(scope, REASON_RESTART, shared.clock.now())
                .await?;
            if closed > 0 {
                tracing::warn!(closed, "closed runs left running by a previous process");
            }
        }
        let mut state = LoopState {
            timers: Timers::new(),
            manual_in_flight: Arc::new(Mutex::new(HashSet::new())),
            jobs: HashMap::new(),
            tasks: JoinSet::new(),
            shutdown: shutdown.clone(),
        };
        let jobs = load_all_jobs(store).await?;
        // One instant splits "missed" from "to fire". In a cluster it lies a
        // little in the past: a live peer may still be claiming the last
        // fire times, and arming those here lets the unique claim decide
        // rather than counting them as missed.
        let split = match &shared.config.cluster {
            Some(_) => shared.clock.now() - chrono::Duration::seconds(CATCH_UP_GRACE_SECS),
            None => shared.clock.now(),
        };
        catch_up_misfires(&shared, &jobs, &mut state, split).await?;
        state.apply_all_from(&shared, jobs, split);
        take_pending(&shared, &mut state).await?;
        tracing::info!(armed = state.jobs.len(), instance = %shared.config.instance, "engine started");

        let mut next_reconcile = tokio::time::Instant::now() + shared.config.reconcile_every;
        let mut commands_open = true;
        loop {
            let due_now = state.timers.pop_due(shared.clock.now());
            if !due_now.is_empty() && shared.skew_too_large() {
                tracing::error!(
                    skew_ms = shared.skew_ms.load(Ordering::Relaxed),
                    "clock skew against the database is too large: claiming nothing"
                );
            } else {
                for due in due_now {
                    let Some(rank) = shared.rank(due.job_id) else {
                        continue;
                    };
                    if let Some(job) = state.jobs.get(&due.job_id).cloned() {
                        let delay = shared
                            .config
                            .cluster
                            .as_ref()
                            .map_or(Duration::ZERO, |c| c.backup_delay * rank as u32);
                        let source = Source::Scheduled {
                            version: due.version,
                            delay,
                        };
                        state.spawn(&shared, job, Trigger::Schedule, due.at, source);
                    }
                }
            }
            let now = shared.clock.now();
            let sleep = state
                .timers
                .next_due()
                .map_or(MAX_SLEEP, |due| sleep_for(now, due));
            tokio::select! {
                biased;
                () = crate::context::shutting_down(&mut shutdown) => break,
                command = self.commands.recv(), if commands_open => match command {
                    Some(Command::JobChanged(id)) => {
                        if let Err(e) = state.reload_job(&shared, id).await {
                            tracing::error!(job = id, error = %e, "cannot reload a changed job; the next reconciliation retries");
                        }
                    }
                    Some(Command::FireQueued(fire_id)) => {
                        if let Err(e) = take_pending_fire(&shared, &mut state, fire_id).await {
                            tracing::error!(fire = fire_id, error = %e, "cannot take a queued fire; the next reconciliation retries");
                        }
                    }
                    Some(Command::Reconcile) => {
                        match load_all_jobs(store).await {
                            Ok(jobs) => state.apply_all(&shared, jobs),
                            Err(e) => tracing::error!(error = %e, "reconciliation failed"),
                        }
                    }
                    None => commands_open = false,
                },
                Ok(()) = membership.changed() => {
                    tracing::info!(live = ?membership.borrow().live, "cluster membership changed");
                    match load_all_jobs(store).await {
                        Ok(jobs) => state.apply_all(&shared, jobs),
                        Err(e) => tracing::error!(error = %e, "re-arming after a membership change failed"),
                    }
                }
                () = tokio::time::sleep_until(next_pending) => {
                    next_pending = tokio::time::Instant::now() + pending_every;
                    if let Err(e) = take_pending(&shared, &mut state).await {
                        tracing::error!(error = %e, "reading pending fires failed");
                    }
                }
                () = tokio::time::sleep(sleep) => {}
                () = tokio::time::sleep_until(next_reconcile) => {
                    next_reconcile = tokio::time::Instant::now() + shared.config.reconcile_every;
                    match load_all_jobs(store).await {
                        Ok(jobs) => state.apply_all(&shared, jobs),
                        Err(e) => tracing::error!(error = %e, "reconciliation failed"),
                    }
                    if let Err(e) = take_pending(&shared, &mut state).await {
                        tracing::error!(error = %e, "reading pending fires failed");
                    }
                }
                Some(joined) = state.tasks.join_next() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a fire task failed");
                    }
                }
            }
        }

        // Every fire task watches the same shutdown signal and tells its
        // handler to stop; give them the grace period to record their end.
        let running = state.tasks.len();
        tracing::info!(running, "stopping: waiting for running handlers");
        let drained = tokio::time::timeout(shared.config.shutdown_grace, async {
            while state.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = state.tasks.len(),
                "handlers still running after the grace period; closing their runs"
            );
            state.tasks.abort_all();
        }
        let instance = [shared.config.instance.clone()];
        store
            .fires()
            .close_running(Some(&instance), REASON_SHUTDOWN, shared.clock.now())
            .await?;
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while helpers.join_next().await.is_some() {}
        })
        .await;
        // Only now, with its runs closed, does this worker leave the live
        // set: its jobs move to the others at their next heart-beat.
        if shared.config.cluster.is_some() {
            store.cluster().remove(&shared.config.instance).await?;
        }
        Ok(())
    }
}

/// The loop's own state.
struct LoopState {
    timers: Timers,
    /// "Run once" fires a task of this process is already taking; the same
    /// fire may be announced twice (locally and over Redis, or by a poll).
    manual_in_flight: Arc<Mutex<HashSet<i64>>>,
    /// The armed jobs, at the version their timer was armed.
    jobs: HashMap<i64, JobRecord>,
    tasks: JoinSet<()>,
    shutdown: watch::Receiver<bool>,
}

impl LoopState {
    fn spawn(
        &mut self,
        shared: &Arc<Shared>,
        job: JobRecord,
        trigger: Trigger,
        at: DateTime<Utc>,
        source: Source,
    ) {
        let manual = match source {
            Source::Manual { fire_id } => {
                let Ok(mut in_flight) = self.manual_in_flight.lock() else {
                    return;
                };
                if !in_flight.insert(fire_id) {
                    return;
                }
                Some(fire_id)
            }
            _ => None,
        };
        let in_flight = Arc::clone(&self.manual_in_flight);
        let shared = Arc::clone(shared);
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let job_id = job.id;
            if let Err(e) = executor::execute(shared, job, trigger, at, source, shutdown).await {
                tracing::error!(job = job_id, error = %e, "a fire could not be recorded");
            }
            if let (Some(fire_id), Ok(mut set)) = (manual, in_flight.lock()) {
                set.remove(&fire_id);
            }
        });
    }

    /// Arms, re-arms or disarms one job after reading it.
    /// A changed job is armed from the moment of its change (at most a few
    /// seconds back), not from now: a fire of the new version that fell due
    /// between the commit and this re-arm still runs, and nothing before
    /// the change is ever run by it.
    fn apply(&mut self, shared: &Shared, job: Option<JobRecord>, job_id: i64) {
        let now = shared.clock.now();
        let from = job.as_ref().map_or(now, |j| {
            j.updated_at
                .max(now - chrono::Duration::seconds(CATCH_UP_GRACE_SECS))
                .min(now)
        });
        self.apply_from(shared, job, job_id, from);
    }

    /// Like `apply`, arming from `from` rather than now.
    fn apply_from(
        &mut self,
        shared: &Shared,
        job: Option<JobRecord>,
        job_id: i64,
        from: DateTime<Utc>,
    ) {
        let Some(job) = job.filter(|j| j.enabled && shared.rank(j.id).is_some()) else {
            self.timers.disarm(job_id);
            self.jobs.remove(&job_id);
            return;
        };
        let unchanged = self
            .timers
            .armed(job.id)
            .is_some_and(|armed| armed.version == job.version);
        if unchanged {
            return;
        }
        match CronExpr::parse(&job.cron) {
            Ok(cron) => {
                // From now, never from the past: an edit is not retroactive.
                self.timers.arm(
                    Armed {
                        job_id: job.id,
                        version: job.version,
                        cron,
                        tz: shared.zone_of(&job),
                    },
                    from,
                );
                self.jobs.insert(job.id, job);
            }
            Err(e) => {
                tracing::error!(job = job.id, cron = %job.cron, error = %e, "stored schedule is invalid; the job is not armed");
                self.timers.disarm(job.id);
                self.jobs.remove(&job.id);
            }
        }
    }

    fn apply_all(&mut self, shared: &Shared, jobs: Vec<JobRecord>) {
        self.apply_all_from(shared, jobs, shared.clock.now());
    }

    fn apply_all_from(&mut self, shared: &Shared, jobs: Vec<JobRecord>, from: DateTime<Utc>) {
        let seen: HashSet<i64> = jobs.iter().map(|j| j.id).collect();
        let gone: Vec<i64> = self
            .jobs
            .keys()
            .filter(|id| !seen.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.apply(shared, None, id);
        }
        for job in jobs {
            let id = job.id;
            self.apply_from(shared, Some(job), id, from);
        }
    }

    async fn reload_job(&mut self, shared: &Shared, job_id: i64) -> Result<(), WorkerError> {
        let job = shared.store.jobs().get(job_id).await?;
        self.apply(shared, job, job_id);
        Ok(())
    }
}

/// Forwards change messages from Redis into the engine, re-subscribing
/// (and asking for a reconciliation) whenever the subscription drops.
async fn forward_changes(
    cluster: ClusterConfig,
    sender: mpsc::UnboundedSender<Command>,
    mut shutdown: watch::Receiver<bool>,
) {
    use futures_util::StreamExt;
    loop {
        match cluster.coord.subscribe().await {
            Ok(stream) => {
                let _ = sender.send(Command::Reconcile);
                let mut stream = std::pin::pin!(stream);
                loop {
                    tokio::select! {
                        change = stream.next() => match change {
                            Some(qiwu_storage::Change::Job(id)) => { let _ = sender.send(Command::JobChanged(id)); }
                            Some(qiwu_storage::Change::Fire(id)) => { let _ = sender.send(Command::FireQueued(id)); }
                            None => break,
                        },
                        () = crate::context::shutting_down(&mut shutdown) => return,
                    }
                }
                tracing::warn!("the change subscription dropped; re-subscribing");
            }
            Err(e) => tracing::warn!(error = %e, "cannot subscribe to changes; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = crate::context::shutting_down(&mut shutdown) => return,
        }
    }
}

async fn load_all_jobs(store: &Store) -> Result<Vec<JobRecord>, WorkerError> {
    let mut all = Vec::new();
    let mut page = 1;
    loop {
        let (items, total) = store
            .jobs()
            .list(&JobFilter::default(), page, LOAD_PAGE)
            .await?;
        let done = items.is_empty() || all.len() + items.len() >= total as usize;
        all.extend(items);
        if done {
            return Ok(all);
        }
        page += 1;
    }
}

/// What a job missed while no instance ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Missed {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    /// Exact up to the cap; `capped` says there were more.
    pub count: usize,
    pub capped: bool,
}

/// The fire times of `cron` strictly after `from` and at or before `now`.
pub fn missed_between(
    cron: &CronExpr,
    tz: Tz,
    from: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Missed> {
    let first = cron.next_after(from, tz).filter(|t| *t <= now)?;
    let last = cron
        .last_at_or_before(now, tz)
        .filter(|t| *t >= first)
        .unwrap_or(first);
    let mut count = 1;
    let mut cursor = first;
    while cursor < last && count < MISFIRE_COUNT_CAP {
        match cron.next_after(cursor, tz) {
            Some(t) if t <= last => {
                count += 1;
                cursor = t;
            }
            _ => break,
        }
    }
    Some(Missed {
        first,
        last,
        count,
        capped: cursor < last,
    })
}

/// The `output` of a misfire record that was skipped.
pub fn missed_text(missed: &Missed, tz: Tz) -> String {
    let fmt = |t: DateTime<Utc>| {
        t.with_timezone(&tz)
            .format("%Y-%m-%d %H:%M:%S %:z")
            .to_string()
    };
    let count = if missed.capped {
        format!("{}+", missed.count)
    } else {
        missed.count.to_string()
    };
    if missed.count == 1 && !missed.capped {
        format!(
            "服务停机期间错过了 1 次执行：{}；错过策略为跳过，不补做。\nMissed 1 fire time while no instance was running: {}; misfire policy is skip.",
            fmt(missed.first),
            fmt(missed.first)
        )
    } else {
        format!(
            "服务停机期间错过了 {count} 次执行：{} 至 {}；错过策略为跳过，不补做。\nMissed {count} fire times while no instance was running: {} to {}; misfire policy is skip.",
            fmt(missed.first),
            fmt(missed.last),
            fmt(missed.first),
            fmt(missed.last)
        )
    }
}

/// At start: one skipped record or one catch-up run per job that missed
/// fires, counted from the later of its last fire and its last change.
async fn catch_up_misfires(
    shared: &Arc<Shared>,
    jobs: &[JobRecord],
    state: &mut LoopState,
    now: DateTime<Utc>,
) -> Result<(), WorkerError> {
    let last_fires = shared.store.fires().last_fire_times().await?;
    for job in jobs.iter().filter(|j| j.enabled) {
        let Ok(cron) = CronExpr::parse(&job.cron) else {
            continue;
        };
        let tz = shared.zone_of(job);
        let from = last_fires
            .get(&job.id)
            .copied()
            .map_or(job.updated_at, |last| last.max(job.updated_at));
        let Some(missed) = missed_between(&cron, tz, from, now) else {
            continue;
        };
        if let Some(cluster) = &shared.config.cluster {
            // One worker only handles a job's misfire: the first to mark it.
            let key = format!("misfire:{}:{}", job.id, from.timestamp_millis());
            match cluster.coord.once(&key, MISFIRE_ONCE_TTL).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(job = job.id, error = %e, "redis unavailable; the misfire claim alone prevents doubles");
                }
            }
        }
        tracing::info!(job = job.id, count = missed.count, first = %missed.first, last = %missed.last, "missed fires");
        let source = match MisfirePolicy::parse(&job.misfire_policy) {
            Some(MisfirePolicy::RunOnce) => Source::Misfire { skipped: None },
            _ => Source::Misfire {
                skipped: Some(missed_text(&missed, tz)),
            },
        };
        state.spawn(shared, job.clone(), Trigger::Misfire, missed.last, source);
    }
    Ok(())
}

async fn take_pending(shared: &Arc<Shared>, state: &mut LoopState) -> Result<(), WorkerError> {
    for fire in shared.store.fires().pending(1000).await? {
        take_pending_fire(shared, state, fire.id).await?;
    }
    Ok(())
}

/// Starts a queued "run once" fire; the claim inside decides who runs it.
async fn take_pending_fire(
    shared: &Arc<Shared>,
    state: &mut LoopState,
    fire_id: i64,
) -> Result<(), WorkerError> {
    let Some(fire) = shared.store.fires().pending_by_id(fire_id).await? else {
        return Ok(());
    };
    match shared.store.jobs().get(fire.job_id).await? {
        Some(job) => state.spawn(
            shared,
            job,
            Trigger::Manual,
            fire.scheduled_at,
            Source::Manual { fire_id },
        ),
        None => {
            // The job was deleted after the request: record why nothing ran.
            executor::record_orphan_manual(shared, fire).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("time")
            .with_timezone(&Utc)
    }

    #[test]
    fn missed_table() {
        let utc = chrono_tz::UTC;
        let cases = [
            // (cron, from, now, expected (first, last, count, capped))
            (
                "0 30 3 * * *",
                "2026-05-01T03:30:00Z",
                "2026-05-01T12:00:00Z",
                None,
            ),
            (
                "0 30 3 * * *",
                "2026-05-01T03:30:00Z",
                "2026-05-02T03:30:00Z",
                Some(("2026-05-02T03:30:00Z", "2026-05-02T03:30:00Z", 1, false)),
            ),
            (
                "0 30 3 * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-04T12:00:00Z",
                Some(("2026-05-01T03:30:00Z", "2026-05-04T03:30:00Z", 4, false)),
            ),
            (
                "* * * * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-01T00:00:10.500Z",
                Some(("2026-05-01T00:00:01Z", "2026-05-01T00:00:10Z", 10, false)),
            ),
            (
                "* * * * * *",
                "2026-05-01T00:00:00Z",
                "2026-05-02T00:00:00Z",
                Some((
                    "2026-05-01T00:00:01Z",
                    "2026-05-02T00:00:00Z",
                    MISFIRE_COUNT_CAP,
                    true,
                )),
            ),
        ];
        for (expr, from, now, want) in cases {
            let cron = CronExpr::parse(expr).expect("cron");
            let got = missed_between(&cron, utc, t(from), t(now));
            let want = want.map(|(first, last, count, capped)| Missed {
                first: t(first),
                last: t(last),
                count,
                capped,
            });
            assert_eq!(got, want, "{expr} from {from} to {now}");
        }
    }

    #[test]
    fn missed_text_names_the_times() {
        let missed = Missed {
            first: t("2026-05-01T03:30:00Z"),
            last: t("2026-05-04T03:30:00Z"),
            count: 4,
            capped: false,
        };
        let text = missed_text(&missed, "Asia/Shanghai".parse().expect("tz"));
        assert!(
            text.contains(
                "错过了 4 次执行：2026-05-01 11:30:00 +08:00 至 2026-05-04 11:30:00 +08:00"
            ),
            "{text}"
        );
        assert!(text.contains("Missed 4 fire times"), "{text}");
    }
}
