//! Distributed mode, end to end: `api` + several `worker` processes on
//! PostgreSQL (or MariaDB) and a Redis server of the test's own, with a
//! worker killed and restarted, Redis restarted, and a job disabled while
//! everything runs.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use crate::common;
use crate::common::cluster::Cluster;
use crate::common::{Db, admin_token, client, now_ms};
use qiwu_storage::entity::run;
use reqwest::StatusCode;
use sea_orm::EntityTrait;
use serde_json::json;

async fn all_runs(store: &qiwu_storage::Store) -> Vec<run::Model> {
    run::Entity::find()
        .all(store.connection())
        .await
        .expect("read runs")
}

/// Asserts the guarantees over the whole run log: every scheduled second of
/// every job has exactly one record (a run, a skip, or one catch-up for
/// several), none after a job was disabled, the serial job never overlaps
/// itself, and nothing is left running.
async fn check(
    store: &qiwu_storage::Store,
    jobs: &[i64],
    window: (i64, i64),
    disabled: Option<(i64, i64)>,
    serial: Option<i64>,
) -> Vec<run::Model> {
    let runs = all_runs(store).await;
    let (from, to) = window;
    for job in jobs {
        let until = match disabled {
            Some((id, at)) if id == *job => at - 1000,
            _ => to,
        };
        common::assert_every_second_recorded(store, *job, from, until).await;
    }
    // The disabled job stopped within a second on every worker.
    if let Some((id, at)) = disabled {
        let late: Vec<_> = runs
            .iter()
            .filter(|r| r.job_id == id && r.scheduled_at > at + 1000)
            .collect();
        assert!(late.is_empty(), "fired after being disabled: {late:#?}");
    }
    // The non-concurrent job never overlapped itself. A fire claimed ahead
    // writes its real start at its end; one whose process was killed while
    // it waited (or ran) is closed by the sweep with its start unknown
    // (still its time): it tells nothing about overlap, and there is at
    // most one per kill.
    if let Some(id) = serial {
        let unknown_start = |r: &run::Model| {
            r.started_at == r.scheduled_at
                && (r.error.contains("before the run finished")
                    || r.error.contains("the run was closed"))
        };
        let swept = runs
            .iter()
            .filter(|r| r.job_id == id && unknown_start(r))
            .count();
        assert!(
            swept <= 2,
            "serial runs closed with their start unknown: {swept}"
        );
        let mut spans: Vec<(i64, i64, &str)> = runs
            .iter()
            .filter(|r| r.job_id == id && r.status != "skipped" && r.finished_at.is_some())
            .filter(|r| !unknown_start(r))
            .map(|r| {
                (
                    r.started_at,
                    r.finished_at.unwrap_or(r.started_at),
                    r.instance.as_str(),
                )
            })
            .collect();
        spans.sort();
        for pair in spans.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "overlapping runs of the serial job: {pair:?}"
            );
        }
        assert!(spans.len() >= 3, "the serial job ran: {spans:?}");
    }
    // Nothing left running.
    let running: Vec<_> = runs.iter().filter(|r| r.status == "running").collect();
    assert!(running.is_empty(), "runs left running: {running:#?}");
    runs
}

/// Most a phase of the scenarios below may take on a busy machine.
const PHASE: Duration = Duration::from_secs(90);

/// True when every job has a record scheduled at or after `at` (ms).
fn all_fired_since(runs: &[run::Model], jobs: &[i64], at: i64) -> bool {
    jobs.iter().all(|job| {
        runs.iter()
            .any(|r| r.job_id == *job && r.scheduled_at >= at)
    })
}

/// How many records `instance` made for fire times at or after `at` (ms).
fn claimed_since(runs: &[run::Model], instance: &str, at: i64) -> usize {
    runs.iter()
        .filter(|r| r.instance == instance && r.scheduled_at >= at)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_on_postgres_through_kill_redis_restart_and_disable() {
    let mut cluster = Cluster::start(Db::Postgres, 3);
    let mut jobs = Vec::new();
    for i in 0..30 {
        jobs.push(cluster.create(json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"})).await);
    }
    let serial = cluster
        .create(json!({"name": "serial", "handler": "demo.echo", "cron": "*/3 * * * * *", "timeoutMs": 0, "params": {"delayMs": 4000}}))
        .await;
    let store = cluster.store().await;
    // Measure from once every job fires (every worker armed them).
    let created = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| all_fired_since(runs, &jobs, created)).await;
    let from = now_ms() + 1000;

    // A crash: once w2 has done its share, kill it; the others take its
    // jobs over (every job fires again after the kill).
    common::wait_for_all_runs(&store, PHASE, |runs| claimed_since(runs, "w2", from) >= 10).await;
    let killed = cluster.workers.remove("w2").expect("w2");
    let _ = killed.kill();
    let killed_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        all_fired_since(runs, &jobs, killed_at + 3000)
    })
    .await;
    // Back: w2 claims fires again.
    cluster.start_worker("w2");
    let back_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        claimed_since(runs, "w2", back_at) >= 5
    })
    .await;
    // Redis restarts under the cluster: every job and every worker goes on.
    cluster.redis.restart();
    let restarted_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        all_fired_since(runs, &jobs, restarted_at + 3000)
            && ["w1", "w2", "w3"]
                .iter()
                .all(|w| claimed_since(runs, w, restarted_at + 3000) > 0)
    })
    .await;
    // A job disabled while everything runs stops within a second.
    let disabled_job = jobs[5];
    let resp = client()
        .put(
            cluster
                .api
                .url(&format!("/api/jobs/{disabled_job}/enabled")),
        )
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let disabled_at = now_ms();
    let others: Vec<i64> = jobs
        .iter()
        .copied()
        .filter(|j| *j != disabled_job)
        .collect();
    // The serial job runs at most every other time (each run outlasts its
    // period); a Redis restart can cut one short: wait for three to end.
    common::wait_for_all_runs(&store, PHASE, |runs| {
        all_fired_since(runs, &others, disabled_at + 6000)
            && runs
                .iter()
                .filter(|r| r.job_id == serial && r.status == "success")
                .count()
                >= 3
    })
    .await;
    let to = now_ms() - 2000;

    // Stop every worker cleanly; nothing may be left running.
    cluster.stop_workers();
    let runs = check(
        &store,
        &jobs,
        (from, to),
        Some((disabled_job, disabled_at)),
        Some(serial),
    )
    .await;
    // The work was shared: every worker claimed fires.
    let mut by_instance: HashMap<&str, usize> = HashMap::new();
    for r in &runs {
        *by_instance.entry(r.instance.as_str()).or_default() += 1;
    }
    for id in ["w1", "w2", "w3"] {
        assert!(
            by_instance.get(id).copied().unwrap_or(0) > 10,
            "{id} did work: {by_instance:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_on_mariadb_through_a_kill_and_a_rolling_restart() {
    let mut cluster = Cluster::start(Db::MySql, 2);
    let mut jobs = Vec::new();
    for i in 0..10 {
        jobs.push(
            cluster
                .create(json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"}))
                .await,
        );
    }
    let store = cluster.store().await;
    let created = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| all_fired_since(runs, &jobs, created)).await;
    let from = now_ms() + 1000;
    // A crash: w2 keeps every job firing.
    common::wait_for_all_runs(&store, PHASE, |runs| claimed_since(runs, "w1", from) >= 5).await;
    let killed = cluster.workers.remove("w1").expect("w1");
    let _ = killed.kill();
    let killed_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        all_fired_since(runs, &jobs, killed_at + 3000)
    })
    .await;
    cluster.start_worker("w1");
    let back_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        claimed_since(runs, "w1", back_at) >= 3
    })
    .await;
    // A rolling restart: stop w2 cleanly, start it again.
    let stopped = cluster.workers.remove("w2").expect("w2");
    let _ = stopped.stop();
    let stopped_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        all_fired_since(runs, &jobs, stopped_at + 2000)
    })
    .await;
    cluster.start_worker("w2");
    let back_at = now_ms();
    common::wait_for_all_runs(&store, PHASE, |runs| {
        claimed_since(runs, "w2", back_at) >= 3
    })
    .await;
    let to = now_ms() - 2000;
    cluster.stop_workers();
    check(&store, &jobs, (from, to), None, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_another_time_zone_refuses_to_start() {
    let cluster = Cluster::start(Db::Postgres, 0);
    let mut env = cluster.env("w-tokyo");
    env.retain(|(k, _)| *k != "QIWU_TIMEZONE");
    env.push(("QIWU_TIMEZONE", "Asia/Tokyo".into()));
    let out = Command::new(common::BIN)
        .arg("worker")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run worker");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("QIWU_TIMEZONE=Asia/Tokyo differs from the cluster's zone UTC"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_handler_and_records_failed() {
    let mut cluster = Cluster::start(Db::Postgres, 1);
    let job = cluster
        .create(json!({"name": "long", "handler": "demo.echo", "enabled": false, "timeoutMs": 0, "retryCount": 3, "params": {"delayMs": 60000}}))
        .await;
    let run_once = |cluster: &Cluster| {
        let url = cluster.api.url(&format!("/api/jobs/{job}/run"));
        async move {
            let resp = client()
                .post(url)
                .bearer_auth(admin_token())
                .send()
                .await
                .expect("request");
            assert_eq!(resp.status(), StatusCode::ACCEPTED);
        }
    };
    run_once(&cluster).await;
    let store = cluster.store().await;
    let started = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    assert_eq!(started.len(), 1);
    // Cut Redis: the renewal cannot be confirmed.
    cluster.redis.stop();
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert_eq!(runs.len(), 1, "a lost lock is never retried: {runs:#?}");
    assert_eq!(runs[0].status, "failed");
    assert!(runs[0].error.contains("lock"), "{runs:#?}");
    // Recorded before the TTL (10 s) could run out.
    let held = runs[0].finished_at.unwrap_or(0) - runs[0].started_at;
    assert!(held < 10_000, "held {held} ms");
    // With Redis back, the next run starts only now, after the first ended.
    cluster.redis.restart();
    // Run once is announced over Redis: wait until every worker listens
    // again (the database would tell them only at the next reconciliation).
    cluster.until_workers_listen().await;
    run_once(&cluster).await;
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().filter(|r| r.status == "running").count() == 1 && runs.len() == 2
    })
    .await;
    let first_end = runs[0].finished_at.unwrap_or(i64::MAX);
    assert!(runs[1].started_at >= first_end, "{runs:#?}");
    cluster.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_cancelled_on_the_worker_running_it_even_when_the_message_is_lost() {
    let mut cluster = Cluster::start(Db::Postgres, 2);
    let job = cluster
        .create(json!({"name": "long", "handler": "demo.echo", "enabled": false, "timeoutMs": 0, "retryCount": 2, "params": {"delayMs": 600000}}))
        .await;
    let store = cluster.store().await;
    let run_once = || async {
        let resp = client()
            .post(cluster.api.url(&format!("/api/jobs/{job}/run")))
            .bearer_auth(admin_token())
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
    };
    // Through the API: the api process tells the workers over Redis.
    run_once().await;
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let run = runs[0].id;
    let asked = std::time::Instant::now();
    let resp = client()
        .post(cluster.api.url(&format!("/api/runs/{run}/cancel")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(runs.len(), 1, "never retried: {runs:#?}");
    assert_eq!(runs[0].status, "cancelled");
    assert!(runs[0].error.contains("Cancelled by admin"), "{runs:#?}");
    assert!(runs[0].instance.starts_with('w'), "{runs:#?}");
    // A request no message announces: the worker running it reads it.
    run_once().await;
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let second = runs
        .iter()
        .find(|r| r.status == "running")
        .expect("running")
        .id;
    let asked = std::time::Instant::now();
    store
        .runs()
        .request_cancel(second, "apikey:ops", chrono::Utc::now())
        .await
        .expect("request");
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    let second = runs.iter().find(|r| r.id == second).expect("run");
    assert_eq!(second.status, "cancelled", "{runs:#?}");
    assert!(second.error.contains("apikey:ops"), "{runs:#?}");
    // Cancelling it again is a conflict.
    let resp = client()
        .post(cluster.api.url(&format!("/api/runs/{}/cancel", second.id)))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    cluster.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_stops_the_running_fire_on_another_worker_before_the_next_starts() {
    let mut cluster = Cluster::start(Db::Postgres, 2);
    // Every 3 s, 20 s of work: each fire replaces the one before, wherever
    // it runs (the job's owners are two workers, and run-once fires go to
    // whichever worker takes them).
    let job = cluster
        .create(
            json!({"name": "replaced", "handler": "demo.echo", "cron": "*/3 * * * * *",
                       "timeoutMs": 0, "overlapPolicy": "replace", "params": {"delayMs": 20000}}),
        )
        .await;
    let store = cluster.store().await;
    // Run-once fires every 1.5 s land on either worker, some arriving
    // while another fire waits for its turn, until a running fire was
    // replaced from the other worker (which worker takes a fire is chance).
    let started = std::time::Instant::now();
    loop {
        let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
            runs.iter().any(|r| r.status == "running")
        })
        .await;
        let ran_and_cancelled = runs
            .iter()
            .filter(|r| r.status == "cancelled" && !never_ran(r))
            .count();
        if ran_and_cancelled >= 4 && replaced_across_workers(&runs) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "no replace across workers in 150 s: {runs:#?}"
        );
        let resp = client()
            .post(cluster.api.url(&format!("/api/jobs/{job}/run")))
            .bearer_auth(admin_token())
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    cluster.stop_workers();
    let runs = all_runs(&store)
        .await
        .into_iter()
        .filter(|r| r.job_id == job)
        .collect::<Vec<_>>();
    // Never two at once: each started after the one it replaced ended
    // (times from two workers' clocks, each corrected against the
    // database's, may disagree by a few tens of ms). A fire replaced while
    // it waited for its turn never ran and holds no time.
    let mut spans: Vec<(i64, i64, &str)> = runs
        .iter()
        .filter(|r| r.status != "skipped" && !never_ran(r))
        .map(|r| {
            (
                r.started_at,
                r.finished_at.unwrap_or(i64::MAX),
                r.instance.as_str(),
            )
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let skew = if pair[0].2 == pair[1].2 { 0 } else { 200 };
        assert!(pair[1].0 + skew >= pair[0].1, "overlapping runs: {pair:?}");
    }
    let cancelled: Vec<_> = runs.iter().filter(|r| r.status == "cancelled").collect();
    assert!(
        cancelled
            .iter()
            .all(|r| r.error.contains("Replaced by the fire of")),
        "{cancelled:#?}"
    );
    assert!(replaced_across_workers(&runs), "{runs:#?}");
}

/// A fire cancelled or replaced while it waited for its turn (its handler
/// never started).
fn never_ran(run: &run::Model) -> bool {
    run.status == "cancelled" && run.error.contains("it never ran")
}

/// A fire that ran was replaced by the next fire that ran, on the other
/// worker.
fn replaced_across_workers(runs: &[run::Model]) -> bool {
    let mut ran: Vec<_> = runs
        .iter()
        .filter(|r| r.status != "skipped" && !never_ran(r))
        .collect();
    ran.sort_by_key(|r| r.started_at);
    ran.windows(2)
        .any(|p| p[0].status == "cancelled" && p[0].instance != p[1].instance)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_of_a_worker_that_stops_heart_beating_are_closed() {
    let mut cluster = Cluster::start(Db::Postgres, 2);
    let job = cluster
        .create(json!({"name": "long", "handler": "demo.echo", "enabled": false, "timeoutMs": 0, "params": {"delayMs": 600000}}))
        .await;
    let resp = client()
        .post(cluster.api.url(&format!("/api/jobs/{job}/run")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let store = cluster.store().await;
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let owner = runs[0].instance.clone();
    let killed_at = std::time::Instant::now();
    let victim = cluster.workers.remove(&owner).expect("the running worker");
    let _ = victim.kill();
    // The survivor closes the run within 30 s (15 s of silence + a beat).
    let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert!(
        killed_at.elapsed() < Duration::from_secs(30),
        "{:?}",
        killed_at.elapsed()
    );
    assert_eq!(runs[0].status, "failed");
    assert!(runs[0].error.contains("Instance lost"), "{runs:#?}");
    cluster.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_once_in_a_cluster_runs_once_and_is_never_a_lost_race() {
    let mut cluster = Cluster::start(Db::Postgres, 3);
    let job = cluster
        .create(json!({"name": "manual", "handler": "demo.echo", "enabled": false, "params": {"message": "ran"}}))
        .await;
    let store = cluster.store().await;
    for round in 1..=5 {
        let resp = client()
            .post(cluster.api.url(&format!("/api/jobs/{job}/run")))
            .bearer_auth(admin_token())
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        let runs = common::wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
            runs.len() == round && runs.iter().all(|r| r.status != "running")
        })
        .await;
        // Every worker heard the message; exactly one ran it, and ran it.
        let last = runs.iter().max_by_key(|r| r.id).expect("a run");
        assert_eq!(
            (last.status.as_str(), last.output.as_str()),
            ("success", "ran"),
            "{runs:#?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        all_runs(&store)
            .await
            .iter()
            .filter(|r| r.job_id == job)
            .count(),
        5
    );
    cluster.stop_workers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_rediss_fires_and_locks() {
    use crate::common::cluster::{TlsRedis, cluster_env, migrate};
    use crate::common::{Server, TempDir, fresh_database};
    let redis = TlsRedis::start();
    let (url, name) = fresh_database(Db::Postgres);
    migrate(&url, &redis.url());
    let env = |id: &str| {
        let mut env = cluster_env(&url, &redis.url(), id);
        env.push(("SSL_CERT_FILE", redis.ca()));
        env
    };
    let api = Server::spawn(TempDir::new("api"), &["api"], &env("api-1"), true);
    let worker = Server::spawn(TempDir::new("worker"), &["worker"], &env("w1"), true);
    let resp = client()
        .post(api.url("/api/jobs"))
        .bearer_auth(admin_token())
        .json(&json!({"name": "over tls", "handler": "demo.echo", "cron": "* * * * * *"}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let job: serde_json::Value = resp.json().await.expect("json");
    let id = job["id"].as_i64().expect("id");
    let store = qiwu_storage::Store::connect(&url).await.expect("db");
    // A non-concurrent job takes its Redis lock over TLS for every run.
    let runs = common::wait_for_runs(&store, id, Duration::from_secs(30), |runs| {
        runs.iter().filter(|r| r.status == "success").count() >= 2
    })
    .await;
    assert!(runs.iter().all(|r| r.status != "failed"), "{runs:#?}");
    drop((api, worker, store));
    common::drop_database(Db::Postgres, &name);
}
