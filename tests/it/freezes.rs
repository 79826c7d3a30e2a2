//! Black-box tests of freeze windows (issue 11, part 4): the API (CRUD,
//! validation, permission, audit, editable only until the start, on all
//! three databases), a run-once request during a freeze (refused with 409
//! naming it), and the engine: an every-second job gets exactly one
//! skipped record per window and fires before and after it, a `run_once`
//! job catches up once at the window's end, in `serve` and in a cluster of
//! two workers (no duplicate records).

use std::time::Duration;

use crate::common;
use crate::common::{Db, Server, admin_token, create_job, mint, records, runs_of, wait_for_runs};
use chrono::{DateTime, TimeDelta, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

async fn call(
    base: &Server,
    method: Method,
    path: &str,
    token: &str,
    lang: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, base.url(path), Some(token), Some(lang), body).await
}

async fn admin(
    base: &Server,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    call(base, method, path, &admin_token(), "en", body).await
}

/// The problem's field names, sorted, so a test lists them in any order.
fn fields(problem: &Value) -> Vec<String> {
    let mut out = common::fields(problem);
    out.sort();
    out
}

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339()
}

async fn freezes_over_the_api(db: Db) {
    let server = Server::start_with(db, &[]);
    let now = Utc::now();
    let frozen_job = create_job(
        &server,
        json!({"name": "frozen", "handler": "demo.echo", "enabled": false}),
    )
    .await;
    let free_job = create_job(
        &server,
        json!({"name": "free", "handler": "demo.echo", "enabled": false}),
    )
    .await;

    // Super admins only.
    let operator = mint(
        "operator",
        &["task:view", "task:edit", "task:run"],
        false,
        3600,
    );
    for method in [Method::GET, Method::POST] {
        let (status, _) = call(
            &server,
            method,
            "/api/freezes",
            &operator,
            "en",
            Some(json!({})),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }

    // Validation: every bad field named, unknown targets refused.
    let bad = [
        (
            json!({"from": at(now + TimeDelta::hours(2)), "to": at(now + TimeDelta::hours(1)), "scope": "all", "reason": "r"}),
            vec!["to"],
        ),
        (
            json!({"from": at(now - TimeDelta::hours(2)), "to": at(now - TimeDelta::hours(1)), "scope": "all", "reason": "r"}),
            vec!["to"],
        ),
        (
            json!({"from": "soon", "scope": "every", "reason": ""}),
            vec!["from", "reason", "scope", "to"],
        ),
        (
            json!({"from": at(now + TimeDelta::hours(1)), "to": at(now + TimeDelta::hours(2)), "scope": "group", "group": "no-such-group", "reason": "r"}),
            vec!["group"],
        ),
        (
            json!({"from": at(now + TimeDelta::hours(1)), "to": at(now + TimeDelta::hours(2)), "scope": "handler", "handler": "no.such", "reason": "r"}),
            vec!["handler"],
        ),
        (
            json!({"from": at(now + TimeDelta::hours(1)), "to": at(now + TimeDelta::hours(2)), "scope": "jobIds", "jobIds": [frozen_job, 9_000_000], "reason": "r"}),
            vec!["jobIds"],
        ),
    ];
    for (body, want) in bad {
        let (status, problem) =
            admin(&server, Method::POST, "/api/freezes", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {problem}");
        assert_eq!(fields(&problem), want, "{body} → {problem}");
    }

    // A window ahead: created, listed, read, edited, its stale edit refused.
    let ahead = json!({"from": at(now + TimeDelta::hours(1)), "to": at(now + TimeDelta::hours(2)), "scope": "group", "group": "default", "reason": "release 1.2"});
    let (status, created) = admin(&server, Method::POST, "/api/freezes", Some(ahead)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        (
            created["scope"].as_str(),
            created["group"].as_str(),
            created["status"].as_str(),
            created["version"].as_i64()
        ),
        (Some("group"), Some("default"), Some("scheduled"), Some(1))
    );
    let ahead_id = created["id"].as_i64().expect("id");
    let path = format!("/api/freezes/{ahead_id}");
    let (status, detail) = admin(&server, Method::GET, &path, None).await;
    assert_eq!(
        (status, detail["reason"].as_str()),
        (StatusCode::OK, Some("release 1.2"))
    );
    let edit = json!({"version": 1, "from": at(now + TimeDelta::hours(3)), "to": at(now + TimeDelta::hours(4)), "scope": "jobIds", "jobIds": [free_job], "reason": "release 1.2, later"});
    let (status, edited) = admin(&server, Method::PUT, &path, Some(edit.clone())).await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    assert_eq!(edited["version"], 2);
    assert_eq!(edited["jobIds"], json!([free_job]));
    assert!(edited.get("group").is_none(), "{edited}");
    let (status, _) = admin(&server, Method::PUT, &path, Some(edit)).await;
    assert_eq!(status, StatusCode::CONFLICT, "a stale version");

    // A window that has started: kept as it is (409 in both languages).
    let started = json!({"from": at(now - TimeDelta::minutes(1)), "to": at(now + TimeDelta::hours(1)), "scope": "jobIds", "jobIds": [frozen_job], "reason": "数据库迁移"});
    let (status, active) = admin(&server, Method::POST, "/api/freezes", Some(started)).await;
    assert_eq!(status, StatusCode::CREATED, "{active}");
    assert_eq!(active["status"], "active");
    let active_id = active["id"].as_i64().expect("id");
    let active_path = format!("/api/freezes/{active_id}");
    let change = json!({"version": 1, "from": at(now + TimeDelta::hours(1)), "to": at(now + TimeDelta::hours(2)), "scope": "all", "reason": "x"});
    let (status, problem) = admin(&server, Method::PUT, &active_path, Some(change)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("once it has started"),
        "{problem}"
    );
    let (status, problem) = call(
        &server,
        Method::DELETE,
        &active_path,
        &admin_token(),
        "zh-CN",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("开始后不能再修改或删除"),
        "{problem}"
    );

    // Run once during the freeze: refused for the frozen job, naming the
    // freeze; a job outside its scope still runs.
    let (status, problem) = admin(
        &server,
        Method::POST,
        &format!("/api/jobs/{frozen_job}/run"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("freeze {active_id}")) && detail.contains("数据库迁移"),
        "{problem}"
    );
    let (status, _) = admin(
        &server,
        Method::POST,
        &format!("/api/jobs/{free_job}/run"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);

    // Listed, the latest-starting first; the window ahead deleted.
    let (status, list) = admin(&server, Method::GET, "/api/freezes", None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<i64> = list
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|f| f["id"].as_i64())
        .collect();
    assert_eq!(ids, [ahead_id, active_id]);
    let (status, _) = admin(&server, Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = admin(&server, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Audited.
    let (_, audit) = admin(
        &server,
        Method::GET,
        "/api/audit-logs?targetType=freeze&limit=10",
        None,
    )
    .await;
    let actions: Vec<&str> = audit["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(
        actions,
        [
            "freeze.delete",
            "freeze.create",
            "freeze.modify",
            "freeze.create"
        ],
        "{audit}"
    );
}

#[tokio::test]
async fn freezes_over_the_api_on_sqlite() {
    freezes_over_the_api(Db::Sqlite).await;
}

#[tokio::test]
async fn freezes_over_the_api_on_postgres() {
    freezes_over_the_api(Db::Postgres).await;
}

#[tokio::test]
async fn freezes_over_the_api_on_mariadb() {
    freezes_over_the_api(Db::MySql).await;
}

/// The next whole second at least `ahead` from now.
fn whole_second_in(ahead: Duration) -> DateTime<Utc> {
    let t = Utc::now() + TimeDelta::from_std(ahead).expect("delta");
    DateTime::from_timestamp(t.timestamp() + 1, 0).expect("time")
}

/// Declares a window of `len` seconds starting a few seconds ahead over
/// the given jobs; answers its id and bounds.
async fn freeze_jobs(base: &Server, jobs: &[i64], len: i64) -> (i64, DateTime<Utc>, DateTime<Utc>) {
    let from = whole_second_in(Duration::from_secs(3));
    let to = from + TimeDelta::seconds(len);
    let (status, created) = admin(
        base,
        Method::POST,
        "/api/freezes",
        Some(json!({"from": at(from), "to": at(to), "scope": "jobIds", "jobIds": jobs, "reason": "release"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    (created["id"].as_i64().expect("id"), from, to)
}

/// Checks one job's records around a window: fires before and after, one
/// skipped record for the window's times, naming the freeze, its reason
/// and the count, and every second covered exactly once.
async fn check_window(
    store: &qiwu_storage::Store,
    job: i64,
    freeze: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    seconds: usize,
) {
    let after = to + TimeDelta::seconds(2);
    wait_for_runs(store, job, LIMIT, |runs| {
        runs.iter().any(|r| {
            r.trigger == "schedule"
                && r.scheduled_at >= after.timestamp_millis()
                && r.status != "running"
        })
    })
    .await;
    let runs = runs_of(store, job).await;
    let marker = format!("freeze #{freeze}");
    let frozen: Vec<_> = runs.iter().filter(|r| r.output.contains(&marker)).collect();
    assert_eq!(frozen.len(), 1, "one record for the window: {runs:#?}");
    let record = frozen[0];
    assert_eq!(record.status, "skipped");
    assert!(
        record.output.contains("release")
            && record
                .output
                .contains(&format!("Skipped {seconds} fire time")),
        "{record:?}"
    );
    assert_eq!(
        record.scheduled_at,
        (to - TimeDelta::seconds(1)).timestamp_millis()
    );
    let fired = |pred: &dyn Fn(i64) -> bool| {
        runs.iter()
            .any(|r| r.trigger == "schedule" && r.status == "success" && pred(r.scheduled_at))
    };
    assert!(
        fired(&|t| t < from.timestamp_millis()),
        "fires before the window: {runs:#?}"
    );
    assert!(
        fired(&|t| t >= to.timestamp_millis()),
        "fires after the window: {runs:#?}"
    );
    assert!(
        !runs.iter().any(|r| r.status != "skipped"
            && r.trigger == "schedule"
            && r.scheduled_at >= from.timestamp_millis()
            && r.scheduled_at < to.timestamp_millis()),
        "nothing ran inside the window: {runs:#?}"
    );
    // The window's times are covered by that one record, each second once.
    let recs = records(store, job).await;
    let start = from.timestamp_millis() - 2000;
    if let Some(problem) = common::coverage_problem(&recs, job, start, after.timestamp_millis()) {
        panic!("{problem}");
    }
}

/// The `run_once` job's catch-up at the window's end: exactly one.
async fn check_catch_up(store: &qiwu_storage::Store, job: i64, freeze: i64, to: DateTime<Utc>) {
    let runs = wait_for_runs(store, job, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.trigger == "misfire" && r.status != "running")
    })
    .await;
    let catch_ups: Vec<_> = runs.iter().filter(|r| r.trigger == "misfire").collect();
    assert_eq!(catch_ups.len(), 1, "{runs:#?}");
    assert_eq!(catch_ups[0].status, "success", "{:?}", catch_ups[0]);
    assert_eq!(catch_ups[0].scheduled_at, to.timestamp_millis());
    assert!(
        catch_ups[0]
            .output
            .contains(&format!("Freeze #{freeze} (release) ended")),
        "{:?}",
        catch_ups[0]
    );
}

#[tokio::test]
async fn a_window_skips_once_and_run_once_catches_up_at_its_end() {
    let server = Server::start();
    common::quiet_run_log(&server).await;
    let skip = create_job(
        &server,
        json!({"name": "skip", "handler": "demo.echo", "cron": "* * * * * *"}),
    )
    .await;
    let catch_up = create_job(&server, json!({"name": "catch up", "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": "run_once", "allowConcurrent": true})).await;
    let untouched = create_job(
        &server,
        json!({"name": "untouched", "handler": "demo.echo", "cron": "* * * * * *"}),
    )
    .await;
    let (freeze, from, to) = freeze_jobs(&server, &[skip, catch_up], 3).await;
    let store = server.store().await;
    check_window(&store, skip, freeze, from, to, 3).await;
    check_window(&store, catch_up, freeze, from, to, 3).await;
    check_catch_up(&store, catch_up, freeze, to).await;
    // The skip policy adds nothing at the end; a job outside the scope
    // fired right through the window.
    assert!(
        !runs_of(&store, skip)
            .await
            .iter()
            .any(|r| r.trigger == "misfire")
    );
    let runs = runs_of(&store, untouched).await;
    for second in 0..3 {
        let t = (from + TimeDelta::seconds(second)).timestamp_millis();
        assert!(
            runs.iter()
                .any(|r| r.scheduled_at == t && r.status == "success"),
            "{runs:#?}"
        );
    }
}

#[tokio::test]
async fn two_workers_record_each_window_once() {
    let cluster = common::cluster::Cluster::start(Db::Postgres, 2);
    let skip = cluster
        .create(json!({"name": "skip", "handler": "demo.echo", "cron": "* * * * * *"}))
        .await;
    let catch_up = cluster.create(json!({"name": "catch up", "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": "run_once", "allowConcurrent": true})).await;
    let store = cluster.store().await;
    // Both workers run the jobs before the window is declared.
    wait_for_runs(&store, skip, LIMIT, |runs| runs.len() >= 2).await;
    let (freeze, from, to) = freeze_jobs(&cluster.api, &[skip, catch_up], 4).await;
    check_window(&store, skip, freeze, from, to, 4).await;
    check_window(&store, catch_up, freeze, from, to, 4).await;
    check_catch_up(&store, catch_up, freeze, to).await;
}
