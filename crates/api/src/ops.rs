//! Operations endpoints shared by every role: `/metrics` in the OpenMetrics
//! text format, and the health and readiness probes of `worker` processes
//! (which serve nothing else).
//!
//! A scrape returns what the process counted (`qiwu_telemetry::metrics`)
//! plus values read at the scrape: the database pool, Redis, and, in the
//! processes that serve the API (`serve`, `api`), what only the database
//! knows cluster-wide: each enabled job's last success and last run status,
//! the run-once and webhook backlogs, stuck runs. Workers leave those out,
//! so the per-job series are not repeated once per worker; the database
//! reads are cached for [`DB_SCRAPE_TTL`] so several scrapers cost one read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use qiwu_coord::Coord;
use qiwu_storage::{JobHealth, Store};

/// Why the execution engine is not running (`None` while it runs).
pub type EngineReadiness = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// How long a scrape's database reads are reused.
pub const DB_SCRAPE_TTL: Duration = Duration::from_secs(5);
/// How long a probe or a scrape waits for the database or Redis.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// A run still `running` this long past its job's timeout is stuck.
const OVERDUE_GRACE: chrono::Duration = chrono::Duration::seconds(60);

/// What the operations endpoints read.
#[derive(Clone)]
pub struct Ops {
    pub store: Store,
    pub coord: Option<Coord>,
    /// This clock minus the database's, in ms, when a worker measures it.
    pub skew_ms: Option<Arc<AtomicI64>>,
    /// Readiness fails beyond this skew.
    pub max_skew_ms: i64,
    pub role: &'static str,
    /// The engine's state, in processes that run one.
    pub engine: Option<EngineReadiness>,
    /// Export the per-job and backlog series read from the database (the
    /// processes that serve the API).
    pub database_series: bool,
    cache: Arc<Mutex<Cache>>,
}

impl Ops {
    pub fn new(store: Store, role: &'static str) -> Ops {
        Ops {
            store,
            coord: None,
            skew_ms: None,
            max_skew_ms: 0,
            role,
            engine: None,
            database_series: false,
            cache: Arc::default(),
        }
    }
}

/// The last database reads, and each cron's shortest period (an
/// expensive computation, done once per expression).
#[derive(Default)]
struct Cache {
    read: Option<(Instant, Arc<DbSnapshot>)>,
    periods: HashMap<String, i64>,
}

/// What a scrape reads from the database.
struct DbSnapshot {
    jobs: Vec<(JobHealth, i64)>,
    pending_run_once: i64,
    outbox: (i64, Option<DateTime<Utc>>),
    overdue: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job_id: String,
    job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// `qiwu_job_last_run_status`: the latest run's status as a number.
fn status_code(status: Option<&str>) -> i64 {
    match status {
        None => 0,
        Some("success") => 1,
        Some("failed") => 2,
        Some("timeout") => 3,
        Some("skipped") => 4,
        Some("running") => 5,
        Some("cancelled") => 6,
        Some(_) => -1,
    }
}

async fn read_database(ops: &Ops) -> Result<Arc<DbSnapshot>, qiwu_storage::StorageError> {
    if let Ok(cache) = ops.cache.lock()
        && let Some((at, snapshot)) = &cache.read
        && at.elapsed() < DB_SCRAPE_TTL
    {
        return Ok(Arc::clone(snapshot));
    }
    let monitor = ops.store.monitor();
    let jobs = monitor.job_health().await?;
    let pending_run_once = monitor.pending_run_once().await?;
    let outbox = monitor.outbox_backlog().await?;
    let overdue = monitor.overdue_runs(Utc::now(), OVERDUE_GRACE).await?;
    let mut cache = ops
        .cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let jobs = jobs
        .into_iter()
        .map(|job| {
            let period = *cache.periods.entry(job.cron.clone()).or_insert_with(|| {
                qiwu_domain::CronExpr::parse(&job.cron).map_or(0, |c| c.shortest_period_secs())
            });
            (job, period)
        })
        .collect();
    let snapshot = Arc::new(DbSnapshot {
        jobs,
        pending_run_once,
        outbox,
        overdue,
    });
    cache.read = Some((Instant::now(), Arc::clone(&snapshot)));
    Ok(snapshot)
}

fn gauge(value: i64) -> Gauge {
    let g = Gauge::default();
    g.set(value);
    g
}

fn seconds(value: f64) -> Gauge<f64, AtomicU64> {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(value);
    g
}

fn counter(value: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(value);
    c
}

fn register_database(r: &mut Registry, db: &DbSnapshot, now: DateTime<Utc>) {
    let last_success: Family<JobLabels, Gauge<f64, AtomicU64>> = Family::default();
    let last_status: Family<JobLabels, Gauge> = Family::default();
    let period: Family<JobLabels, Gauge> = Family::default();
    for (job, secs) in &db.jobs {
        let labels = JobLabels {
            job_id: job.id.to_string(),
            job: job.name.clone(),
        };
        let since = job
            .last_success
            .map_or(job.schedule_from, |s| s.max(job.schedule_from));
        last_success
            .get_or_create(&labels)
            .set(since.timestamp_millis() as f64 / 1000.0);
        last_status
            .get_or_create(&labels)
            .set(status_code(job.last_status.as_deref()));
        period.get_or_create(&labels).set(*secs);
    }
    r.register(
        "job_last_success_timestamp_seconds",
        "Per enabled job: Unix time of its last successful run's end, or of the start of its current schedule when that is later (so a new or re-enabled job is not overdue at once)",
        last_success,
    );
    r.register(
        "job_last_run_status",
        "Per enabled job: its latest run's status: 0 never ran, 1 success, 2 failed, 3 timeout, 4 skipped, 5 running, 6 cancelled",
        last_status,
    );
    r.register_with_unit(
        "job_period",
        "Per enabled job: the shortest time between two of its fire times",
        Unit::Seconds,
        period,
    );
    r.register(
        "pending_run_once",
        "Run-once requests waiting for a worker (cluster-wide)",
        gauge(db.pending_run_once),
    );
    r.register(
        "outbox_backlog",
        "Webhook deliveries not yet delivered or given up (pending or sending)",
        gauge(db.outbox.0),
    );
    let oldest = db
        .outbox
        .1
        .map_or(0.0, |t| (now - t).num_milliseconds().max(0) as f64 / 1000.0);
    r.register_with_unit(
        "outbox_oldest_age",
        "Age of the oldest webhook delivery not yet done (0 when there is none)",
        Unit::Seconds,
        seconds(oldest),
    );
    r.register(
        "runs_overdue",
        "Runs still running more than 60 s past their job's timeout (stuck)",
        gauge(db.overdue),
    );
}

async fn bounded<T, E: std::fmt::Display>(
    check: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", CHECK_TIMEOUT.as_secs())),
    }
}

async fn render(ops: &Ops) -> Result<String, std::fmt::Error> {
    let database_up = bounded(ops.store.ping()).await.is_ok();
    let redis_up = match &ops.coord {
        Some(coord) => Some(bounded(coord.ping()).await.is_ok()),
        None => None,
    };
    let db = if ops.database_series && database_up {
        match read_database(ops).await {
            Ok(db) => Some(db),
            Err(e) => {
                tracing::warn!(error = %e, "metrics: cannot read the per-job series");
                None
            }
        }
    } else {
        None
    };
    let engine_running = ops.engine.as_ref().map(|engine| engine().is_none());
    let pool = ops.store.pool_stats();
    let now = Utc::now();
    qiwu_telemetry::metrics().encode(now.timestamp_millis(), |r| {
        r.register("up", "1 while the process serves", gauge(1));
        if let Some(running) = engine_running {
            r.register(
                "engine_running",
                "1 while this process's execution engine runs (0: starting, waiting for the database or its schema, or stopping)",
                gauge(i64::from(running)),
            );
        }
        r.register(
            "database_up",
            "1 when the database answered a ping at this scrape",
            gauge(i64::from(database_up)),
        );
        let connections: Family<StateLabel, Gauge> = Family::default();
        let in_use = pool.size.saturating_sub(pool.idle);
        connections
            .get_or_create(&StateLabel { state: "idle" })
            .set(i64::from(pool.idle));
        connections
            .get_or_create(&StateLabel { state: "in_use" })
            .set(i64::from(in_use));
        r.register(
            "db_pool_connections",
            "Open database connections of this process, by state (idle, in_use)",
            connections,
        );
        r.register(
            "db_pool_max_connections",
            "The most database connections this process opens",
            gauge(i64::from(pool.max)),
        );
        r.register(
            "db_pool_acquire_timeouts",
            "Database operations that waited for a pooled connection until they gave up",
            counter(qiwu_storage::stats::db_acquire_timeouts()),
        );
        if let Some(up) = redis_up {
            r.register(
                "redis_up",
                "1 when Redis answered a ping at this scrape",
                gauge(i64::from(up)),
            );
            r.register(
                "redis_command_errors",
                "Redis commands (and connection checkouts) that failed or timed out",
                counter(qiwu_coord::stats::redis_command_errors()),
            );
        }
        if let Some(db) = &db {
            register_database(r, db, now);
        }
    })
}

/// `GET /metrics`.
pub async fn metrics(ops: web::Data<Ops>) -> HttpResponse {
    match render(&ops).await {
        Ok(text) => HttpResponse::Ok()
            .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
            .body(text),
        Err(e) => {
            tracing::error!(error = %e, "cannot render metrics");
            HttpResponse::InternalServerError().finish()
        }
    }
}

/// `GET /readyz` of a worker: the engine runs, and database, Redis and
/// clock are all usable.
pub async fn worker_ready(ops: web::Data<Ops>) -> HttpResponse {
    use crate::routes::health::{READY, UNREADY};
    let problems = readiness_problems(&ops).await;
    if problems.is_empty() {
        HttpResponse::Ok()
            .json(serde_json::json!({"status": READY, "reasons": problems, "role": ops.role}))
    } else {
        HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({"status": UNREADY, "reasons": problems, "role": ops.role}))
    }
}

/// Everything that keeps this process from doing its work, in words; empty
/// when it is ready. Each check waits at most 2 s, so a database that
/// hangs makes the probe fail rather than time out.
pub async fn readiness_problems(ops: &Ops) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(reason) = ops.engine.as_ref().and_then(|engine| engine()) {
        problems.push(format!("engine not running: {reason}"));
    }
    if let Err(e) = bounded(ops.store.ping()).await {
        tracing::warn!(error = %e, "readiness: database unreachable");
        problems.push(if e.starts_with("no answer") {
            format!("database unreachable ({e})")
        } else {
            "database unreachable".to_string()
        });
    }
    if let Some(coord) = &ops.coord
        && let Err(e) = bounded(coord.ping()).await
    {
        tracing::warn!(error = %e, "readiness: redis unreachable");
        problems.push("redis unreachable".to_string());
    }
    if let Some(skew) = &ops.skew_ms {
        let skew = skew.load(Ordering::Relaxed);
        if skew.abs() > ops.max_skew_ms {
            problems.push(format!(
                "clock skew {skew} ms exceeds {} ms",
                ops.max_skew_ms
            ));
        }
    }
    problems
}

/// The routes of a `worker`: health, readiness and metrics only.
pub fn configure_worker(ops: Ops) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::new(ops))
            .route(
                "/healthz",
                web::get().to(crate::routes::health::healthz_plain),
            )
            .route("/readyz", web::get().to(worker_ready))
            .route("/metrics", web::get().to(metrics))
            .default_service(web::to(crate::error::not_found));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes() {
        let cases = [
            (None, 0),
            (Some("success"), 1),
            (Some("failed"), 2),
            (Some("timeout"), 3),
            (Some("skipped"), 4),
            (Some("running"), 5),
            (Some("cancelled"), 6),
        ];
        for (status, code) in cases {
            assert_eq!(status_code(status), code, "{status:?}");
        }
    }

    #[tokio::test]
    async fn readiness_follows_the_engine_and_the_clock_skew() {
        let store = Store::connect("sqlite::memory:").await.expect("sqlite");
        let mut ops = Ops::new(store, "worker");
        ops.max_skew_ms = 2000;
        let skew = Arc::new(AtomicI64::new(0));
        ops.skew_ms = Some(Arc::clone(&skew));
        let engine: EngineReadiness = Arc::new(|| Some("starting".to_string()));
        let cases: [(i64, Option<EngineReadiness>, &[&str]); 5] = [
            (0, None, &[]),
            (2000, None, &[]),
            (-2001, None, &["clock skew -2001 ms exceeds 2000 ms"]),
            (2500, None, &["clock skew 2500 ms exceeds 2000 ms"]),
            (
                2500,
                Some(engine),
                &[
                    "engine not running: starting",
                    "clock skew 2500 ms exceeds 2000 ms",
                ],
            ),
        ];
        for (ms, engine, expected) in cases {
            skew.store(ms, Ordering::Relaxed);
            ops.engine = engine;
            assert_eq!(readiness_problems(&ops).await, expected, "skew {ms}");
        }
    }
}
