//! Run control through `serve` (issue 10): cancelling a running run, by the
//! API's message and, when no message comes, from the database.

use std::time::Duration;

use crate::common;
use crate::common::{
    Db, Server, admin_token, client, create_job, mint, run_once, token, wait_for_runs,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn cancel(server: &Server, run: i64, token: &str, lang: &str) -> (StatusCode, Value) {
    let resp = client()
        .post(server.url(&format!("/api/runs/{run}/cancel")))
        .bearer_auth(token)
        .header("Accept-Language", lang)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    (status, resp.json().await.expect("json"))
}

/// Cancels a long run of a job with retries: the run ends `cancelled`
/// naming who, at once, with no retry; an ended run is 409; the request is
/// audited; a request written only to the database is still obeyed.
async fn cancel_on(db: Db) {
    let server = Server::start_with(db, &[]);
    let store = server.store().await;
    let job = create_job(
        &server,
        json!({"name": "long", "handler": "demo.echo", "enabled": false, "timeoutMs": 0,
               "retryCount": 3, "retryIntervalMs": 100, "params": {"delayMs": 600000}}),
    )
    .await;
    run_once(&server, job).await;
    let runs = wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let run = runs[0].id;

    // Without the run-once permission: 403; an unknown run: 404.
    let (status, _) = cancel(&server, run, &token(&["scheduler.run.view"]), "en").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = cancel(&server, 9_007_199_254_740_991, &admin_token(), "en").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let alice = mint("alice", &["scheduler.task.run"], false, 3600);
    let asked = std::time::Instant::now();
    let (status, body) = cancel(&server, run, &alice, "zh-CN").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["runId"], run);
    assert_eq!(body["cancelledBy"], "alice");
    assert!(
        body["message"].as_str().unwrap_or("").contains("取消"),
        "{body}"
    );
    let runs = wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    // The message stopped it at once (well before the database check).
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        runs.len(),
        1,
        "a cancelled fire is never retried: {runs:#?}"
    );
    assert_eq!(runs[0].status, "cancelled");
    assert!(runs[0].error.contains("Cancelled by alice"), "{runs:#?}");
    assert!(runs[0].error.contains("alice 取消"), "{runs:#?}");
    // No retry follows later either.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(common::runs_of(&store, job).await.len(), 1);

    // The detail names who; the list filters by the new status.
    let detail: Value = client()
        .get(server.url(&format!("/api/runs/{run}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(detail["status"], "cancelled");
    assert_eq!(detail["cancelledBy"], "alice");
    let page: Value = client()
        .get(server.url(&format!("/api/runs?status=cancelled&jobId={job}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(page["items"][0]["id"], run, "{page}");

    // An ended run cannot be cancelled: 409, in the caller's language.
    let (status, body) = cancel(&server, run, &alice, "en").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("has ended"),
        "{body}"
    );
    let (status, body) = cancel(&server, run, &alice, "zh-CN").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["detail"].as_str().unwrap_or("").contains("已结束"),
        "{body}"
    );

    // Audited once, as alice.
    let audit: Value = client()
        .get(server.url("/api/audit-logs?action=run.cancel"))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    let items = audit["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{audit}");
    assert_eq!(items[0]["actor"], "alice");
    assert_eq!(items[0]["targetId"], run.to_string());

    // A request that reaches only the database (its message lost) is
    // found by the running instance within a few seconds.
    run_once(&server, job).await;
    let runs = wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let second = runs
        .iter()
        .find(|r| r.status == "running")
        .expect("running");
    let asked = std::time::Instant::now();
    let requested = store
        .runs()
        .request_cancel(second.id, "apikey:ops", chrono::Utc::now())
        .await
        .expect("request");
    assert!(matches!(
        requested,
        qiwu_storage::CancelRequest::Requested { first: true, .. }
    ));
    let runs = wait_for_runs(&store, job, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    let second = runs.iter().find(|r| r.id == second.id).expect("run");
    assert_eq!(second.status, "cancelled");
    assert!(second.error.contains("apikey:ops"), "{second:#?}");
    assert_eq!(runs.len(), 2, "{runs:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_running_run_on_sqlite() {
    cancel_on(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_a_running_run_on_mariadb() {
    cancel_on(Db::MySql).await;
}

/// `retryBackoff` through the API: stored, shown, merged by an edit,
/// refused when wrong (each field named, in both languages), and obeyed:
/// a job timing out every attempt waits 300 ms, 600 ms, then its 700 ms cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exponential_retry_backoff_through_serve() {
    let server = Server::start();
    let store = server.store().await;
    let resp = client()
        .post(server.url("/api/jobs"))
        .bearer_auth(admin_token())
        .header("Accept-Language", "en")
        .json(
            &json!({"name": "bad", "handler": "demo.echo", "retryBackoff": "linear",
                      "retryIntervalMs": 5000, "retryMaxIntervalMs": 10, "retryJitter": 1}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let problem: Value = resp.json().await.expect("json");
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    for field in ["retryBackoff", "retryMaxIntervalMs", "retryJitter"] {
        assert!(fields.contains(&field), "{problem}");
    }
    assert!(
        problem.to_string().contains("use fixed or exponential"),
        "{problem}"
    );

    let job = create_job(
        &server,
        json!({"name": "backoff", "handler": "demo.echo", "enabled": false, "timeoutMs": 100,
               "retryCount": 3, "retryIntervalMs": 300, "retryBackoff": "exponential",
               "retryMaxIntervalMs": 700, "params": {"delayMs": 5000}}),
    )
    .await;
    let shown: Value = client()
        .get(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(shown["retryBackoff"], "exponential");
    assert_eq!(shown["retryMaxIntervalMs"], 700);
    assert_eq!(shown["retryJitter"], false);
    // An edit of another field keeps them.
    let resp = client()
        .put(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .json(&json!({"version": shown["version"], "remark": "kept"}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let edited: Value = resp.json().await.expect("json");
    assert_eq!(edited["retryBackoff"], "exponential");
    assert_eq!(edited["retryMaxIntervalMs"], 700);

    run_once(&server, job).await;
    let runs = wait_for_runs(&store, job, Duration::from_secs(60), |runs| {
        runs.len() == 4 && runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert!(runs.iter().all(|r| r.status == "timeout"), "{runs:#?}");
    // Each attempt ends at its 100 ms timeout; then the wait doubles.
    for (pair, wait) in runs.windows(2).zip([300, 600, 700]) {
        let gap = pair[1].started_at - pair[0].finished_at.unwrap_or(i64::MAX);
        assert!(
            gap >= wait,
            "waited {gap} ms, at least {wait} expected: {runs:#?}"
        );
    }
}

async fn put_job(server: &Server, job: i64, body: Value) -> (StatusCode, Value) {
    let current: Value = client()
        .get(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    let mut body = body;
    body["version"] = current["version"].clone();
    let resp = client()
        .put(server.url(&format!("/api/jobs/{job}")))
        .bearer_auth(admin_token())
        .header("Accept-Language", "en")
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = resp.status();
    (status, resp.json().await.expect("json"))
}

/// `overlapPolicy` and its compatible view `allowConcurrent` through the
/// API, then `queue_one` in `serve`: one fire waits and starts when the
/// running one ends, a further one is skipped with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_policy_and_allow_concurrent_through_serve() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(
        &server,
        json!({"name": "parallel", "handler": "demo.echo", "allowConcurrent": true}),
    )
    .await;
    let cases = [
        (json!({"overlapPolicy": "queue_one"}), "queue_one", false),
        // Only the view: `false` keeps a policy that runs nothing in parallel.
        (json!({"allowConcurrent": false}), "queue_one", false),
        (json!({"allowConcurrent": true}), "allow", true),
        (json!({"allowConcurrent": false}), "skip", false),
        (json!({"overlapPolicy": "replace"}), "replace", false),
        (
            json!({"overlapPolicy": "allow", "allowConcurrent": false}),
            "allow",
            true,
        ),
    ];
    for (body, policy, allow) in cases {
        let (status, job) = put_job(&server, job, body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}: {job}");
        assert_eq!(
            (
                job["overlapPolicy"].as_str(),
                job["allowConcurrent"].as_bool()
            ),
            (Some(policy), Some(allow)),
            "{body}"
        );
    }
    let (status, problem) = put_job(&server, job, json!({"overlapPolicy": "serial"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["errors"][0]["field"], "overlapPolicy", "{problem}");

    let queued = create_job(
        &server,
        json!({"name": "queued", "handler": "demo.echo", "enabled": false, "timeoutMs": 0,
               "overlapPolicy": "queue_one", "params": {"delayMs": 1500}}),
    )
    .await;
    for _ in 0..3 {
        run_once(&server, queued).await;
    }
    let runs = wait_for_runs(&store, queued, Duration::from_secs(30), |runs| {
        runs.len() == 3 && runs.iter().all(|r| r.status != "running")
    })
    .await;
    let mut statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["skipped", "success", "success"], "{runs:#?}");
    let skipped = runs.iter().find(|r| r.status == "skipped").expect("skip");
    assert!(skipped.output.contains("queue_one"), "{skipped:#?}");
    let mut ran: Vec<_> = runs.iter().filter(|r| r.status == "success").collect();
    ran.sort_by_key(|r| r.started_at);
    assert!(
        ran[1].started_at >= ran[0].finished_at.unwrap_or(i64::MAX),
        "{runs:#?}"
    );
    assert!(ran[1].output.contains("waiting"), "{runs:#?}");
}
