//! Throughput benchmark (issue 8): N every-second `demo.echo` jobs run by
//! the real processes — `serve`, or W `worker`s plus one `api` on Redis —
//! against a fresh database, for S seconds. Prints one line per setup:
//! fires/s, fire times recorded/expected (a catch-up record stands for the
//! times it covers), missing and duplicated times, skipped, lag (start −
//! scheduled) p50/p99/max, database transactions per fire (PostgreSQL's
//! `pg_stat_database`), each process's peak RSS, and the latency of
//! `GET /api/jobs/{id}` polled during the window.
//!
//! `cargo bench --bench throughput` (release). Environment:
//! `QIWU_BENCH_SETUPS` (`postgres:1000:3,postgres:5000:3,sqlite:5000:0`:
//! database, jobs, workers; 0 workers is `serve`), `QIWU_BENCH_SECONDS`
//! (30), `QIWU_BENCH_MAX_IN_FLIGHT` (the processes' `QIWU_MAX_IN_FLIGHT`),
//! `QIWU_BENCH_CLAIM_AHEAD_MS` (their `QIWU_CLAIM_AHEAD_MS`),
//! `QIWU_BENCH_SETTLE` (12: seconds the processes keep running after the
//! window before the ledger is read),
//! `QIWU_TEST_POSTGRES_URL`, `QIWU_TEST_MYSQL_URL`, `QIWU_TEST_REDIS_URL`.
//! A 2× overload run is a setup with twice the jobs the machine sustains
//! (and `QIWU_BENCH_SECONDS=60`).

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use qiwu_storage::Store;
use sea_orm::{ConnectionTrait, JsonValue};
use support::{Database, Process, env_or, exec, percentile, rows};

struct Setup {
    database: String,
    jobs: u64,
    workers: usize,
}

fn setups() -> Vec<Setup> {
    std::env::var("QIWU_BENCH_SETUPS")
        .unwrap_or_else(|_| "postgres:1000:3,postgres:5000:3,sqlite:5000:0".into())
        .split(',')
        .filter_map(|s| {
            let mut parts = s.trim().split(':');
            Some(Setup {
                database: parts.next()?.to_string(),
                jobs: parts.next()?.parse().ok()?,
                workers: parts.next().and_then(|w| w.parse().ok()).unwrap_or(0),
            })
        })
        .collect()
}

fn int(row: &JsonValue, key: &str) -> i64 {
    match &row[key] {
        // SQLite may hand an expression's integer back as a float.
        JsonValue::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or_default(),
        JsonValue::String(s) => s.parse().unwrap_or_default(),
        JsonValue::Null => 0,
        other => panic!("{key}: {other}"),
    }
}

/// Writes `jobs` every-second jobs with one statement (no round trip per
/// job): a recursive row generator on every database.
async fn write_jobs(store: &Store, kind: &str, jobs: u64, now: i64) {
    let mysql = kind == "mysql";
    let (yes, no) = if kind == "postgres" {
        ("true", "false")
    } else {
        ("1", "0")
    };
    let name = if mysql {
        "CONCAT('tp-', n)"
    } else {
        "'tp-' || n"
    };
    let cast = if kind == "postgres" { "1::bigint" } else { "1" };
    exec(
        store,
        &format!(
            "INSERT INTO jobs (name, group_code, handler, params, cron, timezone, enabled, \
             retry_count, retry_interval_ms, timeout_ms, allow_concurrent, misfire_policy, \
             remark, version, schedule_from, builtin_key, created_at, created_by, \
             updated_at, updated_by) \
             WITH RECURSIVE s(n) AS (SELECT {cast} UNION ALL SELECT n + 1 FROM s WHERE n < {jobs}) \
             SELECT {name}, 'default', 'demo.echo', '{{\"message\":\"tick\",\"delayMs\":0}}', \
             '* * * * * *', NULL, {yes}, 0, 1000, 60000, {no}, 'skip', '', 1, {now}, NULL, \
             {now}, 'bench', {now}, 'bench' FROM s"
        ),
    )
    .await;
}

/// PostgreSQL's committed and rolled-back transactions in this database.
async fn transactions(store: &Store) -> Option<i64> {
    if store.connection().get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return None;
    }
    let found = rows(
        store,
        "SELECT (xact_commit + xact_rollback)::bigint AS n FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .await;
    found.first().map(|r| int(r, "n"))
}

/// Gathers PostgreSQL's planner statistics of the tables the fires write,
/// as autovacuum's analyze would on a production server: this machine's
/// server runs with autovacuum off, and without statistics the planner
/// takes the freshly filled tables for empty ones (a claim's chain check
/// then read a job's every fire instead of one).
async fn analyze(store: &Store) {
    if store.connection().get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return;
    }
    store
        .connection()
        .execute_unprepared("ANALYZE jobs, fires, runs")
        .await
        .expect("analyze");
}

/// What the ledger holds for the window `[from, to)` (whole seconds).
struct Ledger {
    expected: u64,
    covered: u64,
    missing: u64,
    duplicated: u64,
    skipped: u64,
    lags: Vec<i64>,
    /// First runs by status.
    statuses: std::collections::BTreeMap<String, u64>,
    /// Skipped first runs by reason (the English line of their output).
    skip_reasons: std::collections::BTreeMap<String, u64>,
    /// The window's worst seconds: where a high p99 comes from.
    worst_seconds: Vec<SecondStats>,
}

/// The first runs of one nominal second of the window.
#[derive(Default)]
struct SecondStats {
    /// Seconds since the window's start.
    offset: i64,
    max_lag: i64,
    /// Runs that started more than 100 ms late.
    late: u64,
    skipped: u64,
    /// Late or skipped runs by the instance that ran them.
    by_instance: std::collections::BTreeMap<String, u64>,
}

/// Waits until every worker's last heart-beat saw all of them (their
/// `/metrics`), so the window does not start while jobs still move
/// between owners; at most 60 s.
async fn agreed(client: &reqwest::Client, workers: &[&str]) {
    let all = format!("qiwu_live_workers {}", workers.len());
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let mut seen = 0;
        for base in workers {
            if let Ok(resp) = client.get(format!("{base}/metrics")).send().await
                && let Ok(text) = resp.text().await
                && text.lines().any(|line| line.trim() == all)
            {
                seen += 1;
            }
        }
        if seen == workers.len() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("throughput: the workers did not all see each other within 60 s");
}

async fn read_ledger(store: &Store, job_ids: &[i64], from: i64, to: i64) -> Ledger {
    let seconds = ((to - from) / 1000).max(0) as usize;
    let index: HashMap<i64, usize> = job_ids.iter().enumerate().map(|(i, j)| (*j, i)).collect();
    let mut cover = vec![0u8; job_ids.len() * seconds];
    // Timer fires and catch-ups (lane 0) that touch the window: a catch-up
    // covers every time from its first to its last.
    let fires = rows(
        store,
        &format!(
            "SELECT id, job_id, first_at, scheduled_at \
             FROM fires WHERE lane = 0 AND scheduled_at >= {from} \
             AND COALESCE(first_at, scheduled_at) < {to}"
        ),
    )
    .await;
    for f in &fires {
        let Some(&j) = index.get(&int(f, "job_id")) else {
            continue;
        };
        // SQLite's rows leave an expression's value out, so no COALESCE.
        let first = match f.get("first_at") {
            Some(v) if !v.is_null() => int(f, "first_at"),
            _ => int(f, "scheduled_at"),
        }
        .max(from);
        let last = int(f, "scheduled_at").min(to - 1);
        let mut second = first + (1000 - first.rem_euclid(1000)) % 1000;
        while second <= last {
            let slot = &mut cover[j * seconds + ((second - from) / 1000) as usize];
            *slot = slot.saturating_add(1);
            second += 1000;
        }
    }
    let covered = cover.iter().filter(|c| **c >= 1).count() as u64;
    let missing = cover.iter().filter(|c| **c == 0).count() as u64;
    let duplicated = cover.iter().map(|c| u64::from(c.saturating_sub(1))).sum();
    let runs = rows(
        store,
        &format!(
            "SELECT status, scheduled_at, started_at, output, instance FROM runs WHERE attempt = 1 \
             AND scheduled_at >= {from} AND scheduled_at < {to}"
        ),
    )
    .await;
    let mut skipped = 0;
    let mut lags = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    let mut skip_reasons = std::collections::BTreeMap::new();
    let mut by_second: Vec<SecondStats> = (0..seconds as i64)
        .map(|offset| SecondStats {
            offset,
            ..SecondStats::default()
        })
        .collect();
    for r in &runs {
        let second = ((int(r, "scheduled_at") - from) / 1000).clamp(0, seconds as i64 - 1);
        let stats = &mut by_second[second as usize];
        let instance = r["instance"].as_str().unwrap_or("?").to_string();
        *statuses
            .entry(r["status"].as_str().unwrap_or("?").to_string())
            .or_insert(0) += 1;
        if r["status"] == "skipped" {
            skipped += 1;
            let output = r["output"].as_str().unwrap_or_default();
            let reason: String = output
                .lines()
                .last()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect();
            *skip_reasons.entry(reason).or_insert(0) += 1;
            stats.skipped += 1;
            *stats.by_instance.entry(instance).or_insert(0) += 1;
        } else if r["status"] != "running" {
            // An ended run's start is when it really started (a fire
            // claimed ahead writes it at its end); a run still open is not
            // counted.
            let lag = int(r, "started_at") - int(r, "scheduled_at");
            lags.push(lag);
            stats.max_lag = stats.max_lag.max(lag);
            if lag > 100 {
                stats.late += 1;
                *stats.by_instance.entry(instance).or_insert(0) += 1;
            }
        }
    }
    lags.sort_unstable();
    by_second.sort_by_key(|s| std::cmp::Reverse((s.late + s.skipped, s.max_lag)));
    by_second.truncate(3);
    by_second.retain(|s| s.late + s.skipped > 0);
    Ledger {
        expected: (job_ids.len() * seconds) as u64,
        covered,
        missing,
        duplicated,
        skipped,
        lags,
        statuses,
        skip_reasons,
        worst_seconds: by_second,
    }
}

async fn bench(setup: &Setup, seconds: u64) {
    let kind = setup.database.as_str();
    let database = Database::fresh(kind, "qiwu_tp").await;
    let store = Store::connect(&database.url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let now = chrono::Utc::now().timestamp_millis();
    write_jobs(&store, kind, setup.jobs, now).await;
    let job_ids: Vec<i64> = rows(&store, "SELECT id FROM jobs WHERE name LIKE 'tp-%'")
        .await
        .iter()
        .map(|r| int(r, "id"))
        .collect();

    let redis = support::redis_url();
    let in_flight = std::env::var("QIWU_BENCH_MAX_IN_FLIGHT").ok();
    let ahead = std::env::var("QIWU_BENCH_CLAIM_AHEAD_MS").ok();
    let env = |instance: &str| {
        let mut env: Vec<(&str, String)> = vec![
            ("QIWU_LISTEN", "127.0.0.1:0".into()),
            ("QIWU_DATABASE_URL", database.url.clone()),
            ("QIWU_JWT_SECRET", support::SECRET.into()),
            ("QIWU_TIMEZONE", "UTC".into()),
            ("QIWU_INSTANCE_ID", instance.into()),
        ];
        if setup.workers > 0 {
            env.push(("QIWU_REDIS_URL", redis.clone()));
        }
        if let Some(n) = &in_flight {
            env.push(("QIWU_MAX_IN_FLIGHT", n.clone()));
        }
        if let Some(ms) = &ahead {
            env.push(("QIWU_CLAIM_AHEAD_MS", ms.clone()));
        }
        env
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    // The API answers from `serve` itself, or from an `api` process.
    let mut processes: Vec<(String, Process)> = Vec::new();
    let spawned = Instant::now();
    if setup.workers == 0 {
        processes.push(("serve".into(), Process::spawn("serve", &env("tp-serve"))));
    } else {
        processes.push(("api".into(), Process::spawn("api", &env("tp-api"))));
        for w in 1..=setup.workers {
            let name = format!("w{w}");
            let process = Process::spawn("worker", &env(&format!("tp-{name}")));
            processes.push((name, process));
        }
    }
    for (_, p) in &processes {
        support::wait_ready(&client, &p.base, Duration::from_secs(300)).await;
    }
    let ready = spawned.elapsed();
    // Let the workers agree on who owns what, then measure whole seconds.
    if setup.workers > 0 {
        let workers: Vec<&str> = processes[1..]
            .iter()
            .map(|(_, p)| p.base.as_str())
            .collect();
        agreed(&client, &workers).await;
    }
    // A few seconds of fires in the tables, their statistics, then time
    // for the plans made before to be replaced.
    tokio::time::sleep(Duration::from_secs(2)).await;
    analyze(&store).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let wall = chrono::Utc::now().timestamp_millis();
    let from = wall - wall.rem_euclid(1000) + 1000;
    tokio::time::sleep(Duration::from_millis((from - wall) as u64)).await;
    let xact_from = transactions(&store).await;
    let to = from + seconds as i64 * 1000;
    // Poll one job through the API every 100 ms meanwhile.
    let token = support::admin_token();
    let api = processes[0].1.base.clone();
    let probe = job_ids.first().copied().unwrap_or(1);
    let mut api_times = Vec::new();
    let mut api_errors = 0;
    while chrono::Utc::now().timestamp_millis() < to {
        let start = Instant::now();
        match client
            .get(format!("{api}/api/jobs/{probe}"))
            .bearer_auth(&token)
            .send()
            .await
        {
            Ok(resp) if resp.status().is_success() => {
                api_times.push(start.elapsed().as_secs_f64() * 1000.0)
            }
            _ => api_errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let xact_to = transactions(&store).await;
    // The last second's fires and ends are written within the misfire
    // threshold (5 s) and the end batching; past capacity, catch-up
    // records may take longer (`QIWU_BENCH_SETTLE` seconds): an overload
    // record gathers its job's missed times up to 5 s more.
    tokio::time::sleep(Duration::from_secs(env_or("QIWU_BENCH_SETTLE", 12u64))).await;
    let rss: Vec<String> = processes
        .iter()
        .map(|(name, p)| format!("{name} {:.0}", p.peak_rss_mb()))
        .collect();
    for (_, p) in processes {
        p.terminate(Duration::from_secs(15));
    }
    let ledger = read_ledger(&store, &job_ids, from, to).await;
    api_times.sort_by(f64::total_cmp);
    let fires = ledger.covered as f64;
    let per_fire = match (xact_from, xact_to) {
        (Some(a), Some(b)) => format!("{:.2}", (b - a) as f64 / fires.max(1.0)),
        _ => "—".into(),
    };
    println!(
        "{kind:>8} | {} | {} jobs | {seconds} s | {:.0} fire times/s | recorded {}/{} (missing {}, duplicated {}) | skipped {} | lag p50 {} ms, p99 {} ms, max {} ms | transactions/fire {per_fire} | peak RSS MB: {} | GET /api/jobs/{{id}} p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} errors | ready in {:.1} s",
        if setup.workers == 0 {
            "serve".to_string()
        } else {
            format!("{} workers", setup.workers)
        },
        setup.jobs,
        fires / seconds as f64,
        ledger.covered,
        ledger.expected,
        ledger.missing,
        ledger.duplicated,
        ledger.skipped,
        percentile(&ledger.lags, 50.0),
        percentile(&ledger.lags, 99.0),
        ledger.lags.last().copied().unwrap_or(0),
        rss.join(", "),
        percentile(&api_times, 50.0),
        percentile(&api_times, 99.0),
        api_times.last().copied().unwrap_or(0.0),
        api_errors,
        ready.as_secs_f64(),
    );
    println!("           first runs by status: {:?}", ledger.statuses);
    if !ledger.skip_reasons.is_empty() {
        println!("           skipped by reason: {:?}", ledger.skip_reasons);
    }
    for s in &ledger.worst_seconds {
        println!(
            "           second +{}: {} late (> 100 ms), {} skipped, max lag {} ms, by instance {:?}",
            s.offset, s.late, s.skipped, s.max_lag, s.by_instance
        );
    }
    drop(store);
    database.drop_now().await;
}

fn main() {
    let seconds = env_or("QIWU_BENCH_SECONDS", 30u64).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("throughput: every-second jobs, {seconds} s per setup");
    for setup in setups() {
        runtime.block_on(bench(&setup, seconds));
    }
}
