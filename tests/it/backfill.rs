//! Backfill through the real binary (issue 11, part 3): a dry run lists
//! exactly the schedule's times with no record; a backfill runs them
//! oldest first with trigger `backfill`; a calendar job's backfill skips
//! the days off; a cancel stops the rest; permissions and validation; and
//! three cluster workers record each time exactly once.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::{
    Db, Server, admin_token, client, create_job, mint, runs_of, token, wait_for_runs,
};
use crate::observe;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn post(base: &str, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let resp = client()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("Accept-Language", "en")
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    (status, resp.json().await.expect("json"))
}

async fn get(base: &str, path: &str) -> Value {
    let resp = client()
        .get(format!("{base}{path}"))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.json().await.expect("json")
}

async fn backfill(base: &str, job: i64, body: Value) -> (StatusCode, Value) {
    post(
        base,
        &format!("/api/jobs/{job}/backfill"),
        &admin_token(),
        body,
    )
    .await
}

/// Waits until the backfill has ended; answers its progress.
async fn wait_ended(base: &str, job: i64, id: i64, limit: Duration) -> Value {
    let start = std::time::Instant::now();
    loop {
        let progress = get(base, &format!("/api/jobs/{job}/backfill/{id}")).await;
        if progress["status"] != "running" {
            return progress;
        }
        assert!(
            start.elapsed() < limit,
            "not ended in {limit:?}: {progress}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn times(value: &Value) -> Vec<DateTime<Utc>> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| {
            DateTime::parse_from_rfc3339(t.as_str().expect("a time"))
                .expect("RFC 3339")
                .with_timezone(&Utc)
        })
        .collect()
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339()
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// Dry run, then a backfill of an hourly job (disabled, so no scheduled
/// fire lands in its run log meanwhile): times recorded by an earlier
/// backfill are listed and left out, the rest run oldest first with
/// trigger `backfill`, and asking again finds nothing to do.
async fn dry_run_and_order_on(db: Db) {
    let server = Server::start_with(db, &[]);
    let base = server.base.clone();
    let store = server.store().await;
    let job = create_job(
        &base,
        json!({"name": "hourly report", "handler": "demo.echo", "cron": "0 0 * * * *",
               "enabled": false, "params": {"message": "filled"}}),
    )
    .await;
    // Six hours well before the job existed.
    let first = Utc::now()
        .duration_trunc(TimeDelta::hours(1))
        .expect("hour")
        - TimeDelta::hours(10);
    let hour = |n: i64| first + TimeDelta::hours(n);

    // Hours 1 and 2 get their records from a first backfill.
    let (status, body) = backfill(
        &base,
        job,
        json!({"from": rfc(hour(1)), "to": rfc(hour(2))}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(times(&body["fires"]), [hour(1), hour(2)]);
    let id = body["backfillId"].as_i64().expect("id");
    let done = wait_ended(&base, job, id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["total"], 2);
    assert_eq!(done["finished"], 2);

    // The dry run over hours 0..=5 lists exactly the four without a record.
    let (status, dry) = backfill(
        &base,
        job,
        json!({"from": rfc(hour(0)), "to": rfc(hour(5)), "dryRun": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(dry["dryRun"], true);
    assert!(dry["backfillId"].is_null(), "{dry}");
    assert_eq!(times(&dry["fires"]), [hour(0), hour(3), hour(4), hour(5)]);
    let states: Vec<&str> = dry["times"]
        .as_array()
        .expect("times")
        .iter()
        .map(|t| t["state"].as_str().expect("state"))
        .collect();
    assert_eq!(
        states,
        [
            "missing", "recorded", "recorded", "missing", "missing", "missing"
        ]
    );
    // Nothing was written by it.
    assert_eq!(runs_of(&store, job).await.len(), 2);

    // The backfill runs them, oldest first, each once, trigger backfill.
    let (status, body) = backfill(
        &base,
        job,
        json!({"from": rfc(hour(0)), "to": rfc(hour(5)), "maxFires": 4}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(times(&body["fires"]), [hour(0), hour(3), hour(4), hour(5)]);
    let id = body["backfillId"].as_i64().expect("id");
    let done = wait_ended(&base, job, id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "done", "{done}");
    let runs = runs_of(&store, job).await;
    let second: Vec<i64> = runs
        .iter()
        .filter(|r| r.id > runs[1].id)
        .map(|r| r.scheduled_at)
        .collect();
    assert_eq!(second, [hour(0), hour(3), hour(4), hour(5)].map(ms));
    assert!(
        runs.iter()
            .all(|r| r.trigger == "backfill" && r.status == "success" && r.output == "filled"),
        "{runs:#?}"
    );
    // Each started after the one before it ended.
    for pair in runs.windows(2) {
        assert!(
            pair[1].started_at >= pair[0].finished_at.expect("ended"),
            "{runs:#?}"
        );
    }

    // Asking again: nothing is missing, the backfill is done at once.
    let (status, body) = backfill(
        &base,
        job,
        json!({"from": rfc(hour(0)), "to": rfc(hour(5))}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(times(&body["fires"]).is_empty(), "{body}");
    let id = body["backfillId"].as_i64().expect("id");
    let progress = get(&base, &format!("/api/jobs/{job}/backfill/{id}")).await;
    assert_eq!(progress["status"], "done");
    assert_eq!(runs_of(&store, job).await.len(), 6);

    // The run list shows the trigger; the metric counts the claims; the
    // request is audited.
    let page = get(
        &base,
        &format!("/api/runs?jobId={job}&trigger=backfill&limit=100"),
    )
    .await;
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 6, "{page}");
    assert!(items.iter().all(|r| r["trigger"] == "backfill"), "{page}");
    let page = get(&base, &format!("/api/runs?jobId={job}&trigger=schedule")).await;
    assert!(
        page["items"].as_array().expect("items").is_empty(),
        "{page}"
    );
    let text = client()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    let samples = observe::parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let claimed = observe::value(
        &samples,
        "qiwu_fires_total",
        &[("trigger", "backfill"), ("outcome", "claimed")],
    );
    assert_eq!(claimed, Some(6.0), "{text}");
    let audit = get(&base, "/api/audit-logs?action=job.backfill&limit=10").await;
    assert_eq!(
        audit["items"].as_array().expect("items").len(),
        3,
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_lists_the_missing_times_and_a_backfill_runs_them_oldest_first_sqlite() {
    dry_run_and_order_on(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_lists_the_missing_times_and_a_backfill_runs_them_oldest_first_postgres() {
    dry_run_and_order_on(Db::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_lists_the_missing_times_and_a_backfill_runs_them_oldest_first_mysql() {
    dry_run_and_order_on(Db::MySql).await;
}

/// A payroll job on working days over the 2026 Spring Festival: the
/// backfill fires Friday 13 February, the make-up Saturday 14 February and
/// Tuesday 24 February, and none of the days off between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calendar_jobs_backfill_skips_the_days_off() {
    let server = Server::start();
    let base = server.base.clone();
    let store = server.store().await;
    let job = create_job(
        &base,
        json!({"name": "payroll", "handler": "demo.echo", "cron": "0 0 9 * * *",
               "timezone": "Asia/Shanghai", "calendar": "cn-workdays", "calendarRule": "workdays",
               "enabled": false}),
    )
    .await;
    let range = json!({"from": "2026-02-13T00:00:00+08:00", "to": "2026-02-24T23:59:59+08:00"});
    let want: Vec<DateTime<Utc>> = ["2026-02-13", "2026-02-14", "2026-02-24"]
        .iter()
        .map(|d| {
            DateTime::parse_from_rfc3339(&format!("{d}T09:00:00+08:00"))
                .expect("time")
                .with_timezone(&Utc)
        })
        .collect();
    let mut dry = range.clone();
    dry["dryRun"] = json!(true);
    let (status, body) = backfill(&base, job, dry).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(times(&body["fires"]), want);
    let (status, body) = backfill(&base, job, range).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["backfillId"].as_i64().expect("id");
    wait_ended(&base, job, id, Duration::from_secs(30)).await;
    let runs = runs_of(&store, job).await;
    let fired: Vec<i64> = runs.iter().map(|r| r.scheduled_at).collect();
    assert_eq!(fired, want.iter().copied().map(ms).collect::<Vec<_>>());
}

/// Cancelling a backfill drops its fires not yet started and cancels the
/// running one; the dropped times can be backfilled later. Permissions and
/// validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_rest_and_requests_are_checked() {
    let server = Server::start();
    let base = server.base.clone();
    let store = server.store().await;
    let job = create_job(
        &base,
        json!({"name": "slow", "handler": "demo.echo", "cron": "0 0 * * * *", "timeoutMs": 0,
               "enabled": false,
               "params": {"delayMs": 600000}}),
    )
    .await;
    let first = Utc::now()
        .duration_trunc(TimeDelta::hours(1))
        .expect("hour")
        - TimeDelta::hours(20);
    let range = json!({"from": rfc(first), "to": rfc(first + TimeDelta::hours(4))});

    // Without the run-once permission: 403, nothing written.
    let viewer = token(&["scheduler.task.view", "scheduler.run.view"]);
    let (status, body) = post(
        &base,
        &format!("/api/jobs/{job}/backfill"),
        &viewer,
        range.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Validation: each problem names its field.
    let future = rfc(Utc::now() + TimeDelta::hours(1));
    let cases: Vec<(Value, &str)> = vec![
        (json!({"from": rfc(first), "to": future}), "to"),
        (
            json!({"from": rfc(first + TimeDelta::hours(5)), "to": rfc(first)}),
            "from",
        ),
        (
            json!({"from": rfc(first), "to": rfc(first), "maxFires": 0}),
            "maxFires",
        ),
        (
            json!({"from": rfc(first), "to": rfc(first), "maxFires": 1001}),
            "maxFires",
        ),
        (json!({"from": "yesterday", "to": rfc(first)}), "from"),
        (json!({"to": rfc(first)}), "from"),
        (
            json!({"from": rfc(first), "to": rfc(first), "extra": 1}),
            "extra",
        ),
        (
            json!({"from": rfc(first), "to": rfc(first + TimeDelta::hours(4)), "maxFires": 3}),
            "maxFires",
        ),
    ];
    for (body, field) in cases {
        let (status, problem) = backfill(&base, job, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {problem}");
        let fields: Vec<&str> = problem["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .map(|e| e["field"].as_str().unwrap_or(""))
            .collect();
        assert!(fields.contains(&field), "{body} → {problem}");
    }
    // More missing times than maxFires: the count is named.
    let (_, problem) = backfill(
        &base,
        job,
        json!({"from": rfc(first), "to": rfc(first + TimeDelta::hours(4)), "maxFires": 3}),
    )
    .await;
    assert!(problem.to_string().contains("5 times"), "{problem}");
    let (status, _) = backfill(&base, 9_007_199_254_740_991, range.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(runs_of(&store, job).await.is_empty());

    // Alice may run jobs: she starts it, and cancels it while the first
    // fire runs.
    let alice = mint("alice", &["scheduler.task.run"], false, 3600);
    let (status, body) = post(
        &base,
        &format!("/api/jobs/{job}/backfill"),
        &alice,
        range.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["backfillId"].as_i64().expect("id");
    wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let cancel = format!("/api/jobs/{job}/backfill/{id}/cancel");
    let (status, _) = post(&base, &cancel, &viewer, json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = post(&base, &cancel, &alice, json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(body["cancelledBy"], "alice");
    // Only the fire that had started is left; it ends cancelled.
    assert_eq!(body["fires"].as_array().expect("fires").len(), 1, "{body}");
    let runs = wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].status, "cancelled");
    assert_eq!(runs[0].scheduled_at, ms(first));
    let progress = get(&base, &format!("/api/jobs/{job}/backfill/{id}")).await;
    assert_eq!(progress["status"], "cancelled");
    assert_eq!(progress["finished"], 1);
    assert_eq!(progress["remaining"], 0);
    // Cancelling again answers the same; another job's path is a 404.
    let (status, again) = post(&base, &cancel, &alice, json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(again["cancelledBy"], "alice");
    let (status, _) = post(
        &base,
        &format!("/api/jobs/{}/backfill/{id}/cancel", job + 1),
        &alice,
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The dropped times are missing again.
    let mut dry = range.clone();
    dry["dryRun"] = json!(true);
    let (_, body) = backfill(&base, job, dry).await;
    assert_eq!(
        times(&body["fires"]),
        (1..=4)
            .map(|h| first + TimeDelta::hours(h))
            .collect::<Vec<_>>()
    );
    let audit = get(&base, "/api/audit-logs?action=job.backfill_cancel&limit=10").await;
    let items = audit["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{audit}");
    assert_eq!(items[0]["actor"], "alice");
}

/// Three workers on PostgreSQL and Redis: two overlapping backfills asked
/// at once and a worker killed midway still record every minute exactly
/// once, with trigger `backfill`, oldest first within each backfill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_in_a_three_worker_cluster_records_each_time_once() {
    let mut cluster = Cluster::start(Db::Postgres, 3);
    let base = cluster.api.base.clone();
    let job = cluster
        .create(
            json!({"name": "minutely", "handler": "demo.echo", "cron": "0 * * * * *",
                       "enabled": false, "params": {"delayMs": 100}}),
        )
        .await;
    let store = cluster.store().await;
    let first = Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .expect("minute")
        - TimeDelta::hours(2);
    let minute = |n: i64| first + TimeDelta::minutes(n);
    // 0..=29 and 15..=44 overlap on 15..=29.
    let a = json!({"from": rfc(minute(0)), "to": rfc(minute(29))});
    let b = json!({"from": rfc(minute(15)), "to": rfc(minute(44))});
    let (ra, rb) = tokio::join!(backfill(&base, job, a), backfill(&base, job, b));
    assert_eq!(ra.0, StatusCode::ACCEPTED, "{}", ra.1);
    assert_eq!(rb.0, StatusCode::ACCEPTED, "{}", rb.1);
    let (fa, fb) = (times(&ra.1["fires"]), times(&rb.1["fires"]));
    // Between them, every minute once.
    let mut all: Vec<DateTime<Utc>> = fa.iter().chain(&fb).copied().collect();
    all.sort();
    assert_eq!(
        all,
        (0..=44).map(minute).collect::<Vec<_>>(),
        "{fa:?} {fb:?}"
    );

    // A worker is killed once a few have run.
    wait_for_runs(&store, job, Duration::from_secs(60), |runs| runs.len() >= 5).await;
    if let Some(worker) = cluster.workers.remove("w1") {
        drop(worker.kill());
    }
    for id in [&ra.1, &rb.1].map(|b| b["backfillId"].as_i64().expect("id")) {
        let done = wait_ended(&base, job, id, Duration::from_secs(120)).await;
        assert_eq!(done["status"], "done", "{done}");
    }
    let runs = runs_of(&store, job).await;
    let mut per_time: HashMap<i64, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r.attempt == 1) {
        *per_time.entry(r.scheduled_at).or_default() += 1;
    }
    assert_eq!(per_time.len(), 45, "{runs:#?}");
    assert!(per_time.values().all(|&n| n == 1), "{per_time:?}");
    assert!(runs.iter().all(|r| r.trigger == "backfill"), "{runs:#?}");
    // Within each backfill, oldest first.
    for fires in [&fa, &fb] {
        let order: Vec<i64> = runs
            .iter()
            .filter(|r| fires.iter().any(|t| ms(*t) == r.scheduled_at))
            .map(|r| r.scheduled_at)
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
    }
    cluster.stop_workers();
}

/// `serve` killed in the middle of a backfill: after the restart the
/// backfill goes on from where it was, and every time has exactly one
/// record (the fire cut short by the kill is closed, not run again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_survives_a_crash_of_serve() {
    let server = Server::start();
    let job = create_job(
        &server.base,
        json!({"name": "durable", "handler": "demo.echo", "cron": "0 0 * * * *",
               "enabled": false, "params": {"delayMs": 300}}),
    )
    .await;
    let first = Utc::now()
        .duration_trunc(TimeDelta::hours(1))
        .expect("hour")
        - TimeDelta::hours(30);
    let (status, body) = backfill(
        &server.base,
        job,
        json!({"from": rfc(first), "to": rfc(first + TimeDelta::hours(7))}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["backfillId"].as_i64().expect("id");
    let store = server.store().await;
    wait_for_runs(&store, job, Duration::from_secs(30), |runs| runs.len() >= 2).await;
    drop(store);
    let server = Server::restart(server.kill());
    let done = wait_ended(&server.base, job, id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "done", "{done}");
    let runs = runs_of(&server.store().await, job).await;
    let mut per_time: HashMap<i64, usize> = HashMap::new();
    for r in runs.iter().filter(|r| r.attempt == 1) {
        *per_time.entry(r.scheduled_at).or_default() += 1;
    }
    let want: HashMap<i64, usize> = (0..=7)
        .map(|h| (ms(first + TimeDelta::hours(h)), 1))
        .collect();
    assert_eq!(per_time, want, "{runs:#?}");
    assert!(runs.iter().all(|r| r.status != "running"), "{runs:#?}");
}
