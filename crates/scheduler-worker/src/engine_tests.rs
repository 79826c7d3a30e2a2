//! The engine in process, on tokio's paused clock, against a real SQLite
//! database (and a real Redis server where a lock is the point).
//!
//! The clock is driven by hand: a blocking task held for the whole test
//! keeps tokio from auto-advancing while the database or Redis answers (on
//! a paused clock an I/O wait would otherwise jump time forward to the next
//! timer), and the test steps the clock only once the engine's database
//! work has settled (no statement of the engine ran during a few round
//! trips of the test's own). So the engine's time moves as if its queries
//! took no time, and the outcomes below are those of the timings the test
//! sets up.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use qiwu_domain::HandlerDescriptor;
use qiwu_storage::entity::run;
use qiwu_storage::{NewJob, Store};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, Statement,
};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::clock::{Clock, TokioClock};
use crate::cluster::ClusterConfig;
use crate::context::RunContext;
use crate::engine::{Command, Engine, EngineConfig, EngineHandle};
use crate::handlers::{Handler, HandlerFuture, Registry};
use crate::test_support::{TestStore, test_store};
use crate::texts;

/// How far the test moves the clock per step.
const STEP: Duration = Duration::from_millis(10);

/// Most real time a step waits for the engine's database work to settle.
const PATIENCE: Duration = Duration::from_secs(5);

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T10:00:00.000Z")
        .expect("time")
        .with_timezone(&Utc)
}

/// Sleeps `ms` and returns, ignoring the stop signal.
struct Stubborn;

impl Handler for Stubborn {
    fn run(&self, params: Map<String, Value>, _ctx: RunContext) -> HandlerFuture {
        let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(0);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok("done".to_string())
        })
    }
}

/// Sleeps `ms`, stopping at once when told to.
struct Polite;

impl Handler for Polite {
    fn run(&self, params: Map<String, Value>, mut ctx: RunContext) -> HandlerFuture {
        let ms = params.get("ms").and_then(Value::as_u64).unwrap_or(0);
        Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => Ok("done".to_string()),
                reason = ctx.stop.stopped() => Err(format!("stopped: {reason:?}")),
            }
        })
    }
}

/// Fails at once with a 10 000-character error.
struct Failing;

impl Handler for Failing {
    fn run(&self, _params: Map<String, Value>, _ctx: RunContext) -> HandlerFuture {
        Box::pin(async { Err("x".repeat(10_000)) })
    }
}

fn registry() -> Registry {
    let descriptor = |name: &str| {
        HandlerDescriptor::new(
            name,
            ("测试", "Test"),
            ("", ""),
            json!({"type": "object", "properties": {"ms": {"type": "integer", "default": 0}}}),
        )
        .expect("descriptor")
    };
    Registry::new([
        (
            descriptor("test.stubborn"),
            Arc::new(Stubborn) as Arc<dyn Handler>,
        ),
        (
            descriptor("test.failing"),
            Arc::new(Failing) as Arc<dyn Handler>,
        ),
        (
            descriptor("test.polite"),
            Arc::new(Polite) as Arc<dyn Handler>,
        ),
    ])
    .expect("registry")
}

fn job(name: &str, handler: &str, cron: &str) -> NewJob {
    NewJob {
        name: name.into(),
        group: "default".into(),
        handler: handler.into(),
        params: json!({}),
        cron: cron.into(),
        timezone: None,
        enabled: true,
        retry_count: 0,
        retry_interval_ms: 1000,
        retry_backoff: "fixed".into(),
        retry_max_interval_ms: 3_600_000,
        retry_jitter: false,
        overlap_policy: "skip".into(),
        timeout_ms: 0,
        allow_concurrent: false,
        misfire_policy: "skip".into(),
        remark: String::new(),
        builtin_key: None,
        alert: Default::default(),
        time_rules: Default::default(),
    }
}

/// While held, tokio does not auto-advance the paused clock (taken first
/// thing in every test, before any database or Redis connection), and no
/// other engine test runs: each steps its clock only when its engine is
/// idle, which a machine busy with the others would blur.
struct Hold {
    _release: std::sync::mpsc::Sender<()>,
    _one_at_a_time: tokio::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn hold_clock() -> Hold {
    let one_at_a_time = ONE_AT_A_TIME.lock().await;
    let (release, held) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = held.recv();
    });
    Hold {
        _release: release,
        _one_at_a_time: one_at_a_time,
    }
}

/// A running engine and the means to drive and read it.
struct Harness {
    store: TestStore,
    handle: EngineHandle,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), crate::WorkerError>>,
    clock: Arc<TokioClock>,
    /// Statements the engine has sent.
    statements: Arc<std::sync::atomic::AtomicU64>,
    /// The engine's statements, as sent.
    sql_log: Arc<std::sync::Mutex<Vec<String>>>,
    /// Dropping it ends the blocking task that keeps time from jumping.
    _hold: Hold,
}

impl Harness {
    /// Starts an engine at `t0()` on a fresh store holding `jobs`, created
    /// `created_ago` before `t0()`.
    async fn start(
        hold: Hold,
        jobs: &[NewJob],
        created_ago: chrono::Duration,
        cluster: Option<ClusterConfig>,
    ) -> (Harness, Vec<i64>) {
        Harness::start_with(hold, &[], jobs, created_ago, cluster).await
    }

    /// [`Harness::start`] with user calendars stored before the jobs.
    async fn start_with(
        hold: Hold,
        calendars: &[Value],
        jobs: &[NewJob],
        created_ago: chrono::Duration,
        cluster: Option<ClusterConfig>,
    ) -> (Harness, Vec<i64>) {
        let store = test_store().await;
        for calendar in calendars {
            let Value::Object(map) = calendar else {
                panic!("a calendar is an object");
            };
            let spec = qiwu_domain::calendar::user::validate(map, None).expect("calendar");
            store
                .calendars()
                .create(&spec, "t", t0() - created_ago)
                .await
                .expect("calendar");
        }
        let mut ids = Vec::new();
        for j in jobs {
            ids.push(
                store
                    .jobs()
                    .create(j, "t", t0() - created_ago)
                    .await
                    .expect("job")
                    .id,
            );
        }
        (Harness::start_on(hold, store, cluster), ids)
    }

    /// Starts an engine at `t0()` on a store the test prepared.
    fn start_on(hold: Hold, store: TestStore, cluster: Option<ClusterConfig>) -> Harness {
        let clock = Arc::new(TokioClock::starting_at(t0()));
        let statements = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut counted = store.store.clone();
        let counter = Arc::clone(&statements);
        let sql_log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&sql_log);
        counted.on_statement(move |sql, _| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut log) = log.lock() {
                log.push(sql.to_string());
            }
        });
        let (engine, handle) = Engine::new(
            counted,
            registry(),
            EngineConfig {
                instance: "test-1".into(),
                timezone: chrono_tz::UTC,
                shutdown_grace: Duration::from_secs(10),
                reconcile_every: Duration::from_secs(60),
                close_all_running_at_start: cluster.is_none(),
                misfire_threshold: Duration::from_secs(5),
                max_in_flight: 100,
                claim_ahead: Duration::from_millis(500),
                on_timeout: Arc::new(|_| Box::pin(async {})),
                cluster,
            },
            clock.clone(),
        );
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(engine.run(stop_rx));
        Harness {
            store,
            handle,
            stop,
            task,
            clock,
            statements,
            sql_log,
            _hold: hold,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Moves the clock one step, then waits until the engine's database
    /// work has settled.
    async fn step(&self) {
        self.pass_settling(STEP, PATIENCE).await;
    }

    /// Waits until the engine's database work has settled: every pooled
    /// connection idle (a statement or transaction in flight holds one) and
    /// no statement of the engine ran during a few moments of real time.
    /// Bounded by real time, not by rounds, so a machine busy with other
    /// tests slows the test down instead of letting engine time run ahead
    /// of a claim still in flight; a statement the test itself keeps
    /// waiting (a locked file) never settles, so such a test steps with a
    /// short `limit` ([`Harness::pass_while_locked`]).
    async fn settle(&self, limit: Duration) {
        let count = || self.statements.load(std::sync::atomic::Ordering::Relaxed);
        let pool = self.store.connection().get_sqlite_connection_pool();
        let began = std::time::Instant::now();
        let mut quiet = 0;
        while quiet < 3 && began.elapsed() < limit {
            let before = count();
            // A moment of real time for the database's threads, without
            // taking a connection of the pool (which would not look idle).
            for _ in 0..3 {
                tokio::task::yield_now().await;
                let _ = tokio::task::spawn_blocking(|| {
                    std::thread::sleep(Duration::from_micros(300));
                })
                .await;
            }
            let idle = pool.num_idle() == pool.size() as usize;
            quiet = if idle && count() == before {
                quiet + 1
            } else {
                0
            };
        }
    }

    /// Steps the clock until `done` holds for the job's runs (at most
    /// `limit` of engine time).
    async fn until(
        &self,
        job: i64,
        limit: Duration,
        done: impl Fn(&[run::Model]) -> bool,
    ) -> Vec<run::Model> {
        let start = tokio::time::Instant::now();
        loop {
            let runs = runs(&self.store, job).await;
            if done(&runs) {
                return runs;
            }
            assert!(
                start.elapsed() < limit,
                "not reached within {limit:?} of engine time: {runs:#?}"
            );
            self.step().await;
        }
    }

    /// Steps the clock by `by`.
    async fn pass(&self, by: Duration) {
        self.pass_settling(by, PATIENCE).await;
    }

    /// Steps the clock by `by` while the test holds the database locked:
    /// the engine's statements wait meanwhile, so each step waits for them
    /// only briefly.
    async fn pass_while_locked(&self, by: Duration) {
        self.pass_settling(by, Duration::from_millis(20)).await;
    }

    async fn pass_settling(&self, by: Duration, limit: Duration) {
        let end = tokio::time::Instant::now() + by;
        while tokio::time::Instant::now() < end {
            tokio::time::advance(STEP).await;
            self.settle(limit).await;
        }
    }

    async fn run_once(&self, job: i64) {
        let fire = self
            .store
            .fires()
            .create_manual(job, self.now())
            .await
            .expect("queue");
        self.handle.send(Command::FireQueued(fire));
    }

    async fn sql(&self, sql: &str) {
        self.store
            .connection()
            .execute_raw(Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                sql.to_string(),
            ))
            .await
            .expect(sql);
    }

    /// Stops the engine and waits for it (stepping the clock through its
    /// grace period). The store comes back with the clock still held.
    async fn shut_down(self) -> (Store, Hold) {
        let _ = self.stop.send(true);
        while !self.task.is_finished() {
            self.step().await;
        }
        self.task.await.expect("engine task").expect("engine");
        (self.store.store.clone(), self._hold)
    }
}

async fn runs(store: &Store, job: i64) -> Vec<run::Model> {
    run::Entity::find()
        .filter(run::Column::JobId.eq(job))
        .order_by_asc(run::Column::Id)
        .all(store.connection())
        .await
        .expect("runs")
}

/// The run started before `now` (a fire claimed ahead of its time shows
/// `running` with its start still to come, and meets the overlap rule at
/// that start).
fn started(run: &run::Model, now: DateTime<Utc>) -> bool {
    run.started_at < ms(now)
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

#[tokio::test(start_paused = true)]
async fn every_fire_starts_at_its_scheduled_time() {
    let mut echo = job("on time", "test.stubborn", "* * * * * *");
    echo.params = json!({"ms": 100});
    let (h, ids) =
        Harness::start(hold_clock().await, &[echo], chrono::Duration::zero(), None).await;
    let runs = h
        .until(ids[0], Duration::from_secs(10), |runs| {
            runs.iter().filter(|r| r.status == "success").count() >= 5
        })
        .await;
    // The timer sleeps until each fire time and the claim takes no engine
    // time here: a fire starts within one step of the clock of its time,
    // every second, one record each.
    let done: Vec<_> = runs.iter().filter(|r| r.status == "success").collect();
    for (i, run) in done.iter().take(5).enumerate() {
        assert_eq!(
            run.scheduled_at,
            ms(t0()) + 1000 * (i as i64 + 1),
            "{runs:#?}"
        );
        let lag = run.started_at - run.scheduled_at;
        assert!(
            (0..=STEP.as_millis() as i64).contains(&lag),
            "started {lag} ms late: {run:?}"
        );
    }
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_recorded_at_the_deadline_and_the_slot_held_until_the_handler_returns() {
    let mut stubborn = job("stubborn", "test.stubborn", "* * * * * *");
    stubborn.params = json!({"ms": 4500});
    stubborn.timeout_ms = 500;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[stubborn],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    // Fired at 1 s and timed out at 1.5 s, the handler ignores the stop
    // and returns 4.5 s after it started: every fire until then is skipped,
    // and the first one after it runs.
    let runs = h
        .until(job, Duration::from_secs(20), |runs| {
            runs.iter()
                .skip(1)
                .any(|r| r.status != "skipped" && started(r, h.now()))
        })
        .await;
    let first = &runs[0];
    assert_eq!(
        (first.scheduled_at, first.status.as_str()),
        (ms(t0()) + 1000, "timeout")
    );
    // Measured when the test's step reached the deadline.
    let took = first.duration_ms.unwrap_or(0);
    assert!(
        (500..500 + STEP.as_millis() as i64 + 1).contains(&took),
        "{first:?}"
    );
    assert!(first.error.contains("500 ms"), "{first:?}");
    let returned = first.started_at + 4500;
    let (during, after): (Vec<_>, Vec<_>) = runs[1..].iter().partition(|r| r.started_at < returned);
    assert!(during.len() >= 3, "fires while the handler ran: {runs:#?}");
    assert!(
        during
            .iter()
            .all(|r| r.status == "skipped" && r.output == texts::SKIP_OVERLAP),
        "{runs:#?}"
    );
    assert!(after.iter().any(|r| r.status != "skipped"), "{runs:#?}");
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_is_recorded_at_once_never_retried_and_the_slot_held_until_the_handler_returns() {
    let mut stubborn = job("stubborn", "test.stubborn", "* * * * * *");
    stubborn.params = json!({"ms": 4500});
    stubborn.retry_count = 2;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[stubborn],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    let runs = h
        .until(job, Duration::from_secs(5), |runs| {
            runs.first()
                .is_some_and(|r| r.status == "running" && started(r, h.now()))
        })
        .await;
    let first = runs[0].id;
    h.pass(Duration::from_millis(300)).await;
    let asked = h.now();
    h.store
        .runs()
        .request_cancel(first, "alice", asked)
        .await
        .expect("request");
    h.handle.send(Command::CancelRequested(first));
    // The message makes the instance look at once: recorded within a step.
    let runs = h
        .until(job, Duration::from_secs(1), |runs| {
            runs[0].status != "running"
        })
        .await;
    let cancelled = &runs[0];
    assert_eq!(cancelled.status, "cancelled", "{cancelled:?}");
    assert!(
        cancelled.error.contains("Cancelled by alice"),
        "{cancelled:?}"
    );
    assert!(
        cancelled.finished_at.unwrap_or(i64::MAX) <= ms(asked) + 2 * STEP.as_millis() as i64,
        "{cancelled:?}"
    );
    // The handler ignores the stop and returns 4.5 s after it started:
    // fires until then are skipped, the first one after it runs, and the
    // cancelled fire has no second attempt.
    let runs = h
        .until(job, Duration::from_secs(20), |runs| {
            runs.iter()
                .skip(1)
                .any(|r| r.status != "skipped" && started(r, h.now()))
        })
        .await;
    let returned = cancelled.started_at + 4500;
    let (during, after): (Vec<_>, Vec<_>) = runs[1..].iter().partition(|r| r.started_at < returned);
    assert!(during.len() >= 3, "fires while the handler ran: {runs:#?}");
    assert!(
        during
            .iter()
            .all(|r| r.status == "skipped" && r.output == texts::SKIP_OVERLAP),
        "{runs:#?}"
    );
    assert!(after.iter().any(|r| r.status != "skipped"), "{runs:#?}");
    assert!(
        runs.iter()
            .all(|r| r.fire_id != cancelled.fire_id || r.attempt == 1),
        "{runs:#?}"
    );
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_whose_message_is_lost_is_found_in_the_database() {
    let mut stubborn = job("stubborn", "test.stubborn", "0 0 0 1 1 *");
    stubborn.params = json!({"ms": 6000});
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[stubborn],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    h.run_once(job).await;
    let runs = h
        .until(job, Duration::from_secs(5), |runs| {
            runs.first()
                .is_some_and(|r| r.status == "running" && started(r, h.now()))
        })
        .await;
    let asked = h.now();
    h.store
        .runs()
        .request_cancel(runs[0].id, "bob", asked)
        .await
        .expect("request");
    // No message: the instance's own check finds it within its period.
    let runs = h
        .until(job, Duration::from_secs(5), |runs| {
            runs[0].status != "running"
        })
        .await;
    assert_eq!(runs[0].status, "cancelled");
    assert!(runs[0].error.contains("bob"), "{runs:?}");
    let took = runs[0].finished_at.unwrap_or(i64::MAX) - ms(asked);
    let period = crate::cancels::CHECK_EVERY.as_millis() as i64;
    assert!(took <= period + 2 * STEP.as_millis() as i64, "{took} ms");
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn failures_are_retried_with_their_interval_and_errors_cut_to_4000_characters() {
    let mut failing = job("failing", "test.failing", "0 0 0 1 1 *");
    failing.retry_count = 2;
    failing.retry_interval_ms = 1500;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[failing],
        chrono::Duration::zero(),
        None,
    )
    .await;
    h.run_once(ids[0]).await;
    let runs = h
        .until(ids[0], Duration::from_secs(10), |runs| {
            runs.len() == 3 && runs.iter().all(|r| r.status != "running")
        })
        .await;
    let attempts: Vec<(i32, &str)> = runs
        .iter()
        .map(|r| (r.attempt, r.status.as_str()))
        .collect();
    assert_eq!(attempts, [(1, "failed"), (2, "failed"), (3, "failed")]);
    assert!(
        runs.iter().all(|r| r.error.chars().count() == 4000),
        "cut to 4000"
    );
    for pair in runs.windows(2) {
        assert!(pair[1].started_at - pair[0].started_at >= 1500, "{pair:#?}");
    }
    h.shut_down().await;
}

/// How late a retry may start: each attempt's end is written before the
/// wait, and on a busy machine that write can outlast the bounded settle
/// while the test steps the clock (observed: 250 ms). Well under the
/// differences the retry tests tell apart.
const RETRY_SLACK_MS: i64 = 500;

#[tokio::test(start_paused = true)]
async fn exponential_backoff_doubles_the_wait_up_to_its_cap() {
    let mut failing = job("failing", "test.failing", "0 0 0 1 1 *");
    failing.retry_count = 4;
    failing.retry_interval_ms = 1000;
    failing.retry_backoff = "exponential".into();
    failing.retry_max_interval_ms = 3000;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[failing],
        chrono::Duration::zero(),
        None,
    )
    .await;
    h.run_once(ids[0]).await;
    let runs = h
        .until(ids[0], Duration::from_secs(20), |runs| {
            runs.len() == 5 && runs.iter().all(|r| r.status != "running")
        })
        .await;
    // 1 s, 2 s, then capped at 3 s twice: never shorter, and late by at
    // most the steps a busy machine lets the end's write take.
    let gaps: Vec<i64> = runs
        .windows(2)
        .map(|pair| pair[1].started_at - pair[0].started_at)
        .collect();
    for (gap, want) in gaps.iter().zip([1000, 2000, 3000, 3000]) {
        assert!((want..=want + RETRY_SLACK_MS).contains(gap), "{gaps:?}");
    }
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn full_jitter_waits_at_most_the_delay() {
    let mut failing = job("failing", "test.failing", "0 0 0 1 1 *");
    failing.retry_count = 3;
    failing.retry_interval_ms = 2000;
    failing.retry_backoff = "exponential".into();
    failing.retry_max_interval_ms = 10_000;
    failing.retry_jitter = true;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[failing],
        chrono::Duration::zero(),
        None,
    )
    .await;
    h.run_once(ids[0]).await;
    let runs = h
        .until(ids[0], Duration::from_secs(20), |runs| {
            runs.len() == 4 && runs.iter().all(|r| r.status != "running")
        })
        .await;
    // Each wait is the domain's jittered delay for this fire and retry.
    let timing = qiwu_domain::RetryTiming {
        backoff: qiwu_domain::RetryBackoff::Exponential,
        interval_ms: 2000,
        max_interval_ms: 10_000,
        jitter: true,
    };
    for (n, pair) in (1u32..).zip(runs.windows(2)) {
        let want = timing.delay_ms(n, qiwu_domain::retry::jitter_seed(pair[0].fire_id, n)) as i64;
        let gap = pair[1].started_at - pair[0].started_at;
        assert!(want <= 2000 << (n - 1), "{want}");
        assert!(
            (want..=want + RETRY_SLACK_MS).contains(&gap),
            "retry {n}: waited {gap} ms, expected {want}"
        );
    }
    h.shut_down().await;
}

/// The spans of the runs that ran, checked never to overlap.
fn assert_serial(runs: &[run::Model]) {
    let mut spans: Vec<(i64, i64)> = runs
        .iter()
        .filter(|r| r.status != "skipped" && !never_ran(r))
        .map(|r| (r.started_at, r.finished_at.unwrap_or(i64::MAX)))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "overlap {pair:?}: {runs:#?}");
    }
}

/// A fire cancelled or replaced while it waited for its turn: it holds no
/// time of the job's.
fn never_ran(run: &run::Model) -> bool {
    run.status == "cancelled" && run.error.contains("it never ran")
}

#[tokio::test(start_paused = true)]
async fn queue_one_lets_one_fire_wait_and_skips_a_further_one() {
    let mut queued = job("queued", "test.stubborn", "* * * * * *");
    queued.params = json!({"ms": 2500});
    queued.allow_concurrent = false;
    queued.overlap_policy = "queue_one".into();
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[queued],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    let runs = h
        .until(job, Duration::from_secs(20), |runs| {
            runs.iter().filter(|r| r.status == "success").count() >= 3
        })
        .await;
    assert_serial(&runs);
    // The 2 s fire waited for the 1 s one and started when it ended.
    let (first, second) = (&runs[0], &runs[1]);
    assert_eq!(second.scheduled_at, first.scheduled_at + 1000);
    let ended = first.finished_at.unwrap_or(i64::MAX);
    assert!(
        (ended..=ended + 3 * STEP.as_millis() as i64).contains(&second.started_at),
        "{runs:#?}"
    );
    assert!(second.output.contains("waiting"), "{second:?}");
    // The 3 s fire found one waiting: skipped with the reason.
    let third = &runs[2];
    assert_eq!(
        (third.status.as_str(), third.output.as_str()),
        ("skipped", texts::SKIP_QUEUE_FULL),
        "{runs:#?}"
    );
    assert!(runs.iter().all(|r| r.output != texts::SKIP_OVERLAP));
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn replace_stops_the_running_fire_and_starts_once_it_stopped() {
    let mut replaced = job("replaced", "test.polite", "*/2 * * * * *");
    replaced.params = json!({"ms": 5000});
    replaced.retry_count = 2;
    replaced.overlap_policy = "replace".into();
    let mut stubborn = job("stubborn", "test.stubborn", "*/2 * * * * *");
    stubborn.params = json!({"ms": 3000});
    stubborn.overlap_policy = "replace".into();
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[replaced, stubborn],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let runs = h
        .until(ids[0], Duration::from_secs(20), |runs| {
            runs.iter().filter(|r| r.status == "cancelled").count() >= 3
        })
        .await;
    assert_serial(&runs);
    // Each fire replaced the one before at once, with no retry of it.
    for pair in runs.windows(2).filter(|p| p[0].status == "cancelled") {
        let (old, new) = (&pair[0], &pair[1]);
        assert_eq!(new.scheduled_at, old.scheduled_at + 2000, "{runs:#?}");
        assert!(old.error.contains("Replaced by the fire of"), "{old:?}");
        // A few database round trips (request, check, end), each a step
        // at most.
        assert!(
            new.started_at - new.scheduled_at <= 10 * STEP.as_millis() as i64,
            "{runs:#?}"
        );
    }
    assert!(runs.iter().all(|r| r.attempt == 1), "{runs:#?}");
    // A handler that ignores the stop: the next fire starts only once it
    // really returned (3 s after it started).
    let runs = h
        .until(ids[1], Duration::from_secs(20), |runs| {
            runs.iter().filter(|r| r.status == "cancelled").count() >= 2
        })
        .await;
    let (old, new) = (&runs[0], &runs[1]);
    assert_eq!(old.status, "cancelled", "{runs:#?}");
    assert!(new.started_at >= old.started_at + 3000, "{runs:#?}");
    h.shut_down().await;
}

/// Two fires arriving while the running one still holds its turn: the
/// older waiting one is replaced before it ran, and only the newest runs,
/// once the running handler really returned.
#[tokio::test(start_paused = true)]
async fn replace_drops_a_waiting_fire_that_a_newer_one_replaces() {
    let mut stubborn = job("stubborn", "test.stubborn", "0 0 0 1 1 *");
    stubborn.params = json!({"ms": 4000});
    stubborn.overlap_policy = "replace".into();
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[stubborn],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    h.run_once(job).await;
    h.until(job, Duration::from_secs(5), |runs| {
        runs.first().is_some_and(|r| r.status == "running")
    })
    .await;
    // Two more fires a moment apart, while the first ignores its stop.
    h.run_once(job).await;
    h.until(job, Duration::from_secs(5), |runs| {
        runs.len() == 2 && runs[0].status == "cancelled"
    })
    .await;
    h.run_once(job).await;
    let runs = h
        .until(job, Duration::from_secs(20), |runs| {
            runs.len() == 3 && runs.iter().all(|r| r.status != "running")
        })
        .await;
    let (first, waiting, newest) = (&runs[0], &runs[1], &runs[2]);
    assert_eq!(first.status, "cancelled", "{runs:#?}");
    assert!(!never_ran(first), "{runs:#?}");
    assert_eq!(waiting.status, "cancelled", "{runs:#?}");
    assert!(never_ran(waiting), "{runs:#?}");
    assert!(
        waiting.error.contains("Replaced by the fire of"),
        "{runs:#?}"
    );
    assert_eq!(waiting.duration_ms, Some(0), "{runs:#?}");
    // Its record starts where it ended: it holds none of the first's time.
    assert!(
        waiting.started_at >= waiting.finished_at.unwrap_or(i64::MAX) - STEP.as_millis() as i64,
        "{runs:#?}"
    );
    // The newest ran, after the first's handler really returned.
    assert_eq!(newest.status, "success", "{runs:#?}");
    assert!(newest.started_at >= first.started_at + 4000, "{runs:#?}");
    assert_serial(&runs);
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_fires_overlap_when_allowed() {
    let mut parallel = job("parallel", "test.stubborn", "* * * * * *");
    parallel.params = json!({"ms": 2500});
    parallel.allow_concurrent = true;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[parallel],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let runs = h
        .until(ids[0], Duration::from_secs(20), |runs| {
            runs.iter().filter(|r| r.status == "success").count() >= 3
        })
        .await;
    assert!(runs.iter().all(|r| r.status != "skipped"), "{runs:#?}");
    // Fires a second apart ran 2.5 s each: they overlapped.
    let (a, b) = (&runs[0], &runs[1]);
    assert!(
        b.started_at < a.finished_at.unwrap_or(i64::MAX),
        "{runs:#?}"
    );
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn fire_times_missed_before_the_start_are_one_record() {
    let jobs = [
        job("skip", "test.stubborn", "* * * * * *"),
        NewJob {
            misfire_policy: "run_once".into(),
            ..job("catch up", "test.stubborn", "*/2 * * * * *")
        },
    ];
    // Both jobs exist since 10 s before the engine starts.
    let (h, ids) = Harness::start(
        hold_clock().await,
        &jobs,
        chrono::Duration::seconds(10),
        None,
    )
    .await;
    let skip = h
        .until(ids[0], Duration::from_secs(5), |runs| {
            runs.iter().any(|r| r.trigger == "schedule")
        })
        .await;
    let missed: Vec<_> = skip.iter().filter(|r| r.trigger == "misfire").collect();
    assert_eq!(missed.len(), 1, "{skip:#?}");
    assert_eq!(missed[0].status, "skipped");
    // It stands for every second since the job was created, up to the start.
    assert!(
        missed[0].output.contains("2026-11-30 09:59:51 +00:00 至"),
        "{}",
        missed[0].output
    );
    assert!(missed[0].scheduled_at >= ms(t0()), "{:?}", missed[0]);
    let caught = h
        .until(ids[1], Duration::from_secs(5), |runs| {
            runs.iter()
                .any(|r| r.trigger == "misfire" && r.status == "success")
        })
        .await;
    assert_eq!(caught.iter().filter(|r| r.trigger == "misfire").count(), 1);
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_database_error_during_claims_leaves_one_record_per_fire_time() {
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[job("tick", "test.stubborn", "* * * * * *")],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    h.until(job, Duration::from_secs(5), |runs| runs.len() >= 2)
        .await;
    // The ledger is away for 8 s: no claim can land.
    h.sql("ALTER TABLE fires RENAME TO fires_away").await;
    let away = ms(h.now());
    h.pass(Duration::from_secs(8)).await;
    h.sql("ALTER TABLE fires_away RENAME TO fires").await;
    let back = ms(h.now());
    let runs = h
        .until(job, Duration::from_secs(15), |runs| {
            runs.iter().any(|r| r.scheduled_at > back + 2000)
        })
        .await;
    // Every second is covered once: by runs, and one catch-up record for
    // the seconds no claim could record.
    let (store, _hold) = h.shut_down().await;
    let rows = qiwu_storage::entity::fire::Entity::find()
        .filter(qiwu_storage::entity::fire::Column::JobId.eq(job))
        .order_by_asc(qiwu_storage::entity::fire::Column::ScheduledAt)
        .all(store.connection())
        .await
        .expect("fires");
    let mut expected = ms(t0()) + 1000;
    for row in &rows {
        assert_eq!(row.first_at, Some(expected), "{rows:#?}");
        expected = row.scheduled_at + 1000;
    }
    // The seconds no claim could record are stood for by catch-up records
    // made after the ledger came back.
    let catch_ups: Vec<_> = runs.iter().filter(|r| r.trigger == "misfire").collect();
    assert!(!catch_ups.is_empty(), "{runs:#?}");
    assert!(
        catch_ups
            .iter()
            .all(|r| r.scheduled_at > away && r.status == "skipped"),
        "{catch_ups:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_end_the_database_refuses_becomes_a_short_failure_and_frees_the_slot() {
    let mut long = job("long", "test.stubborn", "0 0 0 1 1 *");
    long.params = json!({"ms": 2000});
    long.enabled = false;
    let (h, ids) =
        Harness::start(hold_clock().await, &[long], chrono::Duration::zero(), None).await;
    let job = ids[0];
    h.run_once(job).await;
    h.until(job, Duration::from_secs(2), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    // The run log cannot take the end (its table is away) until after the
    // recorder gave up on the real end.
    h.sql("ALTER TABLE runs RENAME TO runs_away").await;
    h.pass(Duration::from_secs(10)).await;
    h.sql("ALTER TABLE runs_away RENAME TO runs").await;
    let runs = h
        .until(job, Duration::from_secs(30), |runs| {
            runs.first().is_some_and(|r| r.status != "running")
        })
        .await;
    assert_eq!(runs[0].status, "failed");
    assert_eq!(runs[0].error, qiwu_storage::END_WRITE_FALLBACK);
    assert!(runs[0].output.is_empty());
    // The slot is free: the next request runs.
    h.run_once(job).await;
    h.until(job, Duration::from_secs(10), |runs| {
        runs.len() == 2 && runs[1].status == "success"
    })
    .await;
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_database_holds_the_end_until_it_answers() {
    use sea_orm::sqlx::{Connection, SqliteConnection};
    let mut long = job("long", "test.stubborn", "0 0 0 1 1 *");
    long.params = json!({"ms": 1000});
    long.enabled = false;
    let (h, ids) =
        Harness::start(hold_clock().await, &[long], chrono::Duration::zero(), None).await;
    let job = ids[0];
    h.run_once(job).await;
    h.until(job, Duration::from_secs(2), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    // Another connection holds the file's write lock while the run ends.
    let url = h.store.url();
    let mut locker = SqliteConnection::connect(&url).await.expect("open");
    sea_orm::sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut locker)
        .await
        .expect("lock");
    h.pass_while_locked(Duration::from_secs(3)).await;
    sea_orm::sqlx::query("COMMIT")
        .execute(&mut locker)
        .await
        .expect("unlock");
    let runs = h
        .until(job, Duration::from_secs(30), |runs| {
            runs.first().is_some_and(|r| r.status != "running")
        })
        .await;
    assert_eq!(
        (runs[0].status.as_str(), runs[0].output.as_str()),
        ("success", "done")
    );
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_what_is_still_running_and_never_retries() {
    let mut long = job("long", "test.stubborn", "0 0 0 1 1 *");
    long.params = json!({"ms": 60_000});
    long.enabled = false;
    long.retry_count = 3;
    let (h, ids) =
        Harness::start(hold_clock().await, &[long], chrono::Duration::zero(), None).await;
    let job = ids[0];
    h.run_once(job).await;
    h.until(job, Duration::from_secs(2), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let stopping = tokio::time::Instant::now();
    let (store, _hold) = h.shut_down().await;
    // The handler ignores its stop: the grace period (10 s) ends it.
    assert!(stopping.elapsed() >= Duration::from_secs(10));
    let runs = runs(&store, job).await;
    assert_eq!(runs.len(), 1, "never retried: {runs:#?}");
    assert_eq!(runs[0].status, "failed");
    assert!(runs[0].error.contains("shut down"), "{:?}", runs[0]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_lock_stops_the_attempt_and_the_slot_waits_for_the_handler() {
    let hold = hold_clock().await;
    let mut redis = RedisServer::start();
    let coord = qiwu_coord::Coord::connect(&redis.url())
        .await
        .expect("redis");
    let cluster = ClusterConfig::new(coord);
    let mut long = job("locked", "test.stubborn", "0 0 0 1 1 *");
    long.params = json!({"ms": 30_000});
    long.enabled = false;
    let (h, ids) = Harness::start(hold, &[long], chrono::Duration::zero(), Some(cluster)).await;
    let job = ids[0];
    h.run_once(job).await;
    h.until(job, Duration::from_secs(5), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    // The winner of the claim takes the lock right after; then Redis goes.
    while redis
        .cli(&["EXISTS", &format!("qiwu:lock:job:{job}")])
        .trim()
        != "1"
    {
        h.step().await;
    }
    redis.stop();
    // The renewal (every third of the 10 s TTL) is not confirmed: the run
    // is failed, not retried, before the TTL could expire.
    let runs = h
        .until(job, Duration::from_secs(15), |runs| {
            runs.first().is_some_and(|r| r.status != "running")
        })
        .await;
    assert_eq!(runs[0].status, "failed");
    assert_eq!(runs[0].error, texts::LOCK_LOST);
    assert!(runs[0].duration_ms.unwrap_or(0) < 10_000, "{:?}", runs[0]);
    h.shut_down().await;
}

/// A Redis server of the test's own, so it can be stopped.
struct RedisServer {
    child: std::process::Child,
    port: u16,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let mut server = RedisServer { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        server.stop();
        panic!("redis-server did not listen on {port}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The engine's statements since the last call.
fn take_sql(h: &Harness) -> Vec<String> {
    std::mem::take(&mut *h.sql_log.lock().expect("log"))
}

/// How many statements read a job's row by its id: the alert state's
/// locked read (claims read jobs by `IN (…)` lists).
fn alert_reads(sql: &[String]) -> usize {
    sql.iter()
        .filter(|s| s.contains(r#"FROM "jobs" WHERE "jobs"."id" = "#))
        .count()
}

#[tokio::test(start_paused = true)]
async fn alerts_follow_the_final_end_and_a_clean_success_costs_nothing() {
    let mut flaky = job("flaky", "test.failing", "0 0 0 1 1 *");
    flaky.retry_count = 1;
    flaky.retry_interval_ms = 100;
    flaky.alert = qiwu_domain::alert::AlertPolicy {
        on_failure: true,
        on_recovery: true,
        ..Default::default()
    };
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[flaky.clone()],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let id = ids[0];
    let inbox = |h: &Harness| {
        let store = h.store.store.clone();
        async move {
            store
                .notifications()
                .list("super_admins", false, 10, None)
                .await
                .expect("inbox")
                .items
                .into_iter()
                .map(|n| n.title)
                .collect::<Vec<_>>()
        }
    };
    // Two attempts, one final failure: one alert, after the last attempt.
    h.run_once(id).await;
    h.until(id, Duration::from_secs(10), |runs| {
        runs.len() == 2 && runs.iter().all(|r| r.status == "failed")
    })
    .await;
    h.pass(Duration::from_millis(200)).await;
    assert_eq!(inbox(&h).await, ["任务失败：flaky"]);
    let state = h
        .store
        .jobs()
        .get(id)
        .await
        .expect("job")
        .expect("job")
        .alert_state;
    assert_eq!(state.failed_in_a_row, 1);
    assert!(state.alerted);

    // Fixed: the success is decided against the state and recovers.
    let current = h.store.jobs().get(id).await.expect("job").expect("job");
    let fixed = NewJob {
        handler: "test.stubborn".into(),
        ..flaky.clone()
    };
    h.store
        .jobs()
        .update(id, current.version, &fixed, "t", h.now())
        .await
        .expect("update");
    take_sql(&h);
    h.run_once(id).await;
    h.until(id, Duration::from_secs(10), |runs| {
        runs.last().is_some_and(|r| r.status == "success")
    })
    .await;
    h.pass(Duration::from_millis(200)).await;
    assert_eq!(alert_reads(&take_sql(&h)), 1);
    assert_eq!(inbox(&h).await, ["任务已恢复：flaky", "任务失败：flaky"]);
    assert!(
        h.store
            .jobs()
            .get(id)
            .await
            .expect("job")
            .expect("job")
            .alert_state
            .is_clear()
    );

    // The next success finds nothing to decide: no statement for alerts.
    h.run_once(id).await;
    h.until(id, Duration::from_secs(10), |runs| {
        runs.iter().filter(|r| r.status == "success").count() == 2
    })
    .await;
    h.pass(Duration::from_millis(200)).await;
    let sql = take_sql(&h);
    assert_eq!(alert_reads(&sql), 0, "{sql:#?}");
    assert_eq!(inbox(&h).await.len(), 2);
    h.shut_down().await;
}

/// `(first_at, scheduled_at, trigger)` of each of the job's records on its
/// schedule, in ms after `t0()`.
async fn records(store: &Store, job: i64) -> Vec<(i64, i64, String)> {
    use qiwu_storage::entity::fire;
    fire::Entity::find()
        .filter(fire::Column::JobId.eq(job))
        .filter(fire::Column::Lane.eq(0))
        .order_by_asc(fire::Column::ScheduledAt)
        .all(store.connection())
        .await
        .expect("fires")
        .into_iter()
        .map(|f| {
            (
                f.first_at.unwrap_or(f.scheduled_at) - ms(t0()),
                f.scheduled_at - ms(t0()),
                f.trigger,
            )
        })
        .collect()
}

/// The active window bounds catch-ups and timers alike, and the first fire
/// time of a window that opens later is claimed although the cron had
/// earlier times: the ledger's chain follows the schedule, not the bare
/// cron.
#[tokio::test(start_paused = true)]
async fn an_active_window_bounds_catch_ups_and_timers() {
    let second = chrono::Duration::seconds;
    let mut closing = job("closing", "test.stubborn", "* * * * * *");
    closing.time_rules.active_from = Some(t0() - second(3));
    closing.time_rules.active_until = Some(t0() + second(3));
    let mut opening = job("opening", "test.stubborn", "* * * * * *");
    opening.time_rules.active_from = Some(t0() + second(2));
    opening.time_rules.active_until = Some(t0() + second(4));
    let control = job("control", "test.stubborn", "* * * * * *");
    // Created 10 s before the engine starts.
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[closing, opening, control],
        second(10),
        None,
    )
    .await;
    h.until(ids[2], Duration::from_secs(20), |runs| {
        runs.iter().any(|r| r.scheduled_at >= ms(t0()) + 7000)
    })
    .await;
    let (store, _hold) = h.shut_down().await;
    let schedule = |at: i64| (at, at, "schedule".to_string());
    assert_eq!(
        records(&store, ids[0]).await,
        [
            (-3000, 0, "misfire".to_string()),
            schedule(1000),
            schedule(2000),
            schedule(3000),
        ]
    );
    assert_eq!(
        records(&store, ids[1]).await,
        [schedule(2000), schedule(3000), schedule(4000)]
    );
    // Without a window the same start catches up every second since the
    // job was created.
    assert_eq!(
        records(&store, ids[2]).await[0],
        (-9000, 0, "misfire".to_string())
    );
}

/// A calendar decides the days of the catch-ups too: in a zone where the
/// engine starts at midnight, the holiday that ends then is not caught up.
#[tokio::test(start_paused = true)]
async fn a_calendar_decides_the_days_catch_ups_cover() {
    use qiwu_domain::CalendarRule;
    // t0() is 10:00 UTC: midnight starting 1 December at UTC+14.
    let holiday = json!({"code": "closed", "name": "Closed", "dates": [
        {"date": "2026-11-30", "kind": "holiday", "name": "closed"},
    ]});
    let mut closed = job("closed", "test.stubborn", "* * * * * *");
    closed.timezone = Some("Etc/GMT-14".into());
    closed.time_rules.calendar = Some("closed".into());
    closed.time_rules.calendar_rule = Some(CalendarRule::Exclude);
    let mut open = closed.clone();
    open.name = "open".into();
    open.time_rules = Default::default();
    let (h, ids) = Harness::start_with(
        hold_clock().await,
        &[holiday],
        &[closed, open],
        chrono::Duration::seconds(10),
        None,
    )
    .await;
    h.until(ids[0], Duration::from_secs(10), |runs| {
        runs.iter().any(|r| r.scheduled_at >= ms(t0()) + 2000)
    })
    .await;
    let (store, _hold) = h.shut_down().await;
    let closed = records(&store, ids[0]).await;
    assert_eq!(closed[0], (0, 0, "misfire".to_string()), "{closed:#?}");
    assert_eq!(
        closed[1],
        (1000, 1000, "schedule".to_string()),
        "{closed:#?}"
    );
    let open = records(&store, ids[1]).await;
    assert_eq!(open[0], (-9000, 0, "misfire".to_string()), "{open:#?}");
}

/// `misfireGraceMs`: a `run_once` job whose last missed time is older than
/// its window records one skipped catch-up saying so; within the window
/// (or with none) it runs.
#[tokio::test(start_paused = true)]
async fn a_catch_up_older_than_its_grace_is_skipped() {
    let second = chrono::Duration::seconds;
    // Both missed every second from their creation to 5 s before the start
    // (their window closed then).
    let mut strict = NewJob {
        misfire_policy: "run_once".into(),
        ..job("strict", "test.stubborn", "* * * * * *")
    };
    strict.time_rules.active_until = Some(t0() - second(5));
    strict.time_rules.misfire_grace_ms = 2000;
    let mut lenient = strict.clone();
    lenient.name = "lenient".into();
    lenient.time_rules.misfire_grace_ms = 6000;
    let (h, ids) = Harness::start(hold_clock().await, &[strict, lenient], second(10), None).await;
    h.until(ids[1], Duration::from_secs(10), |runs| {
        runs.iter().any(|r| r.status == "success")
    })
    .await;
    let strict = runs(&h.store, ids[0]).await;
    assert_eq!(strict.len(), 1, "{strict:#?}");
    assert_eq!(
        (strict[0].trigger.as_str(), strict[0].status.as_str()),
        ("misfire", "skipped")
    );
    assert!(
        strict[0]
            .output
            .contains("older than the catch-up window of 2 seconds"),
        "{}",
        strict[0].output
    );
    assert!(
        strict[0].output.contains("超过补跑时限 2 秒"),
        "{}",
        strict[0].output
    );
    let lenient = runs(&h.store, ids[1]).await;
    assert_eq!(lenient.len(), 1, "{lenient:#?}");
    assert_eq!(lenient[0].trigger, "misfire");
    h.shut_down().await;
}

/// `maxRuns`: after its second successful scheduled fire the job disables
/// itself (audited as the system); run-once requests do not count, and no
/// fire time after the limit is recorded.
#[tokio::test(start_paused = true)]
async fn a_job_disables_itself_at_its_max_runs() {
    let mut limited = job("limited", "test.stubborn", "* * * * * *");
    limited.time_rules.max_runs = Some(2);
    let control = job("control", "test.stubborn", "* * * * * *");
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[limited, control],
        chrono::Duration::zero(),
        None,
    )
    .await;
    h.run_once(ids[0]).await;
    h.until(ids[1], Duration::from_secs(20), |runs| {
        runs.iter().filter(|r| r.status == "success").count() >= 7
    })
    .await;
    let (store, _hold) = h.shut_down().await;
    let limited = runs(&store, ids[0]).await;
    let scheduled: Vec<&run::Model> = limited.iter().filter(|r| r.trigger == "schedule").collect();
    assert_eq!(scheduled.len(), 2, "{limited:#?}");
    assert!(
        scheduled.iter().all(|r| r.status == "success"),
        "{limited:#?}"
    );
    assert_eq!(
        limited.iter().filter(|r| r.trigger == "manual").count(),
        1,
        "{limited:#?}"
    );
    let job = store.jobs().get(ids[0]).await.expect("read").expect("job");
    assert!(!job.enabled);
    assert_eq!(job.scheduled_successes, 2);
    assert_eq!(job.updated_by, texts::SYSTEM_ACTOR);
    let audits = store
        .audit()
        .list(&Default::default(), 10, None)
        .await
        .expect("audit")
        .0;
    assert_eq!(audits.len(), 1, "{audits:#?}");
    assert_eq!(audits[0].action, "job.disable");
    assert_eq!(audits[0].actor, "system");
    assert!(audits[0].summary.contains("2 次"), "{audits:#?}");
}

/// `jitterMs`: each fire starts at its nominal time plus the delay the
/// schedule derives from the job and the time; `scheduledAt` stays the
/// nominal time.
#[tokio::test(start_paused = true)]
async fn a_jittered_fire_starts_after_its_nominal_time_by_its_own_delay() {
    let mut jittered = job("jittered", "test.stubborn", "* * * * * *");
    jittered.time_rules.jitter_ms = 900;
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[jittered],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let runs = h
        .until(ids[0], Duration::from_secs(20), |runs| {
            runs.iter().filter(|r| r.status == "success").count() >= 6
        })
        .await;
    h.shut_down().await;
    let schedule = qiwu_domain::Schedule::new(
        qiwu_domain::CronExpr::parse("* * * * * *").expect("cron"),
        chrono_tz::UTC,
    )
    .with_jitter_ms(900)
    .expect("jitter");
    let mut delays = Vec::new();
    for run in runs.iter().filter(|r| r.trigger == "schedule") {
        assert_eq!(run.scheduled_at % 1000, 0, "nominal: {run:?}");
        let nominal = DateTime::from_timestamp_millis(run.scheduled_at).expect("time");
        let delay = schedule.jitter_delay_ms(ids[0], nominal);
        let waited = run.started_at - run.scheduled_at;
        // Started at its start time, to the test's step.
        assert!(
            (delay..=delay + 2 * STEP.as_millis() as i64).contains(&waited),
            "delay {delay} ms, started {waited} ms late: {run:?}"
        );
        delays.push(delay);
    }
    assert!(delays.len() >= 5, "{runs:#?}");
    assert!(
        delays.iter().any(|d| *d != delays[0]),
        "each time its own delay: {delays:?}"
    );
}

/// A pause with an end: nothing fires while paused, the job is enabled at
/// the end (by the system, audited once), and its first fire is the first
/// cron time after the end: no catch-up and no skip for the paused times.
#[tokio::test(start_paused = true)]
async fn a_paused_job_resumes_at_its_end_and_fires_from_there() {
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[job("paused", "test.stubborn", "* * * * * *")],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let id = ids[0];
    h.until(id, Duration::from_secs(20), |runs| {
        runs.iter().filter(|r| r.status == "success").count() >= 2
    })
    .await;
    let paused_at = h.now();
    let until = paused_at + chrono::Duration::milliseconds(4_300);
    let request = qiwu_domain::pause::PauseRequest {
        enabled: false,
        reason: Some("maintenance".into()),
        until: Some(until),
    };
    h.store
        .jobs()
        .pause(id, &request, None, "alice", paused_at)
        .await
        .expect("pause");
    h.handle.send(Command::JobChanged(id));
    let runs = h
        .until(id, Duration::from_secs(20), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at > ms(until) && r.status == "success")
        })
        .await;
    let (store, _hold) = h.shut_down().await;
    let until_ms = ms(until);
    let first_after = until_ms - until_ms.rem_euclid(1000) + 1000;
    let after: Vec<&run::Model> = runs
        .iter()
        .filter(|r| r.scheduled_at > ms(paused_at))
        .collect();
    assert_eq!(after[0].scheduled_at, first_after, "{runs:#?}");
    assert_eq!(after[0].trigger, "schedule", "{runs:#?}");
    assert!(
        runs.iter()
            .all(|r| r.trigger == "schedule" && r.status == "success"),
        "{runs:#?}"
    );
    let job = store.jobs().get(id).await.expect("read").expect("job");
    assert!(job.enabled);
    assert_eq!(job.updated_by, texts::SYSTEM_ACTOR);
    assert_eq!(job.pause, qiwu_storage::Pause::default());
    assert_eq!(job.schedule_from, until);
    let audits = store
        .audit()
        .list(&Default::default(), 10, None)
        .await
        .expect("audit")
        .0;
    assert_eq!(audits.len(), 1, "{audits:#?}");
    assert_eq!(audits[0].action, "job.enable");
    assert_eq!(audits[0].actor, "system");
    // Resumed at its end, not a tick later.
    let late = audits[0].at - until;
    assert!(
        late >= chrono::Duration::zero() && late < chrono::Duration::milliseconds(100),
        "resumed {late} after the end"
    );
}

/// A pause whose end passed while no engine ran: the engine resumes the job
/// when it starts, later than the end, and the times since the end are
/// missed like any downtime's (one `skipped` record by the misfire policy),
/// never left without a record; the schedule then goes on.
#[tokio::test(start_paused = true)]
async fn a_pause_that_ended_while_down_records_the_times_since_its_end() {
    let hold = hold_clock().await;
    let store = test_store().await;
    let created = t0() - chrono::Duration::seconds(20);
    let id = store
        .jobs()
        .create(&job("paused", "test.stubborn", "* * * * * *"), "t", created)
        .await
        .expect("job")
        .id;
    let until = t0() - chrono::Duration::milliseconds(4_300);
    let request = qiwu_domain::pause::PauseRequest {
        enabled: false,
        reason: Some("maintenance".into()),
        until: Some(until),
    };
    store
        .jobs()
        .pause(id, &request, None, "alice", created)
        .await
        .expect("pause");
    let h = Harness::start_on(hold, store, None);
    let runs = h
        .until(id, Duration::from_secs(10), |runs| {
            runs.iter()
                .filter(|r| r.trigger == "schedule" && r.status == "success")
                .count()
                >= 2
        })
        .await;
    let (store, _hold) = h.shut_down().await;
    let job = store.jobs().get(id).await.expect("read").expect("job");
    assert_eq!(job.schedule_from, until);
    // The first time past the end is second -4 from t0: from there every
    // second has one record, and they form one chain from the end. The
    // first is a catch-up, skipped as missed.
    let first = &runs[0];
    assert_eq!(
        (first.trigger.as_str(), first.status.as_str()),
        ("misfire", "skipped"),
        "{runs:#?}"
    );
    let rows: Vec<(Option<i64>, Option<i64>, i64)> = qiwu_storage::entity::fire::Entity::find()
        .filter(qiwu_storage::entity::fire::Column::JobId.eq(id))
        .order_by_asc(qiwu_storage::entity::fire::Column::ScheduledAt)
        .all(store.connection())
        .await
        .expect("fires")
        .into_iter()
        .map(|f| (f.prev_at, f.first_at, f.scheduled_at))
        .collect();
    let mut expected_prev = ms(until);
    let mut expected_first = ms(t0()) - 4_000;
    for row in &rows {
        assert_eq!(
            (row.0, row.1),
            (Some(expected_prev), Some(expected_first)),
            "{rows:#?}"
        );
        expected_prev = row.2;
        expected_first = row.2 + 1000;
    }
    // Seconds -1 and 0, due at the start, are claimed late in one batch
    // (the second one skipped as overlapping the first); then every
    // second runs on time.
    assert!(
        runs[1..]
            .iter()
            .all(|r| r.trigger == "schedule"
                && (r.status == "success" || r.scheduled_at <= ms(t0()))),
        "{runs:#?}"
    );
}

/// A change no message announced reaches the engine at its next
/// reconciliation, which reads the changed jobs a page at a time: a job
/// on the second page is re-armed like one on the first.
#[tokio::test(start_paused = true)]
async fn the_reconciliation_reads_changed_jobs_page_by_page() {
    const JOBS: usize = 1_050;
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| job(&format!("yearly {i}"), "test.stubborn", "0 0 0 1 1 *"))
        .collect();
    let (h, ids) =
        Harness::start(hold_clock().await, &jobs, chrono::Duration::hours(1), None).await;
    h.settle(PATIENCE).await;
    // Every job now fires every second, from just before the
    // reconciliation on; the engine is not told.
    let from = ms(t0()) + 59_500;
    h.sql(&format!(
        "UPDATE jobs SET cron = '* * * * * *', schedule_from = {from}, updated_at = {from}, version = version + 1"
    ))
    .await;
    tokio::time::advance(Duration::from_secs(60)).await;
    h.settle(PATIENCE).await;
    for id in [ids[0], ids[JOBS - 1]] {
        let runs = h
            .until(id, Duration::from_secs(5), |runs| {
                runs.iter().any(|r| r.trigger == "schedule")
            })
            .await;
        assert!(runs[0].scheduled_at > from, "job {id}: {runs:#?}");
    }
    h.shut_down().await;
}

/// A stop while the claimer has a backlog (every job's start-up catch-up,
/// claimed a batch at a time): the claimer looks at the stop before each
/// round, not only when idle, so the backlog is cut short and nothing is
/// claimed once the engine has returned (a fire claimed after the stop
/// stopped waiting would run under a run the shutdown already closed).
#[tokio::test(start_paused = true)]
async fn a_stop_cuts_a_claim_backlog_short() {
    const JOBS: usize = 1_200;
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| job(&format!("late {i}"), "test.stubborn", "* * * * * *"))
        .collect();
    let (h, _ids) =
        Harness::start(hold_clock().await, &jobs, chrono::Duration::hours(1), None).await;
    let fires = async |store: &Store| {
        qiwu_storage::entity::fire::Entity::find()
            .count(store.connection())
            .await
            .expect("count")
    };
    // The first batch of catch-ups, in real time: the engine needs no
    // clock step to claim what it queued at its start.
    let began = std::time::Instant::now();
    while fires(&h.store).await == 0 {
        assert!(began.elapsed() < PATIENCE * 6, "no catch-up was claimed");
        let _ = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await;
    }
    let _ = h.stop.send(true);
    let (store, _hold) = h.shut_down().await;
    let at_stop = fires(&store).await;
    assert!(
        at_stop < JOBS as u64,
        "every catch-up was claimed after the stop: {at_stop}"
    );
    // Real time for a claimer that would still be running.
    for _ in 0..20 {
        let _ = tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await;
    }
    assert_eq!(
        fires(&store).await,
        at_stop,
        "claimed after the engine returned"
    );
}

/// A schedule change inside a freeze window: the window's record covers
/// the old schedule's times up to the window's last one, past the new
/// schedule's last frozen time. The new schedule's first time after the
/// window follows that record (the chain's tip) instead of asking for a
/// predecessor that nothing will ever record.
#[tokio::test(start_paused = true)]
async fn a_schedule_changed_inside_a_freeze_goes_on_after_it() {
    use qiwu_domain::freeze::{FreezeScope, FreezeSpec};
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[job("frozen", "test.stubborn", "* * * * * *")],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let id = ids[0];
    let (from, to) = (
        t0() + chrono::Duration::seconds(3),
        t0() + chrono::Duration::seconds(8),
    );
    h.store
        .freezes()
        .create(
            &FreezeSpec {
                from,
                to,
                scope: FreezeScope::JobIds(vec![id]),
                reason: "release".into(),
            },
            "t",
            t0(),
        )
        .await
        .expect("freeze");
    h.handle.send(Command::FreezesChanged);
    // The window's record (seconds 3 to 7) is written at its first time.
    h.until(id, Duration::from_secs(5), |runs| {
        runs.iter().any(|r| r.output.contains("freeze #"))
    })
    .await;
    h.pass(Duration::from_millis(1_500)).await;
    // Every two seconds from now (4.5 s): 6 is frozen, 8 is the first
    // time after the window.
    let current = h.store.jobs().get(id).await.expect("read").expect("job");
    let mut every_two = job("frozen", "test.stubborn", "*/2 * * * * *");
    every_two.enabled = true;
    h.store
        .jobs()
        .update(id, current.version, &every_two, "t", h.now())
        .await
        .expect("edit");
    h.handle.send(Command::JobChanged(id));
    let runs = h
        .until(id, Duration::from_secs(10), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at >= ms(to) && r.status == "success")
        })
        .await;
    let first_after = runs
        .iter()
        .find(|r| r.scheduled_at >= ms(to))
        .expect("a record after the window");
    assert_eq!(first_after.scheduled_at, ms(to), "{runs:#?}");
    assert_eq!(first_after.trigger, "schedule", "{runs:#?}");
    h.shut_down().await;
}

#[tokio::test(start_paused = true)]
async fn a_freeze_skips_its_times_once_and_run_once_catches_up_at_its_end() {
    use qiwu_domain::freeze::{FreezeScope, FreezeSpec};
    let jobs = [
        job("skip", "test.stubborn", "* * * * * *"),
        NewJob {
            misfire_policy: "run_once".into(),
            allow_concurrent: true,
            overlap_policy: "allow".into(),
            ..job("catch up", "test.stubborn", "* * * * * *")
        },
        job("outside", "test.stubborn", "* * * * * *"),
    ];
    let (h, ids) = Harness::start(hold_clock().await, &jobs, chrono::Duration::zero(), None).await;
    // Declared after the start: the engine learns of it by the change
    // command and sleeps until its end, polling nothing.
    let (from, to) = (
        t0() + chrono::Duration::seconds(3),
        t0() + chrono::Duration::seconds(6),
    );
    let freeze = h
        .store
        .freezes()
        .create(
            &FreezeSpec {
                from,
                to,
                scope: FreezeScope::JobIds(vec![ids[0], ids[1]]),
                reason: "release".into(),
            },
            "t",
            t0(),
        )
        .await
        .expect("freeze");
    h.handle.send(Command::FreezesChanged);
    let after = ms(to) + 2000;
    for id in &ids {
        h.until(*id, Duration::from_secs(15), |runs| {
            runs.iter().any(|r| {
                r.trigger == "schedule" && r.scheduled_at >= after && r.status != "running"
            })
        })
        .await;
    }
    let marker = format!("freeze #{}", freeze.id);
    for id in &ids[..2] {
        let runs = runs(&h.store, *id).await;
        let frozen: Vec<_> = runs.iter().filter(|r| r.output.contains(&marker)).collect();
        assert_eq!(frozen.len(), 1, "{runs:#?}");
        assert_eq!(frozen[0].status, "skipped");
        assert!(
            frozen[0].output.contains("Skipped 3 fire time"),
            "{:?}",
            frozen[0]
        );
        assert!(
            !runs.iter().any(|r| r.status == "success"
                && r.trigger == "schedule"
                && (ms(from)..ms(to)).contains(&r.scheduled_at)),
            "nothing ran inside the window: {runs:#?}"
        );
    }
    let skip = runs(&h.store, ids[0]).await;
    assert!(!skip.iter().any(|r| r.trigger == "misfire"), "{skip:#?}");
    let caught = h
        .until(ids[1], Duration::from_secs(5), |runs| {
            runs.iter()
                .any(|r| r.trigger == "misfire" && r.status == "success")
        })
        .await;
    let misfires: Vec<_> = caught.iter().filter(|r| r.trigger == "misfire").collect();
    assert_eq!(misfires.len(), 1, "{caught:#?}");
    assert_eq!(misfires[0].scheduled_at, ms(to));
    let outside = runs(&h.store, ids[2]).await;
    assert!(
        outside
            .iter()
            .filter(|r| (ms(from)..ms(to)).contains(&r.scheduled_at) && r.status == "success")
            .count()
            == 3,
        "{outside:#?}"
    );
    h.shut_down().await;
}

/// The runs of `job` scheduled at `at`, and how many ledger records
/// cover that time.
async fn at_time(store: &Store, job: i64, at: i64) -> (Vec<run::Model>, usize) {
    let runs: Vec<run::Model> = runs(store, job)
        .await
        .into_iter()
        .filter(|r| r.scheduled_at == at)
        .collect();
    let records = store
        .connection()
        .query_all_raw(Statement::from_string(
            store.connection().get_database_backend(),
            format!("SELECT id FROM fires WHERE job_id = {job} AND scheduled_at = {at}"),
        ))
        .await
        .expect("fires")
        .len();
    (runs, records)
}

/// The fire claimed ahead of the job's next time, once there is one: its
/// run shows `running` with its start still to come.
async fn claimed_ahead(h: &Harness, job: i64) -> run::Model {
    let runs = h
        .until(job, Duration::from_secs(5), |runs| {
            runs.iter()
                .any(|r| r.status == "running" && !started(r, h.now()))
        })
        .await;
    runs.into_iter()
        .find(|r| r.status == "running" && !started(r, h.now()))
        .expect("a fire claimed ahead")
}

/// A fire is claimed `QIWU_CLAIM_AHEAD_MS` before its time, shows its
/// planned start meanwhile, and starts at its time; the run's start as
/// written is when it really started.
#[tokio::test(start_paused = true)]
async fn a_fire_claimed_ahead_starts_at_its_time() {
    let (h, ids) = Harness::start(
        hold_clock().await,
        &[job("ahead", "test.stubborn", "* * * * * *")],
        chrono::Duration::zero(),
        None,
    )
    .await;
    let job = ids[0];
    let waiting = claimed_ahead(&h, job).await;
    let at = waiting.scheduled_at;
    assert_eq!(waiting.started_at, at, "{waiting:?}");
    // Claimed within a step of half a second before its time.
    let early = at - ms(h.now());
    assert!(
        (500 - STEP.as_millis() as i64..=500).contains(&early),
        "claimed {early} ms ahead"
    );
    let runs = h
        .until(job, Duration::from_secs(2), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at == at && r.status == "success")
        })
        .await;
    let ran = runs.iter().find(|r| r.scheduled_at == at).expect("the run");
    let lag = ran.started_at - at;
    assert!(
        (0..=STEP.as_millis() as i64).contains(&lag),
        "started {lag} ms late: {ran:?}"
    );
    assert!(ran.finished_at.unwrap_or(0) >= ran.started_at, "{ran:?}");
    h.shut_down().await;
}

/// A job edited between the claim of its next fire and that fire's time
/// runs the fire as edited (the claim is taken back and made again), and
/// a job disabled in between does not run it: no record for that time.
#[tokio::test(start_paused = true)]
async fn a_change_before_the_time_of_a_fire_claimed_ahead_is_honoured() {
    let spec = job("edited", "test.stubborn", "* * * * * *");
    let (h, ids) = Harness::start(
        hold_clock().await,
        std::slice::from_ref(&spec),
        chrono::Duration::zero(),
        None,
    )
    .await;
    let id = ids[0];
    let waiting = claimed_ahead(&h, id).await;
    let at = waiting.scheduled_at;
    // The params change (no schedule change): the fire runs with them.
    let mut edited = spec.clone();
    edited.params = json!({"ms": 300});
    let current = h.store.jobs().get(id).await.expect("read").expect("job");
    h.store
        .jobs()
        .update(id, current.version, &edited, "alice", h.now())
        .await
        .expect("update");
    h.handle.send(Command::JobChanged(id));
    let runs = h
        .until(id, Duration::from_secs(3), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at == at && r.status == "success")
        })
        .await;
    let (at_runs, records) = at_time(&h.store, id, at).await;
    assert_eq!((at_runs.len(), records), (1, 1), "{runs:#?}");
    let ran = &at_runs[0];
    assert!(
        ran.duration_ms.unwrap_or(0) >= 300,
        "ran as edited: {ran:?}"
    );
    assert_ne!(ran.id, waiting.id, "claimed again: {ran:?}");
    assert!(
        (0..=STEP.as_millis() as i64).contains(&(ran.started_at - at)),
        "{ran:?}"
    );

    // Disabled before the time of a fire claimed ahead: it never runs.
    let waiting = claimed_ahead(&h, id).await;
    let at = waiting.scheduled_at;
    h.store
        .jobs()
        .set_enabled(id, false, None, "alice", h.now())
        .await
        .expect("disable");
    h.handle.send(Command::JobChanged(id));
    h.pass(Duration::from_millis(1500)).await;
    let (at_runs, records) = at_time(&h.store, id, at).await;
    assert_eq!((at_runs.len(), records), (0, 0), "{at_runs:#?}");
    let later = runs_after(&h.store, id, at).await;
    assert!(later.is_empty(), "{later:#?}");
    h.shut_down().await;
}

async fn runs_after(store: &Store, job: i64, at: i64) -> Vec<run::Model> {
    runs(store, job)
        .await
        .into_iter()
        .filter(|r| r.scheduled_at >= at)
        .collect()
}

/// A cancel of a fire claimed ahead ends it before it starts: recorded
/// `cancelled`, the handler never called; a shutdown before its time takes
/// the claim back, leaving the time to whoever runs next.
#[tokio::test(start_paused = true)]
async fn a_fire_claimed_ahead_is_cancelled_or_taken_back_before_it_starts() {
    let mut spec = job("waiting", "test.stubborn", "* * * * * *");
    spec.params = json!({"ms": 5000});
    spec.allow_concurrent = true;
    let (h, ids) =
        Harness::start(hold_clock().await, &[spec], chrono::Duration::zero(), None).await;
    let id = ids[0];
    let waiting = claimed_ahead(&h, id).await;
    let asked = h.now();
    h.store
        .runs()
        .request_cancel(waiting.id, "alice", asked)
        .await
        .expect("request");
    h.handle.send(Command::CancelRequested(waiting.id));
    let runs = h
        .until(id, Duration::from_secs(1), |runs| {
            runs.iter()
                .any(|r| r.id == waiting.id && r.status != "running")
        })
        .await;
    let cancelled = runs.iter().find(|r| r.id == waiting.id).expect("the run");
    assert_eq!(cancelled.status, "cancelled", "{cancelled:?}");
    assert!(
        cancelled.error.contains("Cancelled by alice"),
        "{cancelled:?}"
    );
    assert!(
        cancelled.finished_at.unwrap_or(i64::MAX) < cancelled.scheduled_at,
        "ended before its time: {cancelled:?}"
    );
    assert_eq!(cancelled.duration_ms, Some(0), "{cancelled:?}");

    let waiting = claimed_ahead(&h, id).await;
    let (store, _hold) = h.shut_down().await;
    let (at_runs, records) = at_time(&store, id, waiting.scheduled_at).await;
    assert_eq!((at_runs.len(), records), (0, 0), "taken back: {at_runs:#?}");
}

/// An every-second non-concurrent job in a cluster of one on a Redis of
/// the test's own (kept alive with the answer).
async fn serial_job_in_a_cluster() -> (Harness, i64, RedisServer, qiwu_coord::Coord) {
    let hold = hold_clock().await;
    let redis = RedisServer::start();
    let coord = qiwu_coord::Coord::connect(&redis.url())
        .await
        .expect("redis");
    let spec = job("serial", "test.stubborn", "* * * * * *");
    let (h, ids) = Harness::start(
        hold,
        &[spec],
        chrono::Duration::zero(),
        Some(ClusterConfig::new(coord.clone())),
    )
    .await;
    (h, ids[0], redis, coord)
}

/// In a cluster, a fire claimed ahead while another instance's run of its
/// non-concurrent job is `running` asks the ledger again at its time: it is
/// skipped while that run goes on (even with the job lock free, as after
/// a Redis restart), and the job runs again once that run has ended.
#[tokio::test(start_paused = true)]
async fn a_fire_claimed_ahead_skips_while_a_run_elsewhere_goes_on() {
    let (h, id, _redis, _coord) = serial_job_in_a_cluster().await;
    let first = h
        .until(id, Duration::from_secs(5), |runs| {
            runs.iter().any(|r| r.status == "success")
        })
        .await
        .into_iter()
        .find(|r| r.status == "success")
        .expect("a first run");
    // Another instance runs the job now, holding no lock here.
    let elsewhere = h
        .store
        .fires()
        .start_run(
            first.fire_id,
            &qiwu_storage::RunStart {
                job_id: id,
                job_name: "serial",
                handler: "test.stubborn",
                trigger: qiwu_storage::Trigger::Schedule,
                scheduled_at: DateTime::from_timestamp_millis(first.scheduled_at).expect("time"),
                attempt: 2,
                instance: "test-2",
                started_at: h.now(),
            },
        )
        .await
        .expect("a run elsewhere");
    let from = ms(h.now());
    let runs = h
        .until(id, Duration::from_secs(5), |runs| {
            runs.iter()
                .filter(|r| r.scheduled_at > from + 500 && r.status != "running")
                .count()
                >= 2
        })
        .await;
    let decided: Vec<_> = runs
        .iter()
        .filter(|r| r.scheduled_at > from + 500 && r.status != "running")
        .collect();
    for run in &decided {
        assert_eq!(run.status, "skipped", "{decided:#?}");
        assert_eq!(run.output, texts::SKIP_ELSEWHERE, "{run:?}");
    }
    // That run ends: the job runs again.
    h.sql(&format!(
        "UPDATE runs SET status = 'failed', finished_at = {} WHERE id = {elsewhere}",
        ms(h.now())
    ))
    .await;
    let ended = ms(h.now());
    h.until(id, Duration::from_secs(3), |runs| {
        runs.iter()
            .any(|r| r.scheduled_at > ended + 500 && r.status == "success")
    })
    .await;
    h.shut_down().await;
}

/// In a cluster, a fire claimed ahead takes its job's lock while it waits,
/// when the lock is free then (its time then only has to start it); when
/// another instance holds the lock at the claim, the fire leaves it alone
/// and takes it at its time, once freed.
#[tokio::test(start_paused = true)]
async fn a_fire_claimed_ahead_takes_its_free_lock_while_it_waits() {
    let (h, id, redis, coord) = serial_job_in_a_cluster().await;
    let key = format!("qiwu:lock:job:{id}");
    let waiting = claimed_ahead(&h, id).await;
    let at = waiting.scheduled_at;
    h.step().await;
    assert!(ms(h.now()) < at, "still before its time");
    let holder = redis.cli(&["GET", &key]);
    assert!(holder.starts_with("test-1#"), "held ahead: {holder:?}");
    let runs = h
        .until(id, Duration::from_secs(2), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at == at && r.status == "success")
        })
        .await;
    let ran = runs.iter().find(|r| r.scheduled_at == at).expect("the run");
    assert!(
        (0..=STEP.as_millis() as i64).contains(&(ran.started_at - at)),
        "{ran:?}"
    );

    // Another instance takes the lock once that run has released it, and
    // holds it across the next claim.
    let mut other = None;
    for _ in 0..20 {
        other = coord
            .try_lock(id, "test-2", Duration::from_secs(30))
            .await
            .expect("redis");
        if other.is_some() {
            break;
        }
        h.step().await;
    }
    let other = other.expect("the lock freed after the run");
    let waiting = claimed_ahead(&h, id).await;
    let next = waiting.scheduled_at;
    h.step().await;
    assert!(ms(h.now()) < next, "still before its time");
    let holder = redis.cli(&["GET", &key]);
    assert!(holder.starts_with("test-2#"), "left alone: {holder:?}");
    coord.release(&other).await.expect("release");
    let runs = h
        .until(id, Duration::from_secs(2), |runs| {
            runs.iter()
                .any(|r| r.scheduled_at == next && r.status != "running")
        })
        .await;
    let ran = runs
        .iter()
        .find(|r| r.scheduled_at == next)
        .expect("the run");
    assert_eq!(ran.status, "success", "taken at its time: {ran:?}");
    h.shut_down().await;
}

/// A job lock this process gives back passes to the job's next fire here
/// even before the release lands, and only from its last holder: the late
/// release of the old lock leaves the new one alone, another instance
/// cannot take it meanwhile, and a lock another instance took in between
/// is not taken over.
#[tokio::test]
async fn a_lock_given_back_passes_to_the_jobs_next_fire_here() {
    use crate::lease::{LockLease, Locks};
    let redis = RedisServer::start();
    let coord = qiwu_coord::Coord::connect(&redis.url())
        .await
        .expect("redis");
    let ttl = Duration::from_secs(30);
    let key = "qiwu:lock:job:7";
    let held = |lock: &qiwu_coord::JobLock| format!("test-1#{}", lock.token);

    let first = coord.try_lock(7, "test-1", ttl).await.expect("redis");
    let first = first.expect("a free lock");
    let next = coord
        .try_lock_after(7, "test-1", ttl, Some(&first))
        .await
        .expect("redis")
        .expect("taken over while the fire before still holds it");
    assert!(next.token > first.token, "a new fencing token");
    coord.release(&first).await.expect("the late release");
    assert_eq!(redis.cli(&["GET", key]).trim(), held(&next));
    let other = coord.try_lock(7, "test-2", ttl).await.expect("redis");
    assert!(other.is_none(), "never free in between");

    coord.release(&next).await.expect("release");
    let other = coord.try_lock(7, "test-2", ttl).await.expect("redis");
    let other = other.expect("free once released");
    let stale = coord
        .try_lock_after(7, "test-1", ttl, Some(&next))
        .await
        .expect("redis");
    assert!(stale.is_none(), "another instance's lock is not taken over");
    coord.release(&other).await.expect("release");

    // Through the leases: the job's next fire takes the lock a dropped
    // lease gives back at once, whichever of the release and the take
    // lands first (without the handover, a take before the release would
    // find it held).
    let locks = Locks::start(coord.clone(), ttl);
    for _ in 0..20 {
        let lease = LockLease::try_acquire(&locks, 7, "test-1")
            .await
            .expect("redis")
            .expect("the lock");
        drop(lease);
        let lease = LockLease::try_acquire(&locks, 7, "test-1")
            .await
            .expect("redis")
            .expect("handed over or freed");
        let value = format!("test-1#{}", lease.token());
        assert_eq!(redis.cli(&["GET", key]).trim(), value);
        drop(lease);
        for _ in 0..100 {
            if redis.cli(&["EXISTS", key]).trim() == "0" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Held locks are renewed from one task, those falling due together in one
/// round trip: each outlives its TTL while held, a lock someone else took
/// counts as lost within a third of the TTL (and only that one), and
/// locks given back are released in one batch, flushed on demand.
#[tokio::test]
async fn held_locks_are_renewed_together_and_given_back_in_a_batch() {
    use crate::lease::{LockLease, Locks};
    let redis = RedisServer::start();
    let coord = qiwu_coord::Coord::connect(&redis.url())
        .await
        .expect("redis");
    let ttl = Duration::from_millis(900);
    let locks = Locks::start(coord.clone(), ttl);
    let mut leases = Vec::new();
    for job in 1..=3 {
        let lease = LockLease::try_acquire(&locks, job, "test-1")
            .await
            .expect("redis")
            .expect("a free lock");
        leases.push(lease);
    }
    let key = |job: i64| format!("qiwu:lock:job:{job}");
    // Two TTLs later every lock is still there: renewed.
    tokio::time::sleep(ttl * 2).await;
    for (i, lease) in leases.iter().enumerate() {
        let job = i as i64 + 1;
        assert_eq!(
            redis.cli(&["GET", &key(job)]).trim(),
            format!("test-1#{}", lease.token()),
            "job {job}"
        );
        assert!(!lease.is_lost());
    }
    // Someone else holds job 2's now: its next renewal fails.
    redis.cli(&["SET", &key(2), "intruder#0", "PX", "60000"]);
    tokio::time::timeout(ttl, leases[1].lost())
        .await
        .expect("the loss is seen within the TTL");
    assert!(!leases[0].is_lost() && !leases[2].is_lost());
    // Given back: the lost one is left to the intruder.
    let mut lost = leases.remove(1);
    lost.keep_until_expiry();
    drop(lost);
    drop(leases);
    locks.flush(Duration::from_secs(5)).await;
    assert_eq!(redis.cli(&["EXISTS", &key(1)]).trim(), "0");
    assert_eq!(redis.cli(&["EXISTS", &key(3)]).trim(), "0");
    assert_eq!(redis.cli(&["GET", &key(2)]).trim(), "intruder#0");
}
