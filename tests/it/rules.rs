//! The manual's rules of execution (seed 000, SPEC §5), end to end on the
//! real binary: retries and overlaps, run once during a run, enabling and
//! disabling, the misfire window, catch-ups cut short by a crash, one
//! catch-up per job in a cluster, lost change messages, params that a new
//! release no longer accepts, and the built-in jobs' defaults.

use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::{
    Db, Server, admin_token, client, create_job, now_ms, records, run_once, runs_of, wait_for_runs,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

async fn set_enabled(server: &Server, job: i64, enabled: bool) {
    let resp = client()
        .put(server.url(&format!("/api/jobs/{job}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": enabled}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
}

async fn get_job(server: &Server, job: i64) -> Value {
    let resp = client()
        .get(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json().await.expect("json")
}

#[tokio::test]
async fn a_retry_still_running_at_the_next_fire_time_skips_that_fire() {
    let server = Server::start();
    let store = server.store().await;
    // Every 2 s; each attempt times out after 1 s and the retry starts
    // 200 ms later, so the retry is still running at the next fire time.
    let job = create_job(&server, json!({"name": "slow retry", "handler": "demo.echo", "cron": "*/2 * * * * *", "timeoutMs": 1000, "retryCount": 2, "retryIntervalMs": 200, "params": {"delayMs": 1500}})).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "skipped")
    })
    .await;
    let skipped = runs.iter().find(|r| r.status == "skipped").expect("a skip");
    assert_eq!(skipped.attempt, 1);
    assert!(
        skipped.output.contains("previous run has not finished"),
        "{skipped:?}"
    );
    // The skipped time came while an earlier fire's retries were going.
    let earlier = runs
        .iter()
        .filter(|r| r.scheduled_at < skipped.scheduled_at && r.attempt == 2)
        .count();
    assert!(earlier >= 1, "{runs:#?}");
}

#[tokio::test]
async fn run_once_while_a_run_is_going_is_skipped() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "busy", "handler": "demo.echo", "enabled": false, "params": {"delayMs": 3000}})).await;
    run_once(&server, job).await;
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    run_once(&server, job).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.len() == 2 && runs.iter().all(|r| r.status != "running")
    })
    .await;
    let statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["success", "skipped"], "{runs:#?}");
    assert_eq!(runs[1].trigger, "manual");
}

#[tokio::test]
async fn re_enabling_continues_from_the_next_time_and_misses_nothing() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "paused", "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": "run_once"})).await;
    wait_for_runs(&store, job, LIMIT, |runs| runs.len() >= 2).await;
    set_enabled(&server, job, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let enabled_at = now_ms();
    set_enabled(&server, job, true).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.scheduled_at > enabled_at + 1000)
    })
    .await;
    // No catch-up for the disabled seconds, and the next fire is the first
    // time after enabling.
    assert!(runs.iter().all(|r| r.trigger == "schedule"), "{runs:#?}");
    let after: Vec<i64> = runs
        .iter()
        .filter(|r| r.scheduled_at > enabled_at - 2000)
        .map(|r| r.scheduled_at)
        .collect();
    let first = after.iter().copied().min().expect("a fire after enabling");
    assert!(
        first > enabled_at,
        "fired {first} before enabling at {enabled_at}"
    );
    assert!(
        first <= enabled_at + 1000,
        "first fire {first} is the next second after {enabled_at}"
    );
}

#[tokio::test]
async fn disabling_during_a_run_does_not_interrupt_it() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "long", "handler": "demo.echo", "enabled": false, "params": {"delayMs": 2000, "message": "done"}})).await;
    run_once(&server, job).await;
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    set_enabled(&server, job, true).await;
    set_enabled(&server, job, false).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.first().is_some_and(|r| r.status != "running")
    })
    .await;
    assert_eq!(
        (runs[0].status.as_str(), runs[0].output.as_str()),
        ("success", "waiting 2000 ms\ndone")
    );
}

#[tokio::test]
async fn a_new_release_rejecting_saved_params_fails_the_fire_until_the_job_is_edited() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "old params", "handler": "demo.echo", "cron": "* * * * * *", "retryCount": 3})).await;
    {
        use sea_orm::{ConnectionTrait, Statement};
        store
            .connection()
            .execute_raw(Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                format!(
                    r#"UPDATE jobs SET params = '{{"message": 5, "delayMs": 0}}' WHERE id = {job}"#
                ),
            ))
            .await
            .expect("update");
    }
    let changed_at = now_ms();
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.started_at > changed_at + 1000 && r.status == "failed")
    })
    .await;
    let failed: Vec<_> = runs
        .iter()
        .filter(|r| r.started_at > changed_at + 1000)
        .collect();
    assert!(
        failed
            .iter()
            .all(|r| r.attempt == 1 && r.status == "failed"),
        "never retried: {failed:#?}"
    );
    assert!(
        failed[0].error.contains("params/message"),
        "{:?}",
        failed[0]
    );
    // Editing the job fixes it.
    let version = get_job(&server, job).await["version"]
        .as_i64()
        .expect("version");
    let resp = client()
        .put(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .json(&json!({"version": version, "params": {"message": "fixed"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let fixed_at = now_ms();
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.started_at > fixed_at && r.status == "success" && r.output == "fixed")
    })
    .await;
}

#[tokio::test]
async fn the_built_in_jobs_have_the_manuals_defaults() {
    let server = Server::start();
    let resp = client()
        .get(server.url("/api/jobs?pageSize=100"))
        .bearer_auth(admin_token())
        .header("Accept-Language", "zh-CN")
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let page: Value = resp.json().await.expect("json");
    let jobs = page["items"].as_array().expect("items");
    // (name, handler, cron, enabled, misfire, group, timeout); every one
    // without retries or concurrency. session.sweep and wf.task.remind
    // exist only where their services are declared.
    let want = [
        (
            "清理过期日志",
            "audit.purge",
            "0 30 3 * * *",
            true,
            "run_once",
            "system",
            600_000,
        ),
        (
            "派发待发送通知",
            "notify.dispatch",
            "0 * * * * *",
            true,
            "skip",
            "system",
            60_000,
        ),
        (
            "示例：回显消息",
            "demo.echo",
            "0 0 * * * *",
            false,
            "skip",
            "default",
            60_000,
        ),
    ];
    assert_eq!(jobs.len(), want.len(), "{jobs:#?}");
    for (name, handler, cron, enabled, misfire, group, timeout) in want {
        let job = jobs
            .iter()
            .find(|j| j["handler"] == handler)
            .unwrap_or_else(|| panic!("{handler} seeded: {jobs:#?}"));
        assert_eq!(job["name"], name);
        assert_eq!(job["cron"], cron);
        assert_eq!(job["enabled"], enabled);
        assert_eq!(job["misfirePolicy"], misfire);
        assert_eq!(job["group"], group);
        assert_eq!(job["timeoutMs"], timeout);
        assert_eq!(job["retryCount"], 0);
        assert_eq!(job["allowConcurrent"], false);
    }
}

#[tokio::test]
async fn a_catch_up_cut_off_by_a_crash_before_it_started_is_redone() {
    use sea_orm::{ConnectionTrait, Statement};
    let server = Server::start();
    let job = create_job(&server, json!({"name": "catch up", "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": "run_once"})).await;
    let store = server.store().await;
    wait_for_runs(&store, job, LIMIT, |runs| runs.len() >= 2).await;
    drop(store);
    let dir = server.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The restarted process cannot record its catch-up (the ledger is
    // away), and is killed before it could.
    let url = format!("sqlite://{}/qiwu.db", dir.path().display());
    let store = qiwu_storage::Store::connect(&url).await.expect("db");
    let exec =
        |sql: &str| Statement::from_string(sea_orm::DatabaseBackend::Sqlite, sql.to_string());
    store
        .connection()
        .execute_raw(exec("ALTER TABLE fires RENAME TO fires_away"))
        .await
        .expect("rename");
    let server = Server::restart(dir);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dir = server.kill();
    store
        .connection()
        .execute_raw(exec("ALTER TABLE fires_away RENAME TO fires"))
        .await
        .expect("rename back");
    assert!(
        runs_of(&store, job)
            .await
            .iter()
            .all(|r| r.trigger != "misfire"),
        "nothing was caught up yet"
    );
    // The next start catches up, once.
    let server = Server::restart(dir);
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.trigger == "misfire" && r.status != "running")
    })
    .await;
    assert_eq!(
        runs.iter().filter(|r| r.trigger == "misfire").count(),
        1,
        "{runs:#?}"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_misfire_window_starts_at_an_edit_made_during_downtime() {
    let mut cluster = Cluster::start(Db::Postgres, 1);
    let job = cluster
        .create(json!({"name": "edited while down", "handler": "demo.echo", "cron": "* * * * * *"}))
        .await;
    let store = cluster.store().await;
    wait_for_runs(&store, job, LIMIT, |runs| runs.len() >= 2).await;
    cluster.stop_workers();
    tokio::time::sleep(Duration::from_secs(4)).await;
    // The job's schedule changes while no worker runs: the time before the
    // edit never counts as missed.
    let version = get_job(&cluster.api, job).await["version"]
        .as_i64()
        .expect("version");
    let resp = client()
        .put(cluster.api.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .json(&json!({"version": version, "cron": "*/2 * * * * *"}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let edited_at = now_ms();
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.start_worker("w1");
    let misfire = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.trigger == "misfire")
    })
    .await
    .into_iter()
    .find(|r| r.trigger == "misfire")
    .expect("a misfire record");
    let covered = records(&store, job)
        .await
        .into_iter()
        .find(|r| r.trigger == "misfire")
        .expect("its record");
    assert!(
        covered.first > edited_at,
        "counted from the edit at {edited_at}: {covered:?}"
    );
    assert!(
        covered.first % 2000 == 0,
        "times of the new schedule: {covered:?}"
    );
    assert_eq!(misfire.status, "skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_only_one_instance_catches_each_job_up() {
    let mut cluster = Cluster::start(Db::Postgres, 0);
    let mut jobs = Vec::new();
    for i in 0..5 {
        jobs.push(cluster.create(json!({"name": format!("caught-{i}"), "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": if i % 2 == 0 { "run_once" } else { "skip" }})).await);
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    for id in ["w1", "w2", "w3"] {
        cluster.start_worker(id);
    }
    let store = cluster.store().await;
    for job in &jobs {
        let runs = wait_for_runs(&store, *job, LIMIT, |runs| {
            runs.iter()
                .any(|r| r.trigger == "misfire" && r.status != "running")
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let misfires = runs_of(&store, *job)
            .await
            .into_iter()
            .filter(|r| r.trigger == "misfire")
            .count();
        assert_eq!(misfires, 1, "job {job}: {runs:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciliation_repairs_a_lost_change_message() {
    let cluster = Cluster::start(Db::Postgres, 2);
    // Both workers have armed their jobs and listen before the message is lost.
    cluster.until_workers_listen().await;
    // Redis holds every write while the job is created: its message is lost.
    cluster.redis.cli(&["CLIENT", "PAUSE", "3000", "WRITE"]);
    let job = cluster
        .create(json!({"name": "announced late", "handler": "demo.echo", "cron": "* * * * * *"}))
        .await;
    let store = cluster.store().await;
    // Every worker reads the jobs changed since its last reconciliation
    // every 60 s; the job fires after the next one at the latest.
    wait_for_runs(&store, job, Duration::from_secs(75), |runs| {
        !runs.is_empty()
    })
    .await;
}
