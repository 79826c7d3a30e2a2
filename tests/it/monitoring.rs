//! Monitoring, end to end: a real Prometheus server (Debian package
//! `prometheus`) scrapes `serve` and a cluster's `api` and `worker` while
//! jobs fire, and PromQL answers what the run log holds; `/readyz` follows
//! the schema, a database outage and a Redis outage.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;
use crate::common::cluster::{Redis, free_port};
use crate::common::{SECRET, admin_token, client, until};
use crate::observe::{Database, Proc, cluster_env, parse_exposition};
use qiwu_storage::entity::run;
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(40);

/// A Prometheus server scraping `targets` (job name, host:port) every
/// second, on a free port.
struct Prometheus {
    child: Child,
    base: String,
    _dir: common::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    async fn start(targets: &[(&str, &str)]) -> Prometheus {
        let dir = common::TempDir::new("prometheus");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        for (job, target) in targets {
            config.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ));
        }
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).expect("config");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus must be installed (Debian package prometheus)");
        let prom = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", prom.base);
        until("prometheus is ready", LIMIT, async || {
            let res = client().get(&ready).send().await.ok()?;
            res.status().is_success().then_some(())
        })
        .await;
        prom
    }

    /// An instant query's single value, if it has exactly one.
    async fn value(&self, query: &str) -> Option<f64> {
        let res: Value = client()
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", query)])
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let result = res["data"]["result"].as_array()?;
        if result.len() != 1 {
            return None;
        }
        result[0]["value"][1].as_str()?.parse().ok()
    }
}

fn host(p: &Proc) -> String {
    p.base.trim_start_matches("http://").to_string()
}

async fn every_second_echo(base: &str, name: &str) -> i64 {
    let res = client()
        .post(format!("{base}/api/jobs"))
        .bearer_auth(admin_token())
        .json(&json!({"name": name, "handler": "demo.echo", "cron": "* * * * * *", "params": {}}))
        .send()
        .await
        .expect("create");
    assert_eq!(res.status(), StatusCode::CREATED);
    res.json::<Value>().await.expect("json")["id"]
        .as_i64()
        .expect("id")
}

async fn disable(base: &str, job: i64) {
    let res = client()
        .put(format!("{base}/api/jobs/{job}/enabled"))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("disable");
    assert!(res.status().is_success());
}

/// What the run log holds about the demo.echo runs of `instance` (any
/// when `None`), once none is running: (schedule claims, ended runs that
/// ran the handler, successes).
async fn recorded(url: &str, instance: Option<&str>) -> (u64, u64, u64) {
    let store = qiwu_storage::Store::connect(url).await.expect("open");
    let base = || {
        let q = run::Entity::find().filter(run::Column::Handler.eq("demo.echo"));
        match instance {
            Some(i) => q.filter(run::Column::Instance.eq(i)),
            None => q,
        }
    };
    until("the echo runs ended", LIMIT, async || {
        let running = base()
            .filter(run::Column::Status.eq("running"))
            .count(store.connection())
            .await
            .ok()?;
        (running == 0).then_some(())
    })
    .await;
    let db = store.connection();
    let claims = base()
        .filter(run::Column::Trigger.eq("schedule"))
        .filter(run::Column::Attempt.eq(1))
        .filter(run::Column::Status.is_in(["success", "failed", "timeout"]))
        .count(db)
        .await
        .expect("count");
    let ran = base()
        .filter(run::Column::Status.is_in(["success", "failed", "timeout"]))
        .count(db)
        .await
        .expect("count");
    let successes = base()
        .filter(run::Column::Status.eq("success"))
        .count(db)
        .await
        .expect("count");
    (claims, ran, successes)
}

/// The metric names a README table row documents.
fn documented() -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let section = readme
        .split("## Monitoring")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Monitoring section");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `qiwu_"))
        .filter_map(|l| l.split('`').next())
        .map(|n| format!("qiwu_{n}"))
        .collect()
}

/// Scrapes `p`, parses strictly, and checks every family is documented.
async fn scrape_documented(p: &Proc, documented: &BTreeSet<String>) {
    let text = client()
        .get(p.url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    let samples = parse_exposition(&text).unwrap_or_else(|e| panic!("strict parse: {e}\n{text}"));
    for s in samples {
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| {
                s.name
                    .strip_suffix(suffix)
                    .filter(|base| documented.contains(*base))
            })
            .unwrap_or(&s.name);
        assert!(
            documented.contains(family),
            "{} is not in the README's metrics table",
            s.name
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_scrapes_serve_and_a_worker_and_agrees_with_the_run_log() {
    // `serve` on SQLite.
    let serve = Proc::start(
        "monitor-serve",
        &["serve"],
        &[
            ("QIWU_LISTEN", "127.0.0.1:0".into()),
            ("QIWU_DATABASE_URL", "sqlite://qiwu.db".into()),
            ("QIWU_JWT_SECRET", SECRET.into()),
            ("QIWU_TIMEZONE", "UTC".into()),
        ],
        &[],
    );
    let serve_db = format!("sqlite://{}", serve.path("qiwu.db").display());
    // A cluster: PostgreSQL, Redis, one api and one worker.
    let redis = Redis::start();
    let db = Database::fresh();
    db.migrate();
    let api = Proc::start(
        "monitor-api",
        &["api"],
        &cluster_env(&db, &redis, "prom-api"),
        &[],
    );
    let worker = Proc::start(
        "monitor-worker",
        &["worker"],
        &cluster_env(&db, &redis, "prom-worker-1"),
        &[],
    );
    until("the worker is ready", LIMIT, async || {
        let res = client().get(worker.url("/readyz")).send().await.ok()?;
        res.status().is_success().then_some(())
    })
    .await;
    let prom = Prometheus::start(&[
        ("qiwu-serve", &host(&serve)),
        ("qiwu-api", &host(&api)),
        ("qiwu-worker", &host(&worker)),
    ])
    .await;

    let on_serve = every_second_echo(&serve.base, "metered on serve").await;
    let on_cluster = every_second_echo(&api.base, "metered on the cluster").await;
    let serve_store = qiwu_storage::Store::connect(&serve_db).await.expect("open");
    let cluster_store = qiwu_storage::Store::connect(&db.url).await.expect("open");
    // A few fires on each.
    until("a few fires on each", LIMIT, async || {
        let n = |store: &qiwu_storage::Store, job: i64| {
            let store = store.clone();
            async move {
                run::Entity::find()
                    .filter(run::Column::JobId.eq(job))
                    .filter(run::Column::Status.eq("success"))
                    .count(store.connection())
                    .await
                    .unwrap_or(0)
            }
        };
        (n(&serve_store, on_serve).await >= 3 && n(&cluster_store, on_cluster).await >= 3)
            .then_some(())
    })
    .await;
    // The per-job series come from the API process, the job's name as
    // `exported_job` (Prometheus keeps `job` for the scrape job).
    let query = format!(
        "qiwu_job_last_success_timestamp_seconds{{job=\"qiwu-api\",job_id=\"{on_cluster}\",exported_job=\"metered on the cluster\"}}"
    );
    let created = chrono::Utc::now().timestamp() as f64 - 60.0;
    until("the per-job series are scraped", LIMIT, async || {
        prom.value(&query).await.filter(|t| *t > created)
    })
    .await;
    disable(&serve.base, on_serve).await;
    disable(&api.base, on_cluster).await;

    for (job, url, instance) in [
        ("qiwu-serve", serve_db.as_str(), None),
        ("qiwu-worker", db.url.as_str(), Some("prom-worker-1")),
    ] {
        let (claims, ran, successes) = recorded(url, instance).await;
        assert!(successes >= 3, "{job}: {successes} successes");
        for (query, expected) in [
            (
                format!(
                    "qiwu_runs_total{{job=\"{job}\",handler=\"demo.echo\",status=\"success\"}}"
                ),
                successes,
            ),
            (
                format!("qiwu_run_duration_seconds_count{{job=\"{job}\",handler=\"demo.echo\"}}"),
                ran,
            ),
            (
                format!("sum(qiwu_fire_lag_seconds_count{{job=\"{job}\",trigger=\"schedule\"}})"),
                // The lag of built-in jobs' fires counts too; at least ours.
                claims,
            ),
        ] {
            let got = until(&format!("{query} = {expected}"), LIMIT, async || {
                let v = prom.value(&query).await?;
                let fits = if query.starts_with("sum(qiwu_fire_lag") {
                    v >= expected as f64
                } else {
                    v == expected as f64
                };
                fits.then_some(v)
            })
            .await;
            assert!(got >= 1.0, "{query}");
        }
    }
    // Every target is up, and the per-job series come from the API
    // processes only: the worker does not repeat them.
    for job in ["qiwu-serve", "qiwu-api", "qiwu-worker"] {
        let up = format!("up{{job=\"{job}\"}}");
        until(&format!("{job} is up"), LIMIT, async || {
            (prom.value(&up).await == Some(1.0)).then_some(())
        })
        .await;
    }
    assert_eq!(
        prom.value("count(qiwu_job_last_run_status{job=\"qiwu-worker\"})")
            .await,
        None,
        "workers export no per-job series"
    );
    assert_eq!(
        prom.value("qiwu_live_workers{job=\"qiwu-worker\"}").await,
        Some(1.0)
    );
    assert!(
        prom.value("qiwu_heartbeat_age_seconds{job=\"qiwu-worker\"}")
            .await
            .is_some_and(|age| age < 10.0)
    );
    // The expositions parse strictly and every family is documented.
    let documented = documented();
    for p in [&serve, &api, &worker] {
        scrape_documented(p, &documented).await;
    }
}

/// What `/readyz` answers: its status code and body.
async fn readyz(p: &Proc) -> (u16, String) {
    match client().get(p.url("/readyz")).send().await {
        Ok(res) => (res.status().as_u16(), res.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_waits_for_the_schema_and_fails_through_database_and_redis_outages() {
    let redis = Redis::start();
    let db = Database::fresh();
    // A worker started before `migrate`: alive, not ready, and it says why.
    let worker = Proc::start(
        "ready-worker",
        &["worker"],
        &cluster_env(&db, &redis, "ready-worker-1"),
        &[],
    );
    let body = until("503 while waiting for migrations", LIMIT, async || {
        let (status, body) = readyz(&worker).await;
        (status == 503 && body.contains("waiting for migrations")).then_some(body)
    })
    .await;
    assert!(body.contains("qiwu-scheduler migrate"), "{body}");
    let health = client()
        .get(worker.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    db.migrate();
    until("ready once migrated", LIMIT, async || {
        (readyz(&worker).await.0 == 200).then_some(())
    })
    .await;
    let api = Proc::start(
        "ready-api",
        &["api"],
        &cluster_env(&db, &redis, "ready-api"),
        &[],
    );
    until("the api is ready", LIMIT, async || {
        (readyz(&api).await.0 == 200).then_some(())
    })
    .await;

    // The database refuses every connection: both say so, and stay alive.
    db.admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS false",
        db.name
    ));
    db.admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
        db.name
    ));
    for p in [&worker, &api] {
        let body = until("503 during the outage", LIMIT, async || {
            let (status, body) = readyz(p).await;
            (status == 503).then_some(body)
        })
        .await;
        assert!(body.contains("database unreachable"), "{body}");
        let health = client()
            .get(p.url("/healthz"))
            .send()
            .await
            .expect("healthz");
        assert_eq!(
            health.status(),
            StatusCode::OK,
            "liveness does not depend on the database"
        );
    }
    db.admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        db.name
    ));
    for p in [&worker, &api] {
        until("ready again after the outage", LIMIT, async || {
            (readyz(p).await.0 == 200).then_some(())
        })
        .await;
    }

    // Redis, which a cluster requires, goes away: unready, still alive.
    drop(redis);
    for p in [&worker, &api] {
        let body = until("503 without Redis", LIMIT, async || {
            let (status, body) = readyz(p).await;
            (status == 503 && body.contains("redis unreachable")).then_some(body)
        })
        .await;
        assert!(body.contains("\"unready\""), "{body}");
        let health = client()
            .get(p.url("/healthz"))
            .send()
            .await
            .expect("healthz");
        assert_eq!(health.status(), StatusCode::OK);
    }
}
