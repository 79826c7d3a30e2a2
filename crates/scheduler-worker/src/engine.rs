//! The engine: start-up (retried until the database and its schema are
//! there), one loop that handles a closed set of [`Event`]s, and shutdown.
//!
//! The loop owns the timers and a compact entry for every enabled job (the
//! catalog); it arms the jobs this instance owns and hands whatever falls
//! due to the [`Claimer`], which claims in batches and starts the fires.
//! Every fire task runs on a tracker that shutdown waits for.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::{CronExpr, MissReason, OverlapPolicy, Schedule};
use qiwu_storage::{JobSchedule, Store};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::task::TaskTracker;

use crate::calendar_alerts::CalendarWatch;
use crate::cancels::{Cancels, cancel_loop};
use crate::claimer::{Claimer, Feedback, Request};
use crate::clock::{Clock, MAX_SLEEP, sleep_for};
use crate::cluster::{ClusterConfig, Heartbeat, Membership, heartbeat_loop};
use crate::context::shutting_down;
use crate::error::WorkerError;
use crate::freezes::FreezeWatch;
use crate::handlers::Registry;
use crate::lease::{Locks, Slots};
use crate::recorder::Recorder;
use crate::schedules::{self, UserCalendars};
use crate::texts;
use crate::timer::{Armed, Due, Timers};

pub use crate::texts::{REASON_RESTART, REASON_SHUTDOWN};

/// How far back a (re)armed job's timer may start, and up to where its
/// missed times are caught up. A job is armed from the moment its current
/// schedule began (`schedule_from`, the time of the change that moved it),
/// but never earlier than this before now: a fire a live peer may still be
/// claiming is decided by the ledger rather than reported as missed.
const ARM_GRACE: chrono::Duration = chrono::Duration::seconds(2);
/// Jobs read per page at start.
const LOAD_PAGE: u64 = 1000;
/// A reconciliation reads jobs changed since the previous one, minus this
/// (for clocks of API instances that run a little behind).
const RECONCILE_OVERLAP: chrono::Duration = chrono::Duration::minutes(2);
const START_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// What the engine is told to do from outside its loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// A job was created, edited, enabled, disabled or deleted.
    JobChanged(i64),
    /// A "run once" request was queued as a pending fire.
    FireQueued(i64),
    /// Read the jobs again (after a lost subscription, say).
    Reconcile,
    /// Someone asked to cancel this run: check this instance's running
    /// runs against the database.
    CancelRequested(i64),
    /// A freeze window was created, edited or deleted.
    FreezesChanged,
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

/// Where the engine is, for readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineStatus {
    /// Not running yet, and why (waiting for the database, the schema…).
    Starting(String),
    Running,
    Stopping,
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
    /// The job's alert channels (empty: the default ones).
    pub channels: Vec<i64>,
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
    /// How often changed jobs and pending fires are read again, repairing
    /// any change message that was lost.
    pub reconcile_every: Duration,
    /// At start, close every run left `running` (true for the single-process
    /// `serve`, where no other instance can own one).
    pub close_all_running_at_start: bool,
    /// A fire time not claimed within this long after it is recorded by the
    /// job's misfire policy instead.
    pub misfire_threshold: Duration,
    /// Most fires running in this process at once.
    pub max_in_flight: usize,
    /// How long before its start a job's primary owner claims a timer fire
    /// (`QIWU_CLAIM_AHEAD_MS`, `crate::ahead`); zero claims at the start.
    pub claim_ahead: Duration,
    pub on_timeout: OnTimeout,
    /// Set for `worker` processes of a cluster.
    pub cluster: Option<ClusterConfig>,
}

/// State shared by the loop, the claimer and the fire tasks.
pub(crate) struct Shared {
    pub store: Store,
    pub registry: Registry,
    pub config: EngineConfig,
    pub clock: Arc<dyn Clock>,
    pub slots: Slots,
    /// In a cluster: the job locks this process takes, renews and gives
    /// back.
    pub locks: Option<Locks>,
    /// The running runs here, and their cancel signals.
    pub cancels: Cancels,
    pub recorder: Recorder,
    /// Bounds the fires in flight.
    pub permits: Arc<Semaphore>,
    pub tracker: TaskTracker,
    /// Jobs whose alert state this process last left non-clear: their next
    /// success is decided against the database even when the job row read
    /// at its claim (possibly before that state was written) says clear.
    pub alert_marks: std::sync::Mutex<std::collections::HashSet<i64>>,
    /// The freeze windows (`crate::freezes`).
    pub freezes: crate::freezes::FreezeBook,
    /// Wakes the loop that ends pauses when a job changed.
    pub(crate) resume_wake: crate::resumes::ResumeWake,
    /// The backfill fires running here (see `backfill.rs`).
    pub backfill_fires: crate::backfill::InFlight,
    /// The jobs with fires claimed ahead of their time (`crate::ahead`).
    pub ahead: Arc<crate::ahead::AheadBook>,
    /// The live workers, as the heart-beat last saw them.
    pub membership: watch::Receiver<Membership>,
    membership_tx: watch::Sender<Membership>,
    /// This clock minus the database's, in ms (cluster mode).
    skew_ms: Arc<AtomicI64>,
}

impl Shared {
    /// This instance's rank among the job's owners (always 0 outside a
    /// cluster); `None` when other workers own the job.
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

    pub(crate) fn skew_ms(&self) -> i64 {
        self.skew_ms.load(Ordering::Relaxed)
    }

    /// True while the clock is too far from the database's to claim.
    pub(crate) fn skew_too_large(&self) -> bool {
        self.config
            .cluster
            .as_ref()
            .is_some_and(|c| self.skew_ms().unsigned_abs() > c.max_skew.as_millis() as u64)
    }

    /// A job's zone: its own, else `QIWU_TIMEZONE` (a job stored without
    /// one). The storage read already refused a zone that does not parse.
    pub(crate) fn zone_of(&self, timezone: Option<Tz>) -> Tz {
        timezone.unwrap_or(self.config.timezone)
    }
}

/// The engine before it runs.
pub struct Engine {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    sender: mpsc::UnboundedSender<Command>,
    status: watch::Sender<EngineStatus>,
}

impl Engine {
    /// Builds the engine; its run-end writer starts at once (inside a tokio
    /// runtime).
    pub fn new(
        store: Store,
        registry: Registry,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
    ) -> (Engine, EngineHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (membership_tx, membership) = watch::channel(Membership::default());
        let (recorder, _writer) = Recorder::start(store.clone());
        let permits = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
        let locks = config
            .cluster
            .as_ref()
            .map(|c| Locks::start(c.coord.clone(), c.lock_ttl));
        let shared = Arc::new(Shared {
            store,
            registry,
            config,
            clock,
            slots: Slots::default(),
            locks,
            cancels: Cancels::default(),
            recorder,
            permits,
            tracker: TaskTracker::new(),
            alert_marks: std::sync::Mutex::default(),
            freezes: crate::freezes::FreezeBook::default(),
            resume_wake: crate::resumes::ResumeWake::default(),
            backfill_fires: crate::backfill::InFlight::default(),
            ahead: Arc::default(),
            membership,
            membership_tx,
            skew_ms: Arc::new(AtomicI64::new(0)),
        });
        let (status, _) = watch::channel(EngineStatus::Starting("starting".into()));
        (
            Engine {
                shared,
                commands: rx,
                sender: tx.clone(),
                status,
            },
            EngineHandle(tx),
        )
    }

    /// The measured clock skew against the database, in ms.
    pub fn skew(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.shared.skew_ms)
    }

    /// Where the engine is; `/readyz` reads it.
    pub fn status(&self) -> watch::Receiver<EngineStatus> {
        self.status.subscribe()
    }

    /// Runs until `shutdown` turns true, then stops the running handlers
    /// and waits for them at most the grace period. Start-up problems are
    /// waited out (and reported in the status), never returned.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), WorkerError> {
        let Engine {
            shared,
            commands,
            sender,
            status,
        } = self;
        let mut helpers = start_helpers(&shared, &sender, &shutdown);
        let Some((catalog, calendars)) = start(&shared, &status, &mut shutdown).await? else {
            return Ok(());
        };
        // Once the schema is there: the pause columns are read at once.
        helpers.spawn(crate::resumes::resume_loop(
            Arc::clone(&shared),
            sender.clone(),
            shutdown.clone(),
        ));
        let (claims, requests) = mpsc::unbounded_channel();
        let (feedback_tx, feedback) = mpsc::unbounded_channel();
        let claimer = tokio::spawn(
            Claimer::new(
                Arc::clone(&shared),
                requests,
                feedback_tx.clone(),
                shutdown.clone(),
            )
            .run(),
        );
        let mut state = Loop {
            shared: Arc::clone(&shared),
            timers: Timers::new(),
            catalog: HashMap::new(),
            crons: HashMap::new(),
            claims,
            released: feedback_tx,
            last_reconcile: shared.clock.now(),
            freeze_watch: FreezeWatch::new(shared.clock.now()),
            calendar_watch: CalendarWatch::default(),
            previous_live: shared.membership.borrow().live.clone(),
        };
        crate::observe::watch_in_flight(&shared);
        state.load(catalog, &calendars, start_line(&shared));
        state.poll_pending().await;
        crate::observe::loop_state(state.timers.len(), state.catalog.len());
        status.send_replace(EngineStatus::Running);
        tracing::info!(armed = state.timers.len(), known = state.catalog.len(), instance = %shared.config.instance, "engine started");
        state
            .run(commands, feedback, shared.membership.clone(), shutdown)
            .await;
        status.send_replace(EngineStatus::Stopping);
        drop(state);
        stop(&shared, claimer, helpers).await
    }
}

/// The cancel checks, and the heart-beat and the change subscription of
/// a cluster worker.
fn start_helpers(
    shared: &Arc<Shared>,
    sender: &mpsc::UnboundedSender<Command>,
    shutdown: &watch::Receiver<bool>,
) -> tokio::task::JoinSet<()> {
    let mut helpers = tokio::task::JoinSet::new();
    helpers.spawn(cancel_loop(Arc::clone(shared), shutdown.clone()));
    if let Some(cluster) = &shared.config.cluster {
        helpers.spawn(heartbeat_loop(
            Heartbeat {
                store: shared.store.clone(),
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
            sender.clone(),
            shutdown.clone(),
        ));
    }
    helpers
}

/// The earliest time start-up arms from (a job whose schedule began later
/// is armed from that moment): now in `serve` (a restart's misses are all
/// caught up), 2 s back in a cluster (live peers may still be claiming).
fn start_line(shared: &Shared) -> DateTime<Utc> {
    let now = shared.clock.now();
    match shared.config.cluster {
        Some(_) => now - ARM_GRACE,
        None => now,
    }
}

/// Why start-up did not succeed.
enum StartProblem {
    /// Worth waiting for (the database, the schema); the reason in words.
    NotYet(String),
    /// Waiting will not help.
    Fatal(WorkerError),
}

/// Retries start-up until it succeeds; `Ok(None)` when told to stop first.
async fn start(
    shared: &Arc<Shared>,
    status: &watch::Sender<EngineStatus>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<(Vec<JobSchedule>, UserCalendars)>, WorkerError> {
    let mut backoff = Duration::from_millis(250);
    loop {
        match try_start(shared).await {
            Ok(catalog) => return Ok(Some(catalog)),
            Err(StartProblem::Fatal(e)) => return Err(e),
            Err(StartProblem::NotYet(reason)) => {
                tracing::warn!(%reason, "the engine cannot start yet; retrying");
                status.send_replace(EngineStatus::Starting(reason));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutting_down(shutdown) => return Ok(None),
        }
        backoff = (backoff * 2).min(START_BACKOFF_MAX);
    }
}

/// Checks the schema (and a cluster's zone), closes this instance's
/// leftover runs and reads every enabled job's schedule, with the user
/// calendars they name.
async fn try_start(
    shared: &Arc<Shared>,
) -> Result<(Vec<JobSchedule>, UserCalendars), StartProblem> {
    check_schema(&shared.store).await?;
    if shared.config.cluster.is_some() {
        agree_zone(shared).await?;
    }
    // Runs left `running` by an earlier process cannot still be going: in
    // `serve` every such run, in a cluster those of this instance id.
    let own = [shared.config.instance.clone()];
    let scope = (!shared.config.close_all_running_at_start).then_some(&own[..]);
    let now = shared.clock.now();
    let closed = shared
        .store
        .fires()
        .close_running(scope, texts::REASON_RESTART, now, false)
        .await
        .map_err(not_yet)?;
    if closed > 0 {
        crate::callbacks::swept(&shared.store, scope, texts::REASON_RESTART, now).await;
        tracing::warn!(closed, "closed runs left running by a previous process");
    }
    crate::freezes::reload(shared).await.map_err(not_yet)?;
    let all = load_schedules(&shared.store).await?;
    let calendars = schedules::user_calendars(&shared.store, all.iter().map(|s| &s.time_rules))
        .await
        .map_err(not_yet)?;
    if shared.config.cluster.is_some() {
        // The first heart-beat tells who is alive before jobs are armed.
        let mut membership = shared.membership.clone();
        if membership.borrow().live.is_empty() {
            let _ = tokio::time::timeout(Duration::from_secs(5), membership.changed()).await;
        }
    }
    Ok((all, calendars))
}

fn not_yet(e: qiwu_storage::StorageError) -> StartProblem {
    StartProblem::NotYet(format!("database error: {e}"))
}

/// Waits out a database that does not answer or lacks migrations.
async fn check_schema(store: &Store) -> Result<(), StartProblem> {
    match store.pending_migrations().await {
        Ok(0) => Ok(()),
        Ok(n) => Err(StartProblem::NotYet(format!(
            "waiting for migrations ({n} not applied; run `qiwu-scheduler migrate`)"
        ))),
        Err(e) if e.is_unavailable() => {
            Err(StartProblem::NotYet(format!("database unreachable: {e}")))
        }
        Err(e) => Err(StartProblem::NotYet(format!(
            "waiting for migrations ({e})"
        ))),
    }
}

/// A cluster's zone is recorded by its first instance; another zone here
/// would compute other fire times, so it stops the engine.
async fn agree_zone(shared: &Shared) -> Result<(), StartProblem> {
    let mine = shared.config.timezone.name();
    let agreed = shared
        .store
        .cluster()
        .agree_timezone(mine, shared.clock.now())
        .await
        .map_err(not_yet)?;
    if agreed == mine {
        return Ok(());
    }
    Err(StartProblem::Fatal(WorkerError::ZoneMismatch {
        mine: mine.to_string(),
        cluster: agreed,
    }))
}

/// Every enabled job's schedule, a page at a time.
async fn load_schedules(store: &Store) -> Result<Vec<JobSchedule>, StartProblem> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .jobs()
            .schedules(after, LOAD_PAGE)
            .await
            .map_err(not_yet)?;
        let Some(last) = page.last() else {
            return Ok(all);
        };
        after = last.id;
        let full = page.len() as u64 == LOAD_PAGE;
        all.extend(page);
        if !full {
            return Ok(all);
        }
    }
}

/// Stops the claimer, gives running handlers the grace period, closes what
/// is left and leaves the live set.
async fn stop(
    shared: &Arc<Shared>,
    mut claimer: tokio::task::JoinHandle<()>,
    mut helpers: tokio::task::JoinSet<()>,
) -> Result<(), WorkerError> {
    if tokio::time::timeout(Duration::from_secs(2), &mut claimer)
        .await
        .is_err()
    {
        // A claim still in flight after that is cut short: a fire it would
        // start now could not be waited for. What it committed is closed
        // below with the rest of this instance's runs.
        tracing::warn!("the claimer did not stop in time; abandoning its claim in flight");
        claimer.abort();
        let _ = claimer.await;
    }
    shared.tracker.close();
    tracing::info!(
        running = shared.tracker.len(),
        "stopping: waiting for running handlers"
    );
    if tokio::time::timeout(shared.config.shutdown_grace, shared.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = shared.tracker.len(),
            "handlers still running after the grace period; closing their runs"
        );
    }
    // The locks of the fires that ended are given back before this worker
    // leaves, so the jobs' next owners find them free.
    if let Some(locks) = &shared.locks {
        locks.flush(Duration::from_secs(2)).await;
    }
    let instance = [shared.config.instance.clone()];
    let now = shared.clock.now();
    let closed = shared
        .store
        .fires()
        .close_running(Some(&instance), texts::REASON_SHUTDOWN, now, false)
        .await?;
    if closed > 0 {
        crate::callbacks::swept(&shared.store, Some(&instance), texts::REASON_SHUTDOWN, now).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while helpers.join_next().await.is_some() {}
    })
    .await;
    // Only now, with its runs closed, does this worker leave the live set:
    // its jobs move to the others at their next heart-beat.
    if shared.config.cluster.is_some() {
        shared
            .store
            .cluster()
            .remove(&shared.config.instance)
            .await?;
    }
    Ok(())
}

/// A compact entry of an enabled job: what it takes to arm it.
#[derive(Debug, Clone)]
struct Known {
    schedule_from: DateTime<Utc>,
    schedule: Arc<Schedule>,
    allow_concurrent: bool,
    waits: bool,
    /// Its fires may be claimed ahead of their time: their outcome is not
    /// decided by the running fire (`waits`) nor does one fire's end
    /// disable the job before the next (`maxRuns`).
    claims_ahead: bool,
    /// What freeze windows name.
    group: String,
    handler: String,
}

/// Everything the loop reacts to.
#[derive(Debug)]
enum Event {
    /// A timer may be due.
    Due,
    Command(Command),
    Feedback(Feedback),
    /// The live workers changed: ownership moves.
    Membership,
    /// Time to read changed jobs (and pending fires) again.
    Reconcile,
    /// Time to look for run-once requests whose message was lost.
    PollPending,
    /// A freeze window may have ended.
    FreezeEnded,
    Shutdown,
}

/// The loop's own state.
struct Loop {
    shared: Arc<Shared>,
    timers: Timers,
    /// Every enabled job, owned here or not.
    catalog: HashMap<i64, Known>,
    crons: HashMap<String, Arc<CronExpr>>,
    claims: mpsc::UnboundedSender<Request>,
    /// Where a backfill moved on at the pending poll tells of the fire it
    /// released.
    released: mpsc::UnboundedSender<Feedback>,
    last_reconcile: DateTime<Utc>,
    freeze_watch: FreezeWatch,
    calendar_watch: CalendarWatch,
    /// The live workers when jobs were last placed (at start: those seen
    /// by the first heart-beat).
    previous_live: Vec<String>,
}

impl Loop {
    async fn run(
        &mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut feedback: mpsc::UnboundedReceiver<Feedback>,
        mut membership: watch::Receiver<Membership>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let config = &self.shared.config;
        let pending_every = config
            .cluster
            .as_ref()
            .map_or(config.reconcile_every, |c| c.pending_every);
        let reconcile_every = config.reconcile_every;
        let mut next_pending = tokio::time::Instant::now() + pending_every;
        let mut next_reconcile = tokio::time::Instant::now() + reconcile_every;
        loop {
            let now = self.shared.clock.now();
            let sleep = self
                .timers
                .next_wake()
                .map_or(MAX_SLEEP, |wake| sleep_for(now, wake));
            let freeze_end = self
                .freeze_watch
                .next_end(&self.shared.freezes.current())
                .map(|end| sleep_for(now, end));
            let event = tokio::select! {
                biased;
                () = shutting_down(&mut shutdown) => Event::Shutdown,
                Some(command) = commands.recv() => Event::Command(command),
                Some(fb) = feedback.recv() => Event::Feedback(fb),
                Ok(()) = membership.changed() => Event::Membership,
                () = tokio::time::sleep(sleep) => Event::Due,
                () = tokio::time::sleep(freeze_end.unwrap_or(MAX_SLEEP)), if freeze_end.is_some() => Event::FreezeEnded,
                () = tokio::time::sleep_until(next_pending) => {
                    next_pending = tokio::time::Instant::now() + pending_every;
                    Event::PollPending
                }
                () = tokio::time::sleep_until(next_reconcile) => {
                    next_reconcile = tokio::time::Instant::now() + reconcile_every;
                    Event::Reconcile
                }
            };
            if !self.handle(event).await {
                return;
            }
        }
    }

    /// Handles one event; false when the loop must end.
    async fn handle(&mut self, event: Event) -> bool {
        match event {
            Event::Due => {
                crate::observe::timer_woke();
                self.on_due()
            }
            Event::Command(Command::JobChanged(id)) | Event::Feedback(Feedback::Stale(id)) => {
                // A pause may have been set, moved or ended.
                self.shared.resume_wake.nudge();
                self.reload(id).await
            }
            Event::Command(Command::FireQueued(fire_id))
            | Event::Feedback(Feedback::Released(fire_id)) => {
                self.claim(Request::Manual { fire_id })
            }
            Event::Feedback(Feedback::Withdrawn { job_id, at }) => self.retake(job_id, at),
            Event::Command(Command::CancelRequested(run_id)) => {
                tracing::debug!(run = run_id, "cancel message");
                self.shared.cancels.check_now();
            }
            Event::Command(Command::Reconcile) | Event::Reconcile => {
                self.reload_freezes().await;
                self.shared.resume_wake.nudge();
                self.reconcile().await;
                self.poll_pending().await;
            }
            Event::PollPending => self.poll_pending().await,
            Event::Command(Command::FreezesChanged) => self.reload_freezes().await,
            Event::FreezeEnded => self.freezes_ended(),
            Event::Membership => {
                let live = self.shared.membership.borrow().live.clone();
                tracing::info!(?live, "cluster membership changed");
                self.place_all(self.shared.clock.now() - ARM_GRACE);
                self.previous_live = live;
            }
            Event::Shutdown => return false,
        }
        crate::observe::loop_state(self.timers.len(), self.catalog.len());
        true
    }

    fn claim(&self, request: Request) {
        // The claimer ends only at shutdown, when nothing is claimed anymore.
        let _ = self.claims.send(request);
    }

    /// Hands what fell due to the claimer.
    fn on_due(&mut self) {
        let due = self.timers.pop_due(self.shared.clock.now());
        self.hand_over(due);
    }

    /// A fire claimed ahead was taken back (`crate::ahead`): its time is
    /// handed over again if the job as armed now still has it, and is
    /// then claimed with the job as it is now.
    fn retake(&mut self, job_id: i64, at: DateTime<Utc>) {
        let still_a_time = self.timers.armed(job_id).is_some_and(|armed| {
            at > armed.schedule_from
                && armed
                    .schedule
                    .next_after(at - chrono::Duration::milliseconds(1))
                    == Some(at)
        });
        if still_a_time {
            self.hand_over(vec![Due { job_id, at }]);
        } else {
            tracing::debug!(job = job_id, %at, "a fire taken back is no longer a time of its job here");
        }
    }

    /// Hands due times to the claimer, each job's in order. Times the
    /// process slept past beyond the misfire threshold (a paused process, a
    /// clock step) become one catch-up of their job instead.
    fn hand_over(&mut self, due: Vec<Due>) {
        let now = self.shared.clock.now();
        let threshold = chrono::Duration::from_std(self.shared.config.misfire_threshold)
            .unwrap_or(chrono::Duration::seconds(5));
        let mut stalled: HashMap<i64, DateTime<Utc>> = HashMap::new();
        let freezes = self.shared.freezes.current();
        for due in due {
            // A frozen time is not claimed: the first of its window asks
            // for the window's one record (`crate::freezes`).
            if let Some(known) = self.catalog.get(&due.job_id)
                && let Some((freeze, first)) = self.freeze_watch.frozen(
                    &freezes,
                    (due.job_id, &known.group, &known.handler),
                    due.at,
                )
            {
                tracing::debug!(job = due.job_id, freeze, at = %due.at, "fire time frozen");
                if first {
                    self.claim(Request::CatchUp {
                        job_id: due.job_id,
                        through: due.at,
                        reason: MissReason::Downtime,
                    });
                }
                continue;
            }
            if let Some(known) = self.catalog.get(&due.job_id)
                && self.shared.rank(due.job_id) == Some(0)
            {
                self.calendar_watch
                    .check(&self.shared, due.job_id, &known.schedule);
            }
            // Late is measured from the fire's start: a jittered fire is
            // due at its nominal time plus its delay.
            let start = self
                .timers
                .armed(due.job_id)
                .map_or(due.at, |armed| armed.start_at(due.at));
            if now - start > threshold {
                stalled.insert(due.job_id, due.at);
                continue;
            }
            if let Some(through) = stalled.remove(&due.job_id) {
                self.claim(Request::CatchUp {
                    job_id: due.job_id,
                    through,
                    reason: MissReason::Stalled,
                });
            }
            if let Some(armed) = self.timers.armed(due.job_id).cloned() {
                self.claim(Request::Time { armed, at: due.at });
            }
        }
        for (job_id, through) in stalled {
            self.claim(Request::CatchUp {
                job_id,
                through,
                reason: MissReason::Stalled,
            });
        }
    }

    /// The start-up load: every enabled job, armed where owned, its misses
    /// caught up where this instance is its primary.
    fn load(&mut self, catalog: Vec<JobSchedule>, calendars: &UserCalendars, line: DateTime<Utc>) {
        for schedule in catalog {
            let id = schedule.id;
            self.apply(id, Some(schedule), calendars, line);
        }
    }

    async fn reload(&mut self, job_id: i64) {
        let store = &self.shared.store;
        let read = async {
            let schedule = store.jobs().schedule(job_id).await?;
            let calendars =
                schedules::user_calendars(store, schedule.iter().map(|s| &s.time_rules)).await?;
            Ok::<_, qiwu_storage::StorageError>((schedule, calendars))
        };
        match read.await {
            Ok((schedule, calendars)) => {
                let line = self.shared.clock.now() - ARM_GRACE;
                self.apply(job_id, schedule, &calendars, line);
            }
            Err(e) => {
                tracing::error!(job = job_id, error = %e, "cannot reload a changed job; the next reconciliation retries")
            }
        }
    }

    /// Reads the jobs changed since the last reconciliation, a page at a
    /// time: after a mass import every job has changed, and reading them
    /// all at once doubled a worker's memory (100 000 jobs: 102 → 208 MB).
    async fn reconcile(&mut self) {
        let started = self.shared.clock.now();
        let since = self.last_reconcile - RECONCILE_OVERLAP;
        let line = started - ARM_GRACE;
        let mut after = 0;
        loop {
            let store = &self.shared.store;
            let read = async {
                let page = store
                    .jobs()
                    .schedules_changed_since(since, after, LOAD_PAGE)
                    .await?;
                let calendars =
                    schedules::user_calendars(store, page.iter().map(|s| &s.time_rules)).await?;
                Ok::<_, qiwu_storage::StorageError>((page, calendars))
            };
            let (page, calendars) = match read.await {
                Ok(read) => read,
                Err(e) => {
                    // The pages applied stand; the next reconciliation
                    // reads from the same moment again.
                    crate::observe::reconciled(false);
                    tracing::error!(error = %e, "reconciliation failed; retrying at the next one");
                    return;
                }
            };
            let full = page.len() as u64 == LOAD_PAGE;
            for schedule in page {
                let id = schedule.id;
                after = id;
                let before = self.timers.armed(id).map(|a| a.schedule_from);
                self.apply(id, Some(schedule), &calendars, line);
                let armed = self.timers.armed(id).map(|a| a.schedule_from);
                crate::observe::repaired(before, armed);
            }
            if !full {
                break;
            }
        }
        self.last_reconcile = started;
        crate::observe::reconciled(true);
    }

    async fn reload_freezes(&mut self) {
        if let Err(e) = crate::freezes::reload(&self.shared).await {
            tracing::error!(error = %e, "cannot read the freezes; the next reconciliation retries");
        }
    }

    /// At the end of freeze windows: every job owned here that a window
    /// froze gets its window's record (if no frozen time reached it) and
    /// its misfire policy applied.
    fn freezes_ended(&mut self) {
        let now = self.shared.clock.now();
        let freezes = self.shared.freezes.current();
        for freeze in self.freeze_watch.ended(&freezes, now) {
            let jobs: Vec<(i64, DateTime<Utc>)> = self
                .catalog
                .iter()
                .filter(|(id, known)| freeze.scope.covers(**id, &known.group, &known.handler))
                .filter(|(id, _)| self.shared.rank(**id).is_some())
                .filter_map(|(id, known)| {
                    qiwu_domain::freeze::frozen_times(&known.schedule, &freeze, known.schedule_from)
                        .map(|m| (*id, m.last))
                })
                .collect();
            tracing::info!(freeze = freeze.id, jobs = jobs.len(), "freeze window ended");
            for (job_id, last) in jobs {
                self.claim(Request::CatchUp {
                    job_id,
                    through: last,
                    reason: MissReason::Downtime,
                });
                self.claim(Request::FreezeEnded {
                    job_id,
                    freeze: freeze.clone(),
                });
            }
        }
    }

    async fn poll_pending(&mut self) {
        match self.shared.store.fires().pending(1000).await {
            Ok(pending) => {
                for fire in pending {
                    self.claim(Request::Manual { fire_id: fire.id });
                }
            }
            Err(e) => tracing::error!(error = %e, "reading pending fires failed"),
        }
        crate::backfill::poll(&self.shared, &self.released).await;
    }

    /// Records a job's current schedule (or its absence) and arms or
    /// disarms it accordingly.
    fn apply(
        &mut self,
        job_id: i64,
        schedule: Option<JobSchedule>,
        calendars: &UserCalendars,
        line: DateTime<Utc>,
    ) {
        let version = schedule.as_ref().map(|s| s.version);
        let known = schedule
            .filter(|s| s.enabled)
            .and_then(|s| self.known(&s, calendars));
        // Fires claimed ahead judge their job by what is applied here.
        self.shared
            .ahead
            .seen(job_id, version.filter(|_| known.is_some()));
        match known {
            Some(known) => {
                if self.shared.rank(job_id) == Some(0) {
                    self.calendar_watch
                        .check(&self.shared, job_id, &known.schedule);
                }
                self.catalog.insert(job_id, known);
                self.place(job_id, line);
            }
            None => {
                self.catalog.remove(&job_id);
                self.timers.disarm(job_id);
            }
        }
    }

    fn known(&mut self, schedule: &JobSchedule, calendars: &UserCalendars) -> Option<Known> {
        let cron = match self.crons.get(&schedule.cron) {
            Some(cron) => Arc::clone(cron),
            None => match CronExpr::parse(&schedule.cron) {
                Ok(cron) => {
                    let cron = Arc::new(cron);
                    self.crons.insert(schedule.cron.clone(), Arc::clone(&cron));
                    cron
                }
                Err(e) => {
                    tracing::error!(job = schedule.id, cron = %schedule.cron, error = %e, "stored schedule is invalid; the job is not armed");
                    return None;
                }
            },
        };
        let tz = self.shared.zone_of(schedule.timezone);
        let built = schedules::build(schedule.id, cron, tz, &schedule.time_rules, calendars)?;
        let waits = matches!(
            schedule.overlap_policy,
            OverlapPolicy::QueueOne | OverlapPolicy::Replace
        );
        Some(Known {
            schedule_from: schedule.schedule_from,
            schedule: Arc::new(built),
            allow_concurrent: schedule.allow_concurrent,
            waits,
            claims_ahead: !waits && schedule.time_rules.max_runs.is_none(),
            group: schedule.group.clone(),
            handler: schedule.handler.clone(),
        })
    }

    /// True when one of the job's owners by the previous live set (this
    /// worker aside) is still live: it has been firing the job.
    fn owners_were_live(&self, job_id: i64) -> bool {
        let Some(cluster) = &self.shared.config.cluster else {
            return false;
        };
        let me = &self.shared.config.instance;
        let live = &self.shared.membership.borrow().live;
        let before = Membership {
            live: self
                .previous_live
                .iter()
                .filter(|i| *i != me)
                .cloned()
                .collect(),
        };
        before
            .owners(job_id, cluster.replicas)
            .iter()
            .any(|owner| live.iter().any(|l| l == owner))
    }

    fn place_all(&mut self, line: DateTime<Utc>) {
        let ids: Vec<i64> = self.catalog.keys().copied().collect();
        for id in ids {
            self.place(id, line);
        }
    }

    /// Arms a known job where this instance owns it (the backup a little
    /// later than the primary), disarms it elsewhere. A job this instance
    /// newly holds as primary is caught up to `line` from its last record:
    /// at start, after its owners went away, after a late change message.
    fn place(&mut self, job_id: i64, line: DateTime<Utc>) {
        let Some(known) = self.catalog.get(&job_id) else {
            self.timers.disarm(job_id);
            return;
        };
        let Some(rank) = self.shared.rank(job_id) else {
            self.timers.disarm(job_id);
            return;
        };
        let delay = self
            .shared
            .config
            .cluster
            .as_ref()
            .map_or(Duration::ZERO, |c| c.backup_delay * rank as u32);
        // Only the primary claims ahead; a backup wakes after the time.
        let ahead = if rank == 0 && known.claims_ahead {
            self.shared.config.claim_ahead
        } else {
            Duration::ZERO
        };
        let current = self.timers.armed(job_id);
        let same_schedule = current.is_some_and(|a| a.schedule_from == known.schedule_from);
        if same_schedule
            && current.is_some_and(|a| {
                a.delay == delay
                    && a.ahead == ahead
                    && a.allow_concurrent == known.allow_concurrent
                    && a.waits == known.waits
            })
        {
            return;
        }
        let was_primary = same_schedule && current.is_some_and(|a| a.delay.is_zero());
        // A job changing hands between live workers needs no catch-up (its
        // owners kept firing it; a catch-up now would only race them). It
        // does when its schedule changed unseen, or its owners are gone.
        let needs_catch_up =
            (!same_schedule && current.is_some()) || !self.owners_were_live(job_id);
        let armed = Armed {
            job_id,
            schedule_from: known.schedule_from,
            schedule: Arc::clone(&known.schedule),
            allow_concurrent: known.allow_concurrent,
            waits: known.waits,
            delay,
            ahead,
        };
        let from = known.schedule_from.max(line);
        let catch_up = rank == 0 && !was_primary && needs_catch_up && known.schedule_from < line;
        self.timers.arm(armed, from);
        if catch_up {
            self.claim(Request::CatchUp {
                job_id,
                through: line,
                reason: MissReason::Downtime,
            });
        }
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
                            Some(qiwu_coord::Change::Job(id)) => { let _ = sender.send(Command::JobChanged(id)); }
                            Some(qiwu_coord::Change::Fire(id)) => { let _ = sender.send(Command::FireQueued(id)); }
                            Some(qiwu_coord::Change::Cancel(id)) => { let _ = sender.send(Command::CancelRequested(id)); }
                            Some(qiwu_coord::Change::Freeze(_)) => { let _ = sender.send(Command::FreezesChanged); }
                            None => break,
                        },
                        () = shutting_down(&mut shutdown) => return,
                    }
                }
                tracing::warn!("the change subscription dropped; re-subscribing");
            }
            Err(e) => tracing::warn!(error = %e, "cannot subscribe to changes; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutting_down(&mut shutdown) => return,
        }
    }
}
