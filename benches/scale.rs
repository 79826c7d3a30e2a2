//! Scale benchmark (issue 8): a large installation written with SQL — N
//! jobs and M runs — then the real `api` and one `worker` processes on top.
//! Prints one line per measure: how long the worker takes to arm every job
//! (spawn to `/readyz` 200) and its peak RSS, then p50/p99 over repeated
//! HTTP calls of the run-log and job-list queries.
//!
//! `cargo bench --profile dev --bench scale` (or release). Environment:
//! `QIWU_BENCH_JOBS` (100000), `QIWU_BENCH_RUNS` (10000000),
//! `QIWU_BENCH_DATABASES` (`postgres,mysql`), `QIWU_BENCH_SAMPLES` (200
//! calls per query), `QIWU_BENCH_KEEP=1` (keep the database and print its
//! URL), `QIWU_BENCH_REUSE` (the URL of a kept database: measure it again,
//! writing nothing; its kind must be in `QIWU_BENCH_DATABASES`),
//! `QIWU_TEST_POSTGRES_URL`, `QIWU_TEST_MYSQL_URL`,
//! `QIWU_TEST_REDIS_URL` (database 13 of that server unless the URL names
//! one, so other users of the server do not join the worker's cluster).
//!
//! The jobs fire once a year (1 January), so the worker arms them all and
//! runs none while the queries are measured.

mod support;

use std::time::{Duration, Instant};

use qiwu_storage::{Backend, Store};
use serde_json::Value;
use support::{Database, Process, env_or, exec, percentile, wait_ready};

/// The runs span the last 30 days.
const SPAN_MS: i64 = 30 * 86_400_000;
/// Rows per insert statement.
const CHUNK: u64 = 1_000_000;

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Writes `jobs` jobs and `runs` runs with SQL (no client round trip per
/// row): `generate_series` on PostgreSQL, a table of 1..1 000 000 on MySQL.
async fn write_rows(store: &Store, jobs: u64, runs: u64, now: i64) {
    let mysql = store.backend() == Backend::MySql;
    let start_ms = now - SPAN_MS - 3_600_000;
    // (number, zero-padded text) of the row number `n`, per dialect.
    let padded = |n: &str| {
        if mysql {
            format!("CONCAT('bench-job-', LPAD({n}, 6, '0'))")
        } else {
            format!("'bench-job-' || lpad(({n})::text, 6, '0')")
        }
    };
    let rows = |count: u64, offset: u64| {
        if mysql {
            format!("(SELECT n + {offset} AS n FROM bench_seq WHERE n <= {count}) s")
        } else {
            format!("(SELECT g + {offset} AS n FROM generate_series(1::bigint, {count}) g) s")
        }
    };
    if mysql {
        exec(store, "CREATE TABLE bench_digits (d BIGINT PRIMARY KEY)").await;
        exec(
            store,
            "INSERT INTO bench_digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)",
        )
        .await;
        exec(store, "CREATE TABLE bench_seq (n BIGINT PRIMARY KEY)").await;
        exec(
            store,
            "INSERT INTO bench_seq SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * d.d \
             + 10000 * e.d + 100000 * f.d FROM bench_digits a, bench_digits b, bench_digits c, \
             bench_digits d, bench_digits e, bench_digits f",
        )
        .await;
    }
    let started = Instant::now();
    let mut offset = 0;
    while offset < jobs {
        let count = (jobs - offset).min(CHUNK);
        // Yearly crons (1 January) at varied times: armed, never due here.
        exec(
            store,
            &format!(
                "INSERT INTO jobs (name, group_code, handler, params, cron, timezone, enabled, \
                 retry_count, retry_interval_ms, timeout_ms, allow_concurrent, misfire_policy, \
                 remark, version, schedule_from, builtin_key, created_at, created_by, \
                 updated_at, updated_by) \
                 SELECT {name}, 'default', 'demo.echo', '{{\"message\":\"tick\",\"delayMs\":0}}', \
                 CONCAT('0 ', n % 60, ' ', n % 24, ' 1 1 *'), NULL, {yes}, 0, 1000, 60000, {no}, \
                 'skip', '', 1, {now}, NULL, {now}, 'bench', {now}, 'bench' FROM {from} ORDER BY n",
                name = padded("n"),
                yes = if mysql { "1" } else { "true" },
                no = if mysql { "0" } else { "false" },
                from = rows(count, offset),
            ),
        )
        .await;
        offset += count;
    }
    println!(
        "  wrote {jobs} jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The run log's secondary indexes are built once after the load (a
    // sorted build), not row by row.
    let indexes = drop_run_indexes(store).await;
    let started = Instant::now();
    let mut offset = 0;
    while offset < runs {
        let count = (runs - offset).min(CHUNK);
        // Run i belongs to job (i mod N) + 1 and starts i·span/M after the
        // start: every job has M/N runs spread over the whole span.
        let job = format!("(n % {jobs}) + 1");
        exec(
            store,
            &format!(
                "INSERT INTO runs (fire_id, job_id, job_name, handler, {trig}, scheduled_at, \
                 attempt, status, started_at, finished_at, duration_ms, instance, output, error) \
                 SELECT n, {job}, {name}, \
                 CASE ({job}) % 10 WHEN 0 THEN 'http.get' WHEN 1 THEN 'audit.purge' ELSE 'demo.echo' END, \
                 'schedule', {start_ms} + n * {step} - 3, 1, \
                 CASE WHEN n % 53 = 0 THEN 'failed' WHEN n % 997 = 0 THEN 'timeout' \
                 WHEN n % 101 = 0 THEN 'skipped' ELSE 'success' END, \
                 {start_ms} + n * {step}, {start_ms} + n * {step} + 20, 20, 'bench-w1', \
                 'returned: tick', CASE WHEN n % 53 = 0 THEN 'handler failed: boom' ELSE '' END \
                 FROM {from} ORDER BY n",
                trig = if mysql { "`trigger`" } else { "\"trigger\"" },
                name = padded(&job),
                step = (SPAN_MS / runs.max(1) as i64).max(1),
                from = rows(count, offset),
            ),
        )
        .await;
        offset += count;
        println!(
            "  … {offset} runs ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "  wrote {runs} runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The written runs name fires 1..=M that were never recorded; new
    // fires (the built-in jobs') get ids past them.
    if mysql {
        exec(
            store,
            &format!("ALTER TABLE fires AUTO_INCREMENT = {}", runs + 1),
        )
        .await;
    } else {
        exec(
            store,
            &format!(
                "SELECT setval(pg_get_serial_sequence('fires', 'id'), {})",
                runs + 1
            ),
        )
        .await;
    }
    let started = Instant::now();
    for sql in &indexes {
        exec(store, sql).await;
    }
    println!(
        "  built {} run-log indexes in {:.1} s",
        indexes.len(),
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    if mysql {
        exec(store, "DROP TABLE bench_seq").await;
        exec(store, "DROP TABLE bench_digits").await;
        exec(
            store,
            "ANALYZE TABLE jobs, runs, run_job_names, job_name_grams, run_name_grams",
        )
        .await;
    } else {
        exec(store, "VACUUM ANALYZE").await;
    }
    println!("  analyzed in {:.1} s", started.elapsed().as_secs_f64());
}

/// Drops the secondary indexes of `runs`; returns the statements that
/// create them again.
async fn drop_run_indexes(store: &Store) -> Vec<String> {
    use sea_orm::{FromQueryResult, JsonValue, Statement};
    let db = store.connection();
    let backend = db.get_database_backend();
    let query = |sql: &str| {
        JsonValue::find_by_statement(Statement::from_string(backend, sql.to_owned())).all(db)
    };
    let mut create = Vec::new();
    if store.backend() == Backend::MySql {
        let rows = query(
            "SELECT CAST(index_name AS CHAR) AS name, \
             CAST(GROUP_CONCAT(CONCAT('`', column_name, '`') ORDER BY seq_in_index) AS CHAR) AS cols, \
             MIN(non_unique) AS non_unique FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = 'runs' AND index_name <> 'PRIMARY' \
             GROUP BY index_name",
        )
        .await
        .expect("read indexes");
        for row in rows {
            let name = row["name"].as_str().unwrap_or_default().to_string();
            let cols = row["cols"].as_str().unwrap_or_default();
            let unique = if row["non_unique"].as_i64() == Some(0) {
                "UNIQUE "
            } else {
                ""
            };
            exec(store, &format!("ALTER TABLE runs DROP INDEX `{name}`")).await;
            create.push(format!("CREATE {unique}INDEX `{name}` ON runs ({cols})"));
        }
    } else {
        let rows = query(
            "SELECT indexname AS name, indexdef AS def FROM pg_indexes \
             WHERE tablename = 'runs' AND indexname <> 'runs_pkey'",
        )
        .await
        .expect("read indexes");
        for row in rows {
            let name = row["name"].as_str().unwrap_or_default();
            exec(store, &format!("DROP INDEX {name}")).await;
            create.push(row["def"].as_str().unwrap_or_default().to_string());
        }
    }
    create
}

/// p50/p99 (ms) of `samples` GETs of the paths `path` makes.
async fn measure(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    what: &str,
    samples: usize,
    mut path: impl FnMut(usize) -> String,
) {
    let mut times = Vec::with_capacity(samples);
    let mut items = 0usize;
    for i in 0..samples + 5 {
        let p = path(i);
        let start = Instant::now();
        let resp = client
            .get(format!("{base}{p}"))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        let status = resp.status();
        let body: Value = resp.json().await.expect("json");
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        assert!(status.is_success(), "{p}: {status} {body}");
        // The first calls warm the connection and the caches.
        if i >= 5 {
            times.push(ms);
            items += body["items"].as_array().map_or(0, Vec::len);
        }
    }
    report(what, &mut times, items);
}

fn report(what: &str, times: &mut [f64], items: usize) {
    times.sort_by(f64::total_cmp);
    println!(
        "  {what:<38} p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms  ({} calls, {:.1} items/call)",
        percentile(times, 50.0),
        percentile(times, 99.0),
        times.last().copied().unwrap_or(0.0),
        times.len(),
        items as f64 / times.len().max(1) as f64,
    );
}

async fn bench(kind: &str, jobs: u64, runs: u64, samples: usize) {
    println!("{kind}: {jobs} jobs, {runs} runs");
    // A kept database (`QIWU_BENCH_REUSE`) is measured again as it is.
    let reuse = std::env::var("QIWU_BENCH_REUSE")
        .ok()
        .filter(|u| u.starts_with(kind));
    let database = match &reuse {
        Some(_) => None,
        None => Some(Database::fresh(kind, "qiwu_scale").await),
    };
    let url = reuse
        .clone()
        .or_else(|| database.as_ref().map(|d| d.url.clone()))
        .unwrap_or_default();
    let store = Store::connect(&url).await.expect("connect");
    store.migrate().await.expect("migrate");
    let now = chrono::Utc::now().timestamp_millis();
    if reuse.is_none() {
        write_rows(&store, jobs, runs, now).await;
    }

    let redis = support::redis_url();
    let env = |instance: &str| -> Vec<(&'static str, String)> {
        vec![
            ("QIWU_LISTEN", "127.0.0.1:0".into()),
            ("QIWU_DATABASE_URL", url.clone()),
            ("QIWU_REDIS_URL", redis.clone()),
            ("QIWU_JWT_SECRET", support::SECRET.into()),
            ("QIWU_TIMEZONE", "UTC".into()),
            ("QIWU_INSTANCE_ID", instance.into()),
        ]
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let api = Process::spawn("api", &env("bench-api"));
    wait_ready(&client, &api.base, Duration::from_secs(120)).await;
    let spawned = Instant::now();
    let worker = Process::spawn("worker", &env("bench-w1"));
    wait_ready(&client, &worker.base, Duration::from_secs(600)).await;
    let arm = spawned.elapsed();
    println!(
        "  worker arms {jobs} jobs (spawn to ready)    {:>7.2} s   peak RSS {:.0} MB",
        arm.as_secs_f64(),
        worker.peak_rss_mb()
    );

    let token = support::admin_token();
    let base = api.base.clone();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let day = |d: u64| {
        let from = chrono::DateTime::from_timestamp_millis(now - SPAN_MS + d as i64 * 86_400_000)
            .unwrap_or_default();
        let to = from + chrono::Duration::days(1);
        format!(
            "startedFrom={}&startedTo={}",
            from.format("%Y-%m-%dT%H:%M:%SZ"),
            to.format("%Y-%m-%dT%H:%M:%SZ")
        )
    };
    measure(
        &client,
        &base,
        &token,
        "run log: first page",
        samples,
        |_| "/api/runs".into(),
    )
    .await;
    measure(&client, &base, &token, "run log: by job", samples, |_| {
        format!("/api/runs?jobId={}", 1 + rng.below(jobs))
    })
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: by status (failed)",
        samples,
        |_| "/api/runs?status=failed".into(),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: by handler (http.get)",
        samples,
        |_| "/api/runs?handler=http.get".into(),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: one-day range",
        samples,
        |_| format!("/api/runs?{}", day(rng.below(29))),
    )
    .await;
    // 200 pages in a row, each after the previous one's cursor.
    let mut times = Vec::new();
    let mut items = 0;
    let mut cursor: Option<String> = None;
    for _ in 0..200 {
        let path = match &cursor {
            Some(c) => format!("/api/runs?cursor={c}"),
            None => "/api/runs".into(),
        };
        let start = Instant::now();
        let body: Value = client
            .get(format!("{base}{path}"))
            .bearer_auth(&token)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        items += body["items"].as_array().map_or(0, Vec::len);
        cursor = body["nextCursor"].as_str().map(str::to_string);
    }
    report("run log: 200 cursor pages", &mut times, items);
    measure(
        &client,
        &base,
        &token,
        "run log: jobName (1 job)",
        samples,
        |_| format!("/api/runs?jobName=bench-job-{:06}", 1 + rng.below(jobs)),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: jobName (10 jobs)",
        samples,
        |_| format!("/api/runs?jobName=job-{:05}", rng.below(jobs / 10)),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: jobName (100 jobs)",
        samples,
        |_| format!("/api/runs?jobName=job-{:04}", rng.below(jobs / 100)),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "run log: jobName (every job)",
        samples,
        |_| "/api/runs?jobName=bench".into(),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "job list: page 1 with total",
        samples,
        |_| "/api/jobs?page=1&pageSize=20".into(),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "job list: by name (10 jobs)",
        samples,
        |_| format!("/api/jobs?name=job-{:05}", rng.below(jobs / 10)),
    )
    .await;
    measure(
        &client,
        &base,
        &token,
        "job list: by name (every job)",
        samples,
        |_| "/api/jobs?name=bench&page=3".into(),
    )
    .await;
    println!(
        "  worker peak RSS after the queries {:.0} MB",
        worker.peak_rss_mb()
    );

    drop(worker);
    drop(api);
    drop(store);
    let Some(database) = database else {
        return;
    };
    if std::env::var("QIWU_BENCH_KEEP").is_ok_and(|v| v == "1") {
        println!("  kept {url}");
        return;
    }
    database.drop_now().await;
}

fn main() {
    let jobs = env_or("QIWU_BENCH_JOBS", 100_000u64).max(1);
    let runs = env_or("QIWU_BENCH_RUNS", 10_000_000u64);
    let samples = env_or("QIWU_BENCH_SAMPLES", 200usize).max(1);
    let databases =
        std::env::var("QIWU_BENCH_DATABASES").unwrap_or_else(|_| "postgres,mysql".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for kind in databases
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        runtime.block_on(bench(kind, jobs, runs, samples));
    }
}
