//! The audit log: every action recorded with its before and after.

use super::*;

#[tokio::test]
async fn audit_log_records_every_action_with_before_and_after() {
    let server = Server::start();
    let store = open_store(&server).await;
    let alice = common::mint("alice", &ALL_PERMS, false, 3600);

    // job.create
    let job = create_job(&server, &alice, "audited").await;
    let id = job["id"].as_i64().expect("id");
    let entries = audit(&server, "action=job.create").await;
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["targetType"], "job");
    assert_eq!(e["targetId"], id.to_string());
    assert_eq!(e["before"], Value::Null);
    assert_eq!(e["after"], job, "the job as the API showed it");
    assert_eq!(e["actionLabel"], "创建任务");
    assert!(e["summary"].as_str().is_some_and(|s| s.contains("audited")));
    assert!(DateTime::parse_from_rfc3339(e["at"].as_str().expect("at")).is_ok());

    // job.modify
    let (status, updated) = put(
        &server,
        &format!("/api/jobs/{id}"),
        &alice,
        json!({"version": 1, "cron": "0 30 4 * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    let e = &audit(&server, "action=job.modify").await[0];
    assert_eq!(e["before"]["cron"], "0 0 3 * * *");
    assert_eq!(e["before"]["version"], 1);
    assert_eq!(e["after"]["cron"], "0 30 4 * * *");
    assert_eq!(e["after"]["version"], 2);

    // job.disable, then a no-op disable (no entry), then job.enable.
    let enabled_path = format!("/api/jobs/{id}/enabled");
    for enabled in [false, false, true] {
        let (status, _) = put(&server, &enabled_path, &alice, json!({"enabled": enabled})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let disabled = audit(&server, "action=job.disable").await;
    assert_eq!(
        disabled.len(),
        1,
        "setting the same state again is not a change"
    );
    assert_eq!(disabled[0]["before"]["enabled"], true);
    assert_eq!(disabled[0]["after"]["enabled"], false);
    let enabled = audit(&server, "action=job.enable").await;
    assert_eq!(enabled.len(), 1);
    assert_eq!(enabled[0]["after"]["enabled"], true);
    assert_eq!(enabled[0]["after"]["version"], 4);

    // job.export
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export?name=aud",
        Some(&alice),
        None,
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let e = &audit(&server, "action=job.export").await[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["targetId"], Value::Null);
    assert_eq!(e["after"]["rows"], 1);
    assert_eq!(e["after"]["filters"]["name"], "aud");

    // job.delete: one entry per job, in single and batch deletes.
    let second = create_job(&server, &alice, "second").await;
    let third = create_job(&server, &alice, "third").await;
    let (status, _) = delete(&server, &format!("/api/jobs/{id}"), &alice).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = post(
        &server,
        "/api/jobs/batch-delete",
        &alice,
        json!({"ids": [second["id"], third["id"], 987_654]}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deletes = audit(&server, "action=job.delete").await;
    assert_eq!(deletes.len(), 3);
    let mut deleted_names: Vec<&str> = deletes
        .iter()
        .filter_map(|e| e["before"]["name"].as_str())
        .collect();
    deleted_names.sort_unstable();
    assert_eq!(deleted_names, ["audited", "second", "third"]);
    assert!(deletes.iter().all(|e| e["after"].is_null()));
    let mine = audit(&server, &format!("targetType=job&targetId={id}")).await;
    let actions: Vec<&str> = mine.iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(
        actions,
        [
            "job.delete",
            "job.enable",
            "job.disable",
            "job.modify",
            "job.create"
        ]
    );

    // run.delete (one and many), run.export, run.clear.
    let run_ids = insert_runs(
        &store,
        &(0..5)
            .map(|i| NewRun::new(9, "runner", T0 + i * 1000))
            .collect::<Vec<_>>(),
    )
    .await;
    let (status, _) = delete(&server, &format!("/api/runs/{}", run_ids[0]), &alice).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.delete").await[0];
    assert_eq!(e["targetType"], "run");
    assert_eq!(e["targetId"], run_ids[0].to_string());
    assert_eq!(e["before"]["id"], run_ids[0]);
    assert_eq!(e["before"]["jobName"], "runner");
    let (status, _) = post(
        &server,
        "/api/runs/batch-delete",
        &alice,
        json!({"ids": [run_ids[1], run_ids[2]]}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.delete").await[0];
    assert_eq!(e["targetId"], Value::Null);
    assert_eq!(e["after"]["deleted"], 2);
    assert_eq!(e["after"]["ids"], json!([run_ids[1], run_ids[2]]));
    // The server's own `notify.dispatch` records a run at every minute's
    // start: the export and the clear are checked against what the log
    // held just before them (two of the test's runs, and any such run).
    let successes = all_pages(&server, &alice, "status=success", 100)
        .await
        .len();
    assert!(successes >= 2, "the test's two successful runs");
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?status=success",
        Some(&alice),
        None,
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let e = &audit(&server, "action=run.export").await[0];
    assert_eq!(e["after"]["rows"], successes);
    assert_eq!(e["after"]["filters"]["status"], "success");
    let visible = all_pages(&server, &alice, "", 100).await.len();
    assert!(visible >= 2, "the test's two runs left");
    let (status, _) = post(&server, "/api/runs/clear", &alice, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.clear").await[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["after"]["deleted"], visible);

    // Everything above, by actor, newest first, paged by cursor.
    let everything = audit(&server, "actor=alice").await;
    assert_eq!(everything.len(), 14);
    let (_, page) = get(&server, "/api/audit-logs?limit=4", &admin_token()).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(4));
    let mut seen: Vec<i64> = ids(page["items"].as_array().expect("items"));
    let mut cursor = page["nextCursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let (status, page) = get(
            &server,
            &format!("/api/audit-logs?limit=4&cursor={c}"),
            &admin_token(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        seen.extend(ids(page["items"].as_array().expect("items")));
        cursor = page["nextCursor"].as_str().map(str::to_string);
    }
    assert_eq!(seen, ids(&everything));
    // Time filter and the English label.
    let resp = call(
        reqwest::Method::GET,
        &server,
        "/api/audit-logs?action=run.clear&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z",
        Some(&admin_token()),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(resp.json()["items"][0]["actionLabel"], "Clear runs");
    assert!(
        audit(&server, "to=2000-01-01T00:00:00Z").await.is_empty(),
        "nothing that old"
    );
}
