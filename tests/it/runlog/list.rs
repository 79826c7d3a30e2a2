//! The run list: paging with a cursor and soft deletion on every database,
//! filters, a run's detail and a job's recent runs.

use super::*;

async fn paging_and_soft_delete(db: Db) {
    let server = Server::start_with(db, &[]);
    // The seeded every-minute jobs would add runs of their own.
    common::quiet_run_log(&server).await;
    let store = open_store(&server).await;
    let reader = token(&["scheduler.run.browse", "scheduler.run.view"]);
    let remover = token(&["scheduler.run.remove"]);

    // 250 runs of three jobs, out of time order, with ties on the start
    // time so that ids must break them.
    let runs: Vec<NewRun> = (0..250i64)
        .map(|i| {
            NewRun::new(
                1 + i % 3,
                &format!("job-{}", i % 3),
                T0 + ((i * 37) % 250) / 4 * 1000,
            )
        })
        .collect();
    insert_runs(&store, &runs).await;

    let all = all_pages(&server, &reader, "", 20).await;
    assert_eq!(all.len(), 250, "every run once");
    let keys: Vec<(i64, i64)> = all
        .iter()
        .map(|r| (ms(&r["startedAt"]), r["id"].as_i64().expect("id")))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(keys, sorted, "newest first, no duplicates");
    // Another page size walks the same sequence; the default is 20.
    assert_eq!(ids(&all_pages(&server, &reader, "", 100).await), ids(&all));
    let (_, first) = get(&server, "/api/runs", &reader).await;
    assert_eq!(first["items"].as_array().map(Vec::len), Some(20));
    assert!(first["nextCursor"].is_string());
    // The summary carries the run's fields but not its output.
    let top = &all[0];
    for field in [
        "id",
        "fireId",
        "jobId",
        "jobName",
        "handler",
        "trigger",
        "scheduledAt",
        "attempt",
        "status",
        "startedAt",
        "finishedAt",
        "durationMs",
        "instance",
    ] {
        assert!(top.get(field).is_some(), "{field} in {top}");
    }
    assert!(top.get("output").is_none());

    // Delete one: gone from the list and the detail at once.
    let victim = ids(&all)[0];
    let (status, detail) = get(&server, &format!("/api/runs/{victim}"), &reader).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let (status, _) = delete(&server, &format!("/api/runs/{victim}"), &remover).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, problem) = get(&server, &format!("/api/runs/{victim}"), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    let (status, _) = delete(&server, &format!("/api/runs/{victim}"), &remover).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a deleted run is gone");
    let left = all_pages(&server, &reader, "", 50).await;
    assert_eq!(left.len(), 249);
    assert!(!ids(&left).contains(&victim));

    // Delete many (unknown and repeated ids are ignored).
    let batch: Vec<i64> = ids(&left)[..30].to_vec();
    let mut body = batch.clone();
    body.extend([batch[0], 999_999_999]);
    let (status, _) = post(
        &server,
        "/api/runs/batch-delete",
        &remover,
        json!({ "ids": body }),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let left = all_pages(&server, &reader, "", 100).await;
    assert_eq!(left.len(), 219);
    assert!(batch.iter().all(|id| !ids(&left).contains(id)));
    let (status, _) = get(&server, &format!("/api/runs/{}", batch[5]), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Clear: nothing is left.
    let (status, _) = post(&server, "/api/runs/clear", &remover, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, page) = get(&server, "/api/runs", &reader).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page, json!({"items": [], "nextCursor": null}));
    let (status, _) = get(&server, &format!("/api/runs/{}", ids(&left)[0]), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    store.connection().clone().close().await.ok();
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_sqlite() {
    paging_and_soft_delete(Db::Sqlite).await;
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_postgres() {
    paging_and_soft_delete(Db::Postgres).await;
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_mariadb() {
    paging_and_soft_delete(Db::MySql).await;
}

// ---------------------------------------------------------------------------
// Filters, detail, recent runs
// ---------------------------------------------------------------------------

#[tokio::test]
async fn run_list_filters() {
    let server = Server::start();
    let store = open_store(&server).await;
    let reader = token(&["scheduler.run.browse"]);
    insert_runs(
        &store,
        &[
            NewRun::new(1, "Nightly Report", T0),
            NewRun::new(1, "Nightly Report", T0 + 60_000).status("failed"),
            NewRun::new(2, "100% done", T0 + 120_000).status("timeout"),
            NewRun::new(3, "清理过期日志", T0 + 180_000)
                .status("skipped")
                .handler("audit.purge"),
            NewRun::new(4, "echo v2", T0 + 240_000)
                .status("running")
                .handler("demo.echo.v2"),
            NewRun {
                deleted: true,
                ..NewRun::new(1, "Nightly Report", T0 + 300_000)
            },
        ],
    )
    .await;
    let names = |items: Vec<Value>| -> Vec<String> {
        items
            .iter()
            .filter_map(|r| r["jobName"].as_str().map(str::to_string))
            .collect()
    };
    let list = |q: &'static str| {
        let server = &server;
        let reader = reader.clone();
        async move { all_pages(server, &reader, q, 100).await }
    };
    assert_eq!(list("").await.len(), 5, "deleted runs never show");
    assert_eq!(
        names(list("jobId=1").await),
        ["Nightly Report", "Nightly Report"]
    );
    assert_eq!(
        names(list("jobName=nIGHTLY").await),
        ["Nightly Report", "Nightly Report"]
    );
    assert_eq!(names(list("jobName=0%25%20d").await), ["100% done"]);
    assert_eq!(
        names(list("jobName=%E8%BF%87%E6%9C%9F").await),
        ["清理过期日志"]
    );
    // Handler is matched exactly: `demo.echo` is not `demo.echo.v2`.
    assert_eq!(list("handler=demo.echo").await.len(), 3);
    assert_eq!(names(list("handler=demo.echo.v2").await), ["echo v2"]);
    assert!(list("handler=demo").await.is_empty());
    assert_eq!(names(list("status=timeout").await), ["100% done"]);
    assert_eq!(names(list("status=running").await), ["echo v2"]);
    // Start time range, inclusive, in any offset: 08:01–08:03 in +08:00
    // is 00:01–00:03 UTC.
    assert_eq!(
        names(
            list("startedFrom=2025-11-25T08:01:00%2B08:00&startedTo=2025-11-25T08:03:00%2B08:00")
                .await
        ),
        ["清理过期日志", "100% done", "Nightly Report"]
    );
    // An unencoded `+` arrives as a space and is still understood.
    assert_eq!(
        names(list("startedFrom=2025-11-25T08:04:00+08:00").await),
        ["echo v2"]
    );
    assert_eq!(
        names(list("startedTo=2025-11-25T00:00:00Z").await),
        ["Nightly Report"]
    );
    assert_eq!(
        names(list("jobId=1&status=failed&startedFrom=2025-11-25T00:00:00Z").await),
        ["Nightly Report"]
    );
    // Blank filters mean "any" (an empty form field).
    assert_eq!(list("jobName=&status=&handler=").await.len(), 5);
}

#[tokio::test]
async fn run_detail_has_output_and_error() {
    let server = Server::start();
    let store = open_store(&server).await;
    let ids = insert_runs(
        &store,
        &[NewRun {
            output: "line 1\nline 2\nreturned: ok".into(),
            error: "handler failed: 连接超时".into(),
            ..NewRun::new(7, "with output", T0).status("failed")
        }],
    )
    .await;
    let (status, run) = get(
        &server,
        &format!("/api/runs/{}", ids[0]),
        &token(&["scheduler.run.view"]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["id"], ids[0]);
    assert_eq!(run["jobId"], 7);
    assert_eq!(run["jobName"], "with output");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["trigger"], "schedule");
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["durationMs"], 20);
    assert_eq!(run["instance"], "test-host-1");
    assert_eq!(ms(&run["startedAt"]), T0);
    assert_eq!(ms(&run["scheduledAt"]), T0 - 5);
    assert_eq!(ms(&run["finishedAt"]), T0 + 20);
    assert_eq!(run["output"], "line 1\nline 2\nreturned: ok");
    assert_eq!(run["error"], "handler failed: 连接超时");
    let resp = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/424242",
        Some(&admin_token()),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
    assert_eq!(resp.content_type, "application/problem+json");
    assert_eq!(resp.json()["detail"], "Run 424242 does not exist");
}

#[tokio::test]
async fn job_detail_lists_its_recent_runs() {
    let server = Server::start();
    let store = open_store(&server).await;
    let admin = admin_token();
    let job = create_job(&server, &admin, "with history").await;
    let id = job["id"].as_i64().expect("id");
    let other = create_job(&server, &admin, "other").await;
    let other_id = other["id"].as_i64().expect("id");
    let mut runs: Vec<NewRun> = (0..15i64)
        .map(|i| NewRun::new(id, "with history", T0 + i * 1000))
        .collect();
    runs.push(NewRun::new(other_id, "other", T0 + 100_000));
    runs.push(NewRun {
        deleted: true,
        ..NewRun::new(id, "with history", T0 + 200_000)
    });
    let inserted = insert_runs(&store, &runs).await;

    let (status, detail) = get(
        &server,
        &format!("/api/jobs/{id}"),
        &token(&["scheduler.task.view", "scheduler.run.browse"]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let recent = detail["recentRuns"].as_array().expect("recentRuns").clone();
    assert_eq!(recent.len(), 10);
    // The 10 newest visible runs of this job: inserted 14, 13, … 5.
    let expected: Vec<i64> = inserted[5..15].iter().rev().copied().collect();
    assert_eq!(ids(&recent), expected);
    assert!(recent.iter().all(|r| r["jobId"] == id));

    // Without run.browse the field is absent.
    let (_, detail) = get(
        &server,
        &format!("/api/jobs/{id}"),
        &token(&["scheduler.task.view"]),
    )
    .await;
    assert!(detail.get("recentRuns").is_none(), "{detail}");

    // A job without runs has an empty list.
    let fresh = create_job(&server, &admin, "fresh").await;
    let (_, detail) = get(&server, &format!("/api/jobs/{}", fresh["id"]), &admin).await;
    assert_eq!(detail["recentRuns"], json!([]));
}
