//! Fire-lag benchmark: N every-second jobs for S seconds on SQLite and on
//! PostgreSQL, in-process. Prints fires/s, lag (start − scheduled) p50, p99
//! and max, and the database statements sent per fire.
//!
//! `cargo bench --bench fire_lag` (release), or quicker
//! `cargo bench --profile dev --bench fire_lag`. Environment:
//! `QIWU_BENCH_JOBS` (100), `QIWU_BENCH_SECONDS` (30), `QIWU_BENCH_DATABASES`
//! (`sqlite,postgres`; `mysql` too), `QIWU_BENCH_WORKERS` (`0,1,3`: 0 is the
//! single-process `serve` engine, N > 0 are N cluster workers on Redis,
//! in this one process, on the server databases only),
//! `QIWU_TEST_POSTGRES_URL`, `QIWU_TEST_MYSQL_URL`, `QIWU_TEST_REDIS_URL`;
//! `QIWU_BENCH_TRACING=1` exports every span over OTLP/HTTP to a sink in
//! this process (the fire path with tracing on; metrics are always on).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qiwu_scheduler_worker::clock::SystemClock;
use qiwu_scheduler_worker::handlers::builtin_registry;
use qiwu_scheduler_worker::{Engine, EngineConfig};
use qiwu_storage::{NewJob, Store};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;
use support::{Database, env_or, percentile};

/// Counts statements by their first words (`INSERT INTO runs`, `UPDATE runs`…).
#[derive(Default)]
struct Counter {
    total: AtomicU64,
    by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Counter {
    fn record(&self, sql: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let kind: String = sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        if let Ok(mut map) = self.by_kind.lock() {
            *map.entry(kind).or_default() += 1;
        }
    }

    fn reset(&self) {
        self.total.store(0, Ordering::Relaxed);
        if let Ok(mut map) = self.by_kind.lock() {
            map.clear();
        }
    }
}

async fn bench(kind: &str, jobs: usize, seconds: u64, workers: usize) {
    let database = Database::fresh(kind, "qiwu_bench").await;
    let url = database.url.clone();
    let counter = Arc::new(Counter::default());
    let mut store = Store::connect(&url).await.expect("connect");
    let c = Arc::clone(&counter);
    store.on_statement(move |sql, _| c.record(sql));
    store.migrate().await.expect("migrate");
    let now = chrono::Utc::now();
    for i in 0..jobs {
        let job = NewJob {
            time_rules: Default::default(),
            name: format!("bench-{i}"),
            group: "default".into(),
            handler: "demo.echo".into(),
            params: json!({"message": "tick", "delayMs": 0}),
            cron: "* * * * * *".into(),
            timezone: None,
            enabled: true,
            retry_count: 0,
            retry_interval_ms: 1000,
            retry_backoff: "fixed".into(),
            retry_max_interval_ms: 3_600_000,
            retry_jitter: false,
            overlap_policy: "skip".into(),
            timeout_ms: 60_000,
            allow_concurrent: false,
            misfire_policy: "skip".into(),
            remark: String::new(),
            builtin_key: None,
            alert: Default::default(),
        };
        store
            .jobs()
            .create(&job, "bench", now)
            .await
            .expect("create job");
    }
    let registry = builtin_registry(store.clone(), None, Arc::new(SystemClock)).expect("registry");
    let coord = if workers > 0 {
        let url = std::env::var("QIWU_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        Some(
            qiwu_coord::Coord::connect(&url)
                .await
                .expect("Redis is reachable"),
        )
    } else {
        None
    };
    let mut engines = Vec::new();
    for w in 0..workers.max(1) {
        let cluster = coord.clone().map(qiwu_scheduler_worker::ClusterConfig::new);
        let clock: Arc<dyn qiwu_scheduler_worker::clock::Clock> = match &cluster {
            Some(c) => c.clock.clone(),
            None => Arc::new(SystemClock),
        };
        let (engine, _handle) = Engine::new(
            store.clone(),
            registry.clone(),
            EngineConfig {
                instance: format!("bench-{kind}-{workers}-w{w}"),
                timezone: chrono_tz::UTC,
                shutdown_grace: Duration::from_secs(10),
                reconcile_every: Duration::from_secs(3600),
                close_all_running_at_start: cluster.is_none(),
                misfire_threshold: Duration::from_secs(5),
                max_in_flight: 2_000,
                claim_ahead: Duration::from_millis(500),
                on_timeout: Arc::new(|_| Box::pin(async {})),
                cluster,
            },
            clock,
        );
        engines.push(engine);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = engines
        .into_iter()
        .map(|engine| tokio::spawn(engine.run(stop_rx.clone())))
        .collect();
    // Skip the start-up second, then measure a window of whole seconds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let window_start = chrono::Utc::now().timestamp_millis();
    counter.reset();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let statements = counter.total.load(Ordering::Relaxed);
    let kinds = counter
        .by_kind
        .lock()
        .map(|m| m.clone())
        .unwrap_or_default();
    let window_end = chrono::Utc::now().timestamp_millis();
    let _ = stop_tx.send(true);
    for task in tasks {
        let _ = task.await;
    }

    use qiwu_storage::entity::run;
    let runs = run::Entity::find()
        .filter(run::Column::ScheduledAt.gte(window_start))
        .filter(run::Column::ScheduledAt.lt(window_end))
        .all(store.connection())
        .await
        .expect("read runs");
    let mut lags: Vec<i64> = runs.iter().map(|r| r.started_at - r.scheduled_at).collect();
    lags.sort_unstable();
    let fires = runs.len() as f64;
    let span = (window_end - window_start) as f64 / 1000.0;
    let expected = jobs as f64 * span.floor();
    let skipped = runs.iter().filter(|r| r.status == "skipped").count();
    println!(
        "{kind:>8} | {} | jobs {jobs} | {span:.1} s | fires {fires} (expected ≈{expected}) | {:.1} fires/s | lag p50 {} ms, p99 {} ms, max {} ms | skipped {skipped} | statements/fire {:.2}",
        if workers == 0 {
            "serve".to_string()
        } else {
            format!("{workers} worker(s)")
        },
        fires / span,
        percentile(&lags, 50.0),
        percentile(&lags, 99.0),
        lags.last().copied().unwrap_or(0),
        statements as f64 / fires.max(1.0),
    );
    for (kind, n) in kinds {
        println!("           {n:>7}  {kind}");
    }
    drop(store);
    database.drop_now().await;
}

fn main() {
    let jobs = env_or("QIWU_BENCH_JOBS", 100usize);
    let seconds = env_or("QIWU_BENCH_SECONDS", 30u64);
    let databases =
        std::env::var("QIWU_BENCH_DATABASES").unwrap_or_else(|_| "sqlite,postgres".into());
    // The OTLP exporter reads its endpoint from the environment: set it
    // while this process still has one thread (nothing reads it at once).
    let mut sink_listener = None;
    if std::env::var("QIWU_BENCH_TRACING").is_ok_and(|v| v == "1") {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the sink");
        let addr = listener.local_addr().expect("addr");
        // SAFETY: no other thread exists yet (the runtime is built below).
        unsafe { std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")) };
        sink_listener = Some(listener);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tracing = std::env::var("QIWU_BENCH_TRACING").is_ok_and(|v| v == "1");
    let sink = tracing.then(|| {
        let _runtime = runtime.enter();
        let (addr, exports) = runtime.block_on(otlp_sink(sink_listener.take()));
        let config = qiwu_telemetry::TraceConfig::from_vars(&|name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(format!("http://{addr}")),
            _ => None,
        })
        .expect("trace config")
        .expect("tracing on");
        let telemetry =
            qiwu_telemetry::init(qiwu_telemetry::LogFormat::Text, Some((&config, "bench")))
                .expect("telemetry");
        (telemetry, exports)
    });
    println!(
        "fire lag: {jobs} every-second jobs, {seconds} s per database, tracing {}",
        if tracing { "on (OTLP/HTTP)" } else { "off" }
    );
    let workers: Vec<usize> = std::env::var("QIWU_BENCH_WORKERS")
        .unwrap_or_else(|_| "0,1,3".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    for kind in databases
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        for &n in &workers {
            // A cluster needs a server database.
            if n > 0 && kind == "sqlite" {
                continue;
            }
            runtime.block_on(bench(kind, jobs, seconds, n));
        }
    }
    if let Some((telemetry, exports)) = sink {
        runtime.block_on(telemetry.shutdown(Duration::from_secs(5)));
        let text = qiwu_telemetry::metrics()
            .encode(0, |_| {})
            .unwrap_or_default();
        let dropped: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("qiwu_trace_spans_dropped_total"))
            .collect();
        println!(
            "tracing: {} OTLP export requests received, dropped spans: {:?}",
            exports.load(Ordering::Relaxed),
            dropped
        );
    }
}

/// An OTLP/HTTP receiver that answers 200 to everything and counts the
/// requests.
async fn otlp_sink(listener: Option<std::net::TcpListener>) -> (String, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = listener.expect("the sink's socket");
    listener.set_nonblocking(true).expect("non-blocking");
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let addr = listener.local_addr().expect("addr").to_string();
    let count = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 64 * 1024];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if data.len() < end + 4 + length {
                        continue;
                    }
                    seen.fetch_add(1, Ordering::Relaxed);
                    let _ = socket
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                    return;
                }
            });
        }
    });
    (addr, count)
}
