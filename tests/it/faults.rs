//! Faults, end to end: the database goes away (stopped, frozen, its file
//! locked), workers start before the schema, two of three workers die at
//! once, change messages are lost. Whatever happens, every scheduled
//! second of every job ends with exactly one record (a run, a skip, or one
//! catch-up standing for several), nothing stays `running`, and every
//! process is alive and ready at the end.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::cluster::{Cluster, MariaDb, Postgres, Redis};
use crate::common::{
    Db, Server, admin_token, assert_every_second_recorded, client, now_ms, records,
    wait_until_recorded,
};
use qiwu_storage::entity::run;
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;

async fn running(store: &qiwu_storage::Store) -> Vec<run::Model> {
    run::Entity::find()
        .filter(run::Column::Status.eq("running"))
        .all(store.connection())
        .await
        .expect("read runs")
}

/// Waits until no run is `running` (at most `limit`).
async fn until_nothing_running(store: &qiwu_storage::Store, limit: Duration) {
    let start = Instant::now();
    loop {
        let left = running(store).await;
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "runs still running after {limit:?}: {left:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `GET /readyz` of a process: its status and body.
async fn ready(server: &Server) -> (StatusCode, String) {
    match client().get(server.url("/readyz")).send().await {
        Ok(resp) => {
            let status = resp.status();
            (status, resp.text().await.unwrap_or_default())
        }
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// Waits until `/readyz` answers 200 (at most `limit`).
async fn until_ready(server: &Server, limit: Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = ready(server).await;
        if status == StatusCode::OK {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "not ready after {limit:?}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `/readyz` is 503 with a body containing `needle`.
async fn until_unready_saying(server: &Server, needle: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let (status, body) = ready(server).await;
        if status == StatusCode::SERVICE_UNAVAILABLE && body.contains(needle) {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "/readyz never said {needle:?} within {limit:?}; last: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn assert_alive(server: &mut Server, what: &str) {
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "{what} exited"
    );
}

/// Every worker of the cluster is still running and answers `/readyz`
/// with 200 (within 20 s): an outage left no worker dead or stuck.
async fn assert_workers_alive_and_ready(cluster: &mut Cluster) {
    for (id, worker) in cluster.workers.iter_mut() {
        assert_alive(worker, id);
    }
    for worker in cluster.workers.values() {
        until_ready(worker, Duration::from_secs(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_then_frozen_database_leaves_one_record_per_fire_time() {
    let pg = Postgres::start();
    let url = pg.database("qiwu");
    let mut cluster = Cluster::start_on(url, Redis::start(), 3);
    let mut jobs = Vec::new();
    for i in 0..30 {
        jobs.push(cluster.create(json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"})).await);
    }
    let long = cluster
        .create(json!({"name": "long", "handler": "demo.echo", "cron": "*/5 * * * * *", "timeoutMs": 0, "params": {"delayMs": 7000}}))
        .await;
    cluster.until_firing(&jobs).await;
    let from = now_ms();
    tokio::time::sleep(Duration::from_secs(4)).await;

    let outage_start = now_ms();
    pg.stop();
    tokio::time::sleep(Duration::from_secs(20)).await;
    pg.resume();
    let stop_end = now_ms();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let freeze_start = now_ms();
    pg.freeze();
    tokio::time::sleep(Duration::from_secs(10)).await;
    pg.thaw();
    let back = Instant::now();
    let freeze_end = now_ms();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let to = now_ms() - 2000;

    let store = cluster.store().await;
    let backlog = wait_until_recorded(&store, &jobs, from, to, Duration::from_secs(60)).await;
    let mut all = jobs.clone();
    all.push(long);
    // The long job's fires (every 5 s) are recorded too: runs or skips.
    for job in &all {
        let records = records(&store, *job).await;
        assert!(
            records.iter().all(|r| r.first_runs.len() == 1),
            "job {job}: {records:#?}"
        );
    }
    // The figures of the outage, for the record.
    let mut catch_ups = 0;
    let mut standing_for = 0;
    for job in &jobs {
        for r in records(&store, *job).await {
            if r.trigger == "misfire" && r.last >= outage_start {
                catch_ups += 1;
                standing_for += (r.last - r.first) / 1000 + 1;
            }
        }
    }
    println!(
        "outage: stopped {} s, frozen {} s; {} job-seconds in the windows recorded by {} catch-up records; \
         the backlog was recorded {:.1} s after the freeze ended (checked {:.1} s after thawing)",
        (stop_end - outage_start) / 1000,
        (freeze_end - freeze_start) / 1000,
        standing_for,
        catch_ups,
        back.elapsed().as_secs_f64() - backlog.as_secs_f64(),
        back.elapsed().as_secs_f64(),
    );

    // Nothing stays running once the long job is disabled (it ends within
    // its 7 s), and no run of a live worker was closed as lost.
    let resp = client()
        .put(cluster.api.url(&format!("/api/jobs/{long}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    until_nothing_running(&store, Duration::from_secs(45)).await;
    let lost = run::Entity::find()
        .filter(run::Column::Error.contains("Instance lost"))
        .all(store.connection())
        .await
        .expect("runs");
    assert!(
        lost.is_empty(),
        "live workers' runs closed as lost: {lost:#?}"
    );
    assert_workers_alive_and_ready(&mut cluster).await;
    assert_alive(&mut cluster.api, "api");
    until_ready(&cluster.api, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_sqlite_through_a_locked_file_leaves_one_record_per_fire_time() {
    use sea_orm::sqlx::{Connection, SqliteConnection};
    let mut server = Server::start();
    let mut jobs = Vec::new();
    for i in 0..10 {
        let resp = client()
            .post(server.url("/api/jobs"))
            .bearer_auth(admin_token())
            .json(&json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"}))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::CREATED);
        let job: serde_json::Value = resp.json().await.expect("json");
        jobs.push(job["id"].as_i64().expect("id"));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let from = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Another connection takes the write lock of the file for 20 s.
    let url = format!("sqlite://{}/qiwu.db", server.dir.path().display());
    let mut locker = SqliteConnection::connect(&url)
        .await
        .expect("open the file");
    sea_orm::sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut locker)
        .await
        .expect("lock");
    tokio::time::sleep(Duration::from_secs(20)).await;
    sea_orm::sqlx::query("COMMIT")
        .execute(&mut locker)
        .await
        .expect("unlock");
    drop(locker);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let to = now_ms() - 2000;
    let store = server.store().await;
    let backlog = wait_until_recorded(&store, &jobs, from, to, Duration::from_secs(60)).await;
    println!(
        "locked file: recorded {:.1} s after the check began",
        backlog.as_secs_f64()
    );
    until_nothing_running(&store, Duration::from_secs(10)).await;
    assert_alive(&mut server, "serve");
    until_ready(&server, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_wait_for_the_database_and_the_schema_then_arm_everything() {
    let pg = Postgres::start();
    let url = pg.database("qiwu");
    let redis = Redis::start();
    pg.stop();
    // Two workers start while the database is down: not ready, alive.
    let env = |id: &str| common::cluster::cluster_env(&url, &redis.url(), id);
    let mut workers: Vec<Server> = ["w1", "w2"]
        .iter()
        .map(|id| Server::spawn(common::TempDir::new("worker"), &["worker"], &env(id), true))
        .collect();
    for w in &workers {
        until_unready_saying(w, "database", Duration::from_secs(20)).await;
    }
    // The database is back but empty: they wait for the migrations.
    pg.resume();
    for w in &workers {
        until_unready_saying(w, "waiting for migrations", Duration::from_secs(30)).await;
    }
    // `api` migrates; the workers start and fire.
    let api = Server::spawn(common::TempDir::new("api"), &["api"], &env("api-1"), true);
    for w in &workers {
        until_ready(w, Duration::from_secs(30)).await;
    }
    let mut jobs = Vec::new();
    for i in 0..5 {
        let resp = client()
            .post(api.url("/api/jobs"))
            .bearer_auth(admin_token())
            .json(&json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"}))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::CREATED);
        let job: serde_json::Value = resp.json().await.expect("json");
        jobs.push(job["id"].as_i64().expect("id"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from = now_ms();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let to = now_ms() - 1500;
    let store = qiwu_storage::Store::connect(&url).await.expect("db");
    wait_until_recorded(&store, &jobs, from, to, Duration::from_secs(20)).await;
    for (i, w) in workers.iter_mut().enumerate() {
        assert_alive(w, &format!("worker {i}"));
    }
}

/// Runs `count` every-second jobs on a 3-worker cluster, takes two workers
/// away at the same moment (by `kill`), and checks every second.
async fn two_of_three_go_at_once(kill: bool) {
    let mut cluster = Cluster::start(Db::Postgres, 3);
    let mut jobs = Vec::new();
    for i in 0..20 {
        jobs.push(cluster.create(json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"})).await);
    }
    cluster.until_firing(&jobs).await;
    let from = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let gone: Vec<Server> = ["w1", "w2"]
        .iter()
        .filter_map(|id| cluster.workers.remove(*id))
        .collect();
    if kill {
        for g in gone {
            drop(g.kill());
        }
    } else {
        let pids: Vec<String> = gone.iter().map(|g| g.child.id().to_string()).collect();
        let status = std::process::Command::new("kill")
            .arg("-TERM")
            .args(&pids)
            .status()
            .expect("kill");
        assert!(status.success());
        for g in gone {
            let _ = g.kill();
        }
    }
    // The survivor notices (3 s after a clean stop, 15–18 s after a crash)
    // and records what nobody fired meanwhile.
    tokio::time::sleep(Duration::from_secs(if kill { 24 } else { 8 })).await;
    let to = now_ms() - 2000;
    let store = cluster.store().await;
    wait_until_recorded(&store, &jobs, from, to, Duration::from_secs(30)).await;
    cluster.stop_workers();
    for job in &jobs {
        assert_every_second_recorded(&store, *job, from, to).await;
    }
    assert!(running(&store).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_workers_killed_at_once_leave_no_second_unrecorded() {
    two_of_three_go_at_once(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_workers_stopped_at_once_leave_no_second_unrecorded() {
    two_of_three_go_at_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_whose_change_message_is_lost() {
    let mut cluster = Cluster::start(Db::Postgres, 2);
    let job = cluster
        .create(json!({"name": "tick", "handler": "demo.echo", "cron": "* * * * * *", "allowConcurrent": true}))
        .await;
    cluster.until_firing(&[job]).await;
    let from = now_ms();
    // Redis holds every write (the change messages) for 8 s: a remark edit
    // is never announced, and loses no fire.
    cluster.redis.cli(&["CLIENT", "PAUSE", "8000", "WRITE"]);
    let edit = |body: serde_json::Value| {
        let url = cluster.api.url(&format!("/api/jobs/{job}"));
        async move {
            let resp = client()
                .put(url)
                .bearer_auth(admin_token())
                .json(&body)
                .send()
                .await
                .expect("request");
            assert_eq!(resp.status(), StatusCode::OK);
            let job: serde_json::Value = resp.json().await.expect("json");
            job["version"].as_i64().expect("version")
        }
    };
    let version = edit(json!({"version": 1, "remark": "edited while Redis holds writes"})).await;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let to = now_ms() - 1500;
    let store = cluster.store().await;
    wait_until_recorded(&store, &[job], from, to, Duration::from_secs(10)).await;
    // A cron edit with its message lost: the old schedule is never fired
    // again (its claims find the schedule changed and re-read the job).
    cluster.redis.cli(&["CLIENT", "PAUSE", "5000", "WRITE"]);
    edit(json!({"version": version, "cron": "*/4 * * * * *"})).await;
    let edited_at = now_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    cluster.stop_workers();
    let late: Vec<_> = records(&store, job)
        .await
        .into_iter()
        .filter(|r| r.first > edited_at + 1000 && r.last % 4000 != 0)
        .collect();
    assert!(
        late.is_empty(),
        "the old schedule fired after the edit: {late:#?}"
    );
    let new_schedule = records(&store, job)
        .await
        .into_iter()
        .filter(|r| r.first > edited_at + 1000)
        .count();
    assert!(new_schedule >= 2, "the new schedule fires");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_characters_in_output_are_stored_on_every_database() {
    for db in [Db::Sqlite, Db::Postgres, Db::MySql] {
        let server = Server::start_with(db, &[]);
        let resp = client()
            .post(server.url("/api/jobs"))
            .bearer_auth(admin_token())
            .json(&json!({"name": "odd", "handler": "demo.echo", "enabled": false, "params": {"message": "a\u{0}b \u{1F600} \u{7}"}}))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::CREATED, "{db:?}");
        let job: serde_json::Value = resp.json().await.expect("json");
        let id = job["id"].as_i64().expect("id");
        let resp = client()
            .post(server.url(&format!("/api/jobs/{id}/run")))
            .bearer_auth(admin_token())
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        let store = server.store().await;
        let runs = common::wait_for_runs(&store, id, Duration::from_secs(20), |runs| {
            runs.first().is_some_and(|r| r.status != "running")
        })
        .await;
        assert_eq!(runs[0].status, "success", "{db:?}: {runs:#?}");
        assert_eq!(runs[0].output, "a\u{FFFD}b \u{1F600} \u{7}", "{db:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_then_frozen_mariadb_leaves_one_record_per_fire_time() {
    let mut db = MariaDb::start();
    let url = db.database("qiwu");
    let mut cluster = Cluster::start_on(url, Redis::start(), 2);
    let mut jobs = Vec::new();
    for i in 0..10 {
        jobs.push(cluster.create(json!({"name": format!("tick-{i}"), "handler": "demo.echo", "cron": "* * * * * *"})).await);
    }
    cluster.until_firing(&jobs).await;
    let from = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    db.stop();
    tokio::time::sleep(Duration::from_secs(15)).await;
    db.resume();
    tokio::time::sleep(Duration::from_secs(6)).await;
    db.freeze();
    tokio::time::sleep(Duration::from_secs(8)).await;
    db.thaw();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let to = now_ms() - 2000;
    let store = cluster.store().await;
    let backlog = wait_until_recorded(&store, &jobs, from, to, Duration::from_secs(60)).await;
    println!(
        "mariadb outage: recorded {:.1} s after the check began",
        backlog.as_secs_f64()
    );
    until_nothing_running(&store, Duration::from_secs(20)).await;
    assert_workers_alive_and_ready(&mut cluster).await;
}
