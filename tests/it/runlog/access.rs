//! Permissions and bad input on the run-log, audit and export endpoints:
//! each needs its permission, a refused call changes nothing, a 400 names
//! the field, and every endpoint is documented.

use super::*;

#[tokio::test]
async fn new_endpoints_need_their_permission() {
    let server = Server::start();
    let store = open_store(&server).await;
    let run_ids = insert_runs(&store, &[NewRun::new(1, "guarded", T0)]).await;
    let run_path = format!("/api/runs/{}", run_ids[0]);
    // (method, path, body, the permission needed)
    let endpoints: Vec<(reqwest::Method, String, Option<Value>, &str)> = vec![
        (
            reqwest::Method::GET,
            "/api/runs".into(),
            None,
            "scheduler.run.browse",
        ),
        (
            reqwest::Method::GET,
            run_path.clone(),
            None,
            "scheduler.run.view",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export".into(),
            None,
            "scheduler.run.export",
        ),
        (
            reqwest::Method::GET,
            "/api/jobs/export".into(),
            None,
            "scheduler.task.export",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({"ids": [999_999]})),
            "scheduler.run.remove",
        ),
        (
            reqwest::Method::DELETE,
            "/api/runs/999999".into(),
            None,
            "scheduler.run.remove",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/clear".into(),
            None,
            "scheduler.run.remove",
        ),
    ];
    for (method, path, body, needed) in &endpoints {
        let r = call(method.clone(), &server, path, None, None, body.clone()).await;
        assert_eq!(
            r.status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a token"
        );
        assert_eq!(r.content_type, "application/problem+json");
        let others: Vec<&str> = ALL_PERMS.iter().copied().filter(|p| p != needed).collect();
        let r = call(
            method.clone(),
            &server,
            path,
            Some(&token(&others)),
            None,
            body.clone(),
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} {path} without {needed}"
        );
        assert!(
            r.json()["detail"]
                .as_str()
                .is_some_and(|d| d.contains(needed)),
            "{}",
            r.json()
        );
        let r = call(
            method.clone(),
            &server,
            path,
            Some(&token(&[needed])),
            None,
            body.clone(),
        )
        .await;
        assert!(
            r.status.is_success() || r.status == StatusCode::NOT_FOUND,
            "{method} {path} with {needed} → {}: {}",
            r.status,
            r.json()
        );
    }
    // Clear, called last with its permission, hid the run.
    let (status, _) = get(&server, &run_path, &admin_token()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The audit log is for super admins only.
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/audit-logs",
        None,
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let (status, problem) = get(&server, "/api/audit-logs", &token(&ALL_PERMS)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let (status, _) = get(&server, "/api/audit-logs", &admin_token()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn refused_calls_change_nothing() {
    let server = Server::start();
    let store = open_store(&server).await;
    let run_ids = insert_runs(&store, &[NewRun::new(1, "kept", T0)]).await;
    let browse_only = token(&["scheduler.run.browse", "scheduler.run.view"]);
    for (method, path, body) in [
        (
            reqwest::Method::DELETE,
            format!("/api/runs/{}", run_ids[0]),
            None,
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".to_string(),
            Some(json!({"ids": run_ids})),
        ),
        (reqwest::Method::POST, "/api/runs/clear".to_string(), None),
    ] {
        let r = call(method, &server, &path, Some(&browse_only), None, body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let (status, _) = get(&server, &format!("/api/runs/{}", run_ids[0]), &browse_only).await;
    assert_eq!(status, StatusCode::OK);
    assert!(audit(&server, "").await.is_empty(), "nothing to audit");
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field() {
    let server = Server::start();
    let admin = admin_token();
    let too_many: Vec<i64> = (1..=1001).collect();
    // (method, path, body, the field named)
    let cases: Vec<(reqwest::Method, String, Option<Value>, &str)> = vec![
        (
            reqwest::Method::GET,
            "/api/runs?cursor=garbage".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?cursor=00000000000000000000000000000000zz".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=0".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=101".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=ten".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?status=ok".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?status=SUCCESS".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedFrom=yesterday".into(),
            None,
            "startedFrom",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedTo=2025-11-25".into(),
            None,
            "startedTo",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedFrom=2025-11-26T00:00:00Z&startedTo=2025-11-25T00:00:00Z".into(),
            None,
            "startedTo",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?jobId=abc".into(),
            None,
            "jobId",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?jobId=-1".into(),
            None,
            "jobId",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export?status=nope".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export?startedFrom=2025-13-01T00:00:00Z".into(),
            None,
            "startedFrom",
        ),
        (
            reqwest::Method::GET,
            "/api/jobs/export?enabled=maybe".into(),
            None,
            "enabled",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({"ids": []})),
            "ids",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({ "ids": too_many })),
            "ids",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?cursor=abc".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?limit=0".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?action=job.nuke".into(),
            None,
            "action",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?targetType=user".into(),
            None,
            "targetType",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?from=now".into(),
            None,
            "from",
        ),
    ];
    for (method, path, body, field) in cases {
        let r = call(method.clone(), &server, &path, Some(&admin), None, body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{method} {path}: {}",
            r.json()
        );
        assert_eq!(r.content_type, "application/problem+json", "{path}");
        let problem = r.json();
        assert_eq!(problem["status"], 400);
        assert_eq!(problem["errors"][0]["field"], field, "{path}: {problem}");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{problem}"
        );
    }
    // Malformed bodies and ids are 4xx too, never 5xx.
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete",
            Some("{\"ids\": [\"a\"]}"),
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete",
            Some("nope"),
        ),
        (reqwest::Method::GET, "/api/runs/abc", None),
        (
            reqwest::Method::DELETE,
            "/api/runs/99999999999999999999",
            None,
        ),
    ] {
        let mut req = client()
            .request(method.clone(), server.url(path))
            .bearer_auth(&admin);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.expect("request");
        assert!(
            resp.status().is_client_error(),
            "{method} {path} → {}",
            resp.status()
        );
    }
    // In English on request.
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/runs?limit=0",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(
        r.json()["errors"][0]["message"],
        "limit must be a whole number from 1 to 100"
    );
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/runs?cursor=x",
        Some(&admin),
        None,
        None,
    )
    .await;
    assert_eq!(
        r.json()["errors"][0]["message"],
        "cursor 无效：请原样传回上一页返回的 nextCursor"
    );
}

#[test]
fn the_new_endpoints_are_documented() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
            .expect("openapi/openapi.json"),
    )
    .expect("json");
    for (path, method) in [
        ("/api/runs", "get"),
        ("/api/runs/{id}", "get"),
        ("/api/runs/{id}", "delete"),
        ("/api/runs/batch-delete", "post"),
        ("/api/runs/clear", "post"),
        ("/api/runs/export", "get"),
        ("/api/jobs/export", "get"),
        ("/api/audit-logs", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op["summary"].is_string(), "{method} {path} is documented");
        for code in ["401", "403"] {
            assert!(
                op["responses"].get(code).is_some(),
                "{method} {path} documents {code}"
            );
        }
    }
    assert!(
        doc["paths"]["/api/runs/export"]["get"]["responses"]["200"]["content"][XLSX].is_object()
    );
}
