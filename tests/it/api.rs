//! Black-box tests of the HTTP API: the real binary on port 0 against a
//! fresh database.

use crate::common;
use crate::common::{Db, Server, admin_token, client, delete, get, post, put, token};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn send(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, server.url(path), token, None, body).await
}

/// Creates, reads, updates, toggles and deletes jobs: the walk-through of
/// the README, on one database.
async fn job_lifecycle(db: Db) {
    let server = Server::start_with(db, &[]);
    let admin = admin_token();

    let (status, created) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "nightly report", "handler": "demo.echo", "cron": "0 30 3 * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().expect("id");
    assert_eq!(created["version"], 1);
    assert_eq!(created["group"], "default");
    assert_eq!(created["params"], json!({"message": "hello", "delayMs": 0}));
    assert_eq!(created["timeoutMs"], 60000);
    assert_eq!(created["misfirePolicy"], "skip");
    assert_eq!(created["createdBy"], "admin");
    assert_eq!(created["builtin"], false);

    let (status, detail) = get(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(detail["cronDescription"], "每天 03:30:00");
    assert_eq!(detail["nextFireTimes"].as_array().map(Vec::len), Some(5));
    assert!(
        detail["nextFireTimes"][0]
            .as_str()
            .is_some_and(|t| t.contains("T03:30:00"))
    );
    assert_eq!(detail["notice"], Value::Null);
    assert_eq!(detail["recentRuns"], json!([]));

    // Same name → 409.
    let (status, problem) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "nightly report", "handler": "demo.echo"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "name");

    // Update with the right version bumps it; the old version is stale.
    let (status, updated) = put(
        &server,
        &format!("/api/jobs/{id}"),
        &admin,
        json!({"version": 1, "cron": "0 */10 * * * *", "timezone": "Asia/Shanghai", "params": {"message": "hi"}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["name"], "nightly report");
    assert_eq!(updated["params"], json!({"message": "hi", "delayMs": 0}));
    let (status, problem) = put(
        &server,
        &format!("/api/jobs/{id}"),
        &admin,
        json!({"version": 1, "remark": "lost update"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "urn:qiwu:problem:stale-version");

    // Disable: the detail still lists fire times, with the notice.
    let (status, disabled) = put(
        &server,
        &format!("/api/jobs/{id}/enabled"),
        &admin,
        json!({"enabled": false}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(disabled["enabled"], false);
    assert_eq!(disabled["version"], 3);
    let (_, detail) = get(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(detail["notice"], "任务已停用：以下为启用后的触发时间。");
    assert_eq!(detail["nextFireTimes"].as_array().map(Vec::len), Some(5));
    assert!(
        detail["nextFireTimes"][0]
            .as_str()
            .is_some_and(|t| t.ends_with("+08:00"))
    );
    assert_eq!(detail["cronDescription"], "每 10 分钟");

    // List, filter, page.
    let (status, _) = post(
        &server,
        "/api/job-groups",
        &admin,
        json!({"code": "batch", "labelZh": "批量", "labelEn": "Batch"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for i in 0..5 {
        let (status, _) = post(
            &server,
            "/api/jobs",
            &admin,
            json!({"name": format!("batch-{i}"), "handler": "demo.echo", "group": "batch"}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, page) = get(&server, "/api/jobs?group=batch&pageSize=2&page=2", &admin).await;
    assert_eq!(page["total"], 5);
    assert_eq!(page["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["items"][0]["name"], "batch-2");
    let (_, page) = get(&server, "/api/jobs?name=NIGHTLY&enabled=false", &admin).await;
    assert_eq!(page["total"], 1);
    // Five, the nightly job, and the seeded example job.
    let (_, page) = get(&server, "/api/jobs?handler=demo.echo", &admin).await;
    assert_eq!(page["total"], 7);

    // Delete one, then a batch; the first is gone.
    let (status, _) = delete(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = get(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = delete(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let ids: Vec<i64> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|j| j["id"].as_i64())
        .collect();
    let (status, _) = post(
        &server,
        "/api/jobs/batch-delete",
        &admin,
        json!({"ids": ids}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The seeded built-in jobs of the other registered handlers remain.
    let (_, page) = get(&server, "/api/jobs", &admin).await;
    assert_eq!(page["total"], 2);
    let names: Vec<&str> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(names, ["清理过期日志", "派发待发送通知"]);
    // Built-in names follow the reader's language until renamed.
    let resp = client()
        .get(server.url("/api/jobs"))
        .bearer_auth(&admin)
        .header("Accept-Language", "en")
        .send()
        .await
        .expect("request");
    let english: Value = resp.json().await.expect("json");
    let names: Vec<&str> = english["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["Purge expired logs", "Dispatch pending notifications"]
    );
    let purge = &english["items"][0];
    let (status, renamed) = put(
        &server,
        &format!("/api/jobs/{}", purge["id"]),
        &admin,
        json!({"version": purge["version"], "name": "我的清理"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{renamed}");
    let resp = client()
        .get(server.url(&format!("/api/jobs/{}", purge["id"])))
        .bearer_auth(&admin)
        .header("Accept-Language", "en")
        .send()
        .await
        .expect("request");
    let detail: Value = resp.json().await.expect("json");
    assert_eq!(detail["name"], "我的清理");
    assert!(
        page["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|j| j["builtin"] == true)
    );
}

#[tokio::test]
async fn job_lifecycle_on_sqlite() {
    job_lifecycle(Db::Sqlite).await;
}

#[tokio::test]
async fn job_lifecycle_on_postgres() {
    job_lifecycle(Db::Postgres).await;
}

#[tokio::test]
async fn job_lifecycle_on_mariadb() {
    job_lifecycle(Db::MySql).await;
}

#[tokio::test]
async fn validation_errors_name_fields_in_the_requested_language() {
    let server = Server::start();
    let admin = admin_token();
    let (status, problem) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "x", "handler": "rm.rf"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["errors"][0]["field"], "handler");
    assert_eq!(
        problem["errors"][0]["message"],
        "处理器 rm.rf 不存在：只能选择系统已注册的处理器"
    );

    let resp = client()
        .post(server.url("/api/jobs"))
        .bearer_auth(&admin)
        .header("Accept-Language", "en-US,en;q=0.9")
        .json(&json!({"name": "", "handler": "demo.echo", "cron": "0 0 0 * * 7", "retryCount": 11, "params": {"delayMs": -5}}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    let problem: Value = resp.json().await.expect("json");
    assert_eq!(problem["status"], 400);
    assert_eq!(problem["title"], "Invalid input");
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(fields, ["name", "retryCount", "cron", "params/delayMs"]);
    assert_eq!(
        problem["errors"][2]["message"],
        "Field 6 (day-of-week) `7`: 7 is not allowed: days of week are 0–6, 0 is Sunday"
    );
}

#[tokio::test]
async fn bad_input_is_always_4xx() {
    let server = Server::start();
    let admin = admin_token();
    let (_, job) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "j", "handler": "demo.echo"}),
    )
    .await;
    let id = job["id"].as_i64().expect("id");
    let jobs_path = format!("/api/jobs/{id}");
    let enabled_path = format!("/api/jobs/{id}/enabled");
    let cases: Vec<(reqwest::Method, &str, Option<&str>)> = vec![
        (reqwest::Method::POST, "/api/jobs", Some("not json")),
        (reqwest::Method::POST, "/api/jobs", Some("[1,2]")),
        (reqwest::Method::POST, "/api/jobs", Some("null")),
        (
            reqwest::Method::POST,
            "/api/jobs",
            Some("{\"name\": {\"a\": 1}, \"handler\": []}"),
        ),
        (
            reqwest::Method::POST,
            "/api/jobs",
            Some("{\"name\": \"n\", \"handler\": \"demo.echo\", \"params\": \"{bad\"}"),
        ),
        (
            reqwest::Method::POST,
            "/api/jobs",
            Some("{\"name\": \"n\", \"handler\": \"demo.echo\", \"timeoutMs\": 1e400}"),
        ),
        (reqwest::Method::PUT, jobs_path.as_str(), Some("{}")),
        (
            reqwest::Method::PUT,
            jobs_path.as_str(),
            Some("{\"version\": \"1\"}"),
        ),
        (
            reqwest::Method::PUT,
            jobs_path.as_str(),
            Some("{\"version\": -3}"),
        ),
        (
            reqwest::Method::PUT,
            "/api/jobs/99999999999999999999",
            Some("{\"version\": 1}"),
        ),
        (
            reqwest::Method::PUT,
            "/api/jobs/abc",
            Some("{\"version\": 1}"),
        ),
        (
            reqwest::Method::PUT,
            enabled_path.as_str(),
            Some("{\"enabled\": \"yes\"}"),
        ),
        (
            reqwest::Method::PUT,
            enabled_path.as_str(),
            Some("{\"enabled\": true, \"extra\": 1}"),
        ),
        (reqwest::Method::GET, "/api/jobs?page=0", None),
        (reqwest::Method::GET, "/api/jobs?pageSize=1000", None),
        (reqwest::Method::GET, "/api/jobs?enabled=maybe", None),
        (reqwest::Method::GET, "/api/jobs?page=-1", None),
        (reqwest::Method::GET, "/api/jobs/-1", None),
        (
            reqwest::Method::POST,
            "/api/jobs/batch-delete",
            Some("{\"ids\": []}"),
        ),
        (
            reqwest::Method::POST,
            "/api/jobs/batch-delete",
            Some("{\"ids\": [\"a\"]}"),
        ),
        (
            reqwest::Method::POST,
            "/api/cron/preview",
            Some("{\"cron\": \"* * * * *\", \"count\": 51}"),
        ),
        (
            reqwest::Method::POST,
            "/api/cron/preview",
            Some("{\"cron\": \"* * * * *\", \"count\": 0}"),
        ),
        (
            reqwest::Method::POST,
            "/api/cron/preview",
            Some("{\"cron\": \"* * * * *\", \"timezone\": \"Mars/Base\"}"),
        ),
        (
            reqwest::Method::POST,
            "/api/cron/preview",
            Some("{\"cron\": \"* * * * *\", \"from\": \"yesterday\"}"),
        ),
        (reqwest::Method::POST, "/api/cron/preview", Some("{}")),
        (
            reqwest::Method::POST,
            "/api/job-groups",
            Some("{\"code\": \"BAD CODE\", \"labelZh\": \"x\"}"),
        ),
        (
            reqwest::Method::POST,
            "/api/job-groups",
            Some("{\"code\": \"default\", \"labelZh\": \"x\"}"),
        ),
        (reqwest::Method::DELETE, "/api/job-groups/default", None),
        (reqwest::Method::DELETE, "/api/job-groups/nope", None),
        (reqwest::Method::GET, "/api/nope", None),
    ];
    for (method, path, body) in cases {
        let mut req = client()
            .request(method.clone(), server.url(path))
            .bearer_auth(&admin);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        assert!(
            status.is_client_error(),
            "{method} {path} {body:?} → {status}: {text}"
        );
        let problem: Value = serde_json::from_str(&text).expect("problem json");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{text}"
        );
    }
    // Nothing above changed the job.
    let (_, job) = get(&server, &jobs_path, &admin).await;
    assert_eq!(job["version"], 1);
    assert_eq!(job["enabled"], true);
}

#[tokio::test]
async fn permission_matrix() {
    let server = Server::start();
    let admin = admin_token();
    let (_, job) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "guarded", "handler": "demo.echo"}),
    )
    .await;
    let id = job["id"].as_i64().expect("id");
    let job_path = format!("/api/jobs/{id}");
    let enabled_path = format!("/api/jobs/{id}/enabled");
    let all = [
        "scheduler.task.browse",
        "scheduler.task.view",
        "scheduler.task.create",
        "scheduler.task.modify",
        "scheduler.task.remove",
        "scheduler.task.export",
        "scheduler.task.run",
        "scheduler.run.browse",
        "scheduler.run.view",
        "scheduler.run.export",
        "scheduler.run.remove",
    ];
    // (method, path, body, permissions needed)
    let endpoints: Vec<(reqwest::Method, String, Option<Value>, Vec<&str>)> = vec![
        (
            reqwest::Method::GET,
            "/api/handlers".into(),
            None,
            vec!["scheduler.task.browse"],
        ),
        (
            reqwest::Method::GET,
            "/api/job-groups".into(),
            None,
            vec!["scheduler.task.browse"],
        ),
        (
            reqwest::Method::GET,
            "/api/jobs".into(),
            None,
            vec!["scheduler.task.browse"],
        ),
        (
            reqwest::Method::POST,
            "/api/jobs".into(),
            Some(json!({"name": "new", "handler": "demo.echo"})),
            vec!["scheduler.task.create"],
        ),
        (
            reqwest::Method::GET,
            job_path.clone(),
            None,
            vec!["scheduler.task.view"],
        ),
        (
            reqwest::Method::PUT,
            job_path.clone(),
            Some(json!({"version": 1, "remark": "r"})),
            vec!["scheduler.task.modify", "scheduler.task.view"],
        ),
        (
            reqwest::Method::PUT,
            enabled_path.clone(),
            Some(json!({"enabled": true})),
            vec!["scheduler.task.modify"],
        ),
        (
            reqwest::Method::POST,
            "/api/jobs/batch-delete".into(),
            Some(json!({"ids": [999999]})),
            vec!["scheduler.task.remove"],
        ),
        (
            reqwest::Method::DELETE,
            "/api/jobs/999999".into(),
            None,
            vec!["scheduler.task.remove"],
        ),
        (
            reqwest::Method::POST,
            format!("/api/jobs/{id}/run"),
            None,
            vec!["scheduler.task.run"],
        ),
    ];
    for (method, path, body, needed) in &endpoints {
        // No token → 401; a forged one → 401.
        let (status, _) = send(method.clone(), &server, path, None, body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a token"
        );
        let forged = common::mint("x", &all, true, 60).replace('.', ".x");
        let (status, _) = send(method.clone(), &server, path, Some(&forged), body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a forged token"
        );
        let expired = common::mint("x", &all, true, -3600);
        let (status, _) = send(method.clone(), &server, path, Some(&expired), body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with an expired token"
        );
        // Every permission but one needed → 403.
        for missing in needed {
            let perms: Vec<&str> = all.iter().copied().filter(|p| p != missing).collect();
            let (status, problem) = send(
                method.clone(),
                &server,
                path,
                Some(&token(&perms)),
                body.clone(),
            )
            .await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{method} {path} without {missing}"
            );
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains(missing)),
                "{problem}"
            );
        }
        // Exactly the needed permissions → allowed.
        let (status, body_out) = send(
            method.clone(),
            &server,
            path,
            Some(&token(needed)),
            body.clone(),
        )
        .await;
        assert!(
            status.is_success() || status == StatusCode::NOT_FOUND,
            "{method} {path} with {needed:?} → {status}: {body_out}"
        );
    }
    // Super-admin only endpoints.
    let browse = token(&all);
    let (status, _) = post(
        &server,
        "/api/job-groups",
        &browse,
        json!({"code": "ops", "labelZh": "运维"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = delete(&server, "/api/job-groups/ops", &browse).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Any signed-in user may preview a cron expression.
    let (status, _) = post(
        &server,
        "/api/cron/preview",
        &token(&[]),
        json!({"cron": "* * * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(
        reqwest::Method::POST,
        &server,
        "/api/cron/preview",
        None,
        Some(json!({"cron": "* * * * *"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Recent runs only with run.browse.
    let (_, detail) = get(&server, &job_path, &token(&["scheduler.task.view"])).await;
    assert!(detail.get("recentRuns").is_none(), "{detail}");
    let (_, detail) = get(
        &server,
        &job_path,
        &token(&["scheduler.task.view", "scheduler.run.browse"]),
    )
    .await;
    assert!(detail["recentRuns"].is_array(), "{detail}");
}

#[tokio::test]
async fn cron_preview() {
    let server = Server::start();
    let user = token(&[]);
    let (status, preview) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "0 30 2 * * *", "timezone": "America/New_York", "from": "2026-03-07T12:00:00Z", "count": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(preview["valid"], true);
    assert_eq!(preview["description"], "每天 02:30:00");
    assert_eq!(
        preview["nextFireTimes"],
        json!(["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"])
    );
    let resp = client()
        .post(server.url("/api/cron/preview"))
        .bearer_auth(&user)
        .header("Accept-Language", "en")
        .json(&json!({"cron": "0 0 9 * * MON"}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let preview: Value = resp.json().await.expect("json");
    assert_eq!(preview["valid"], false);
    assert_eq!(preview["nextFireTimes"], json!([]));
    assert_eq!(
        preview["error"],
        "Field 6 (day-of-week) `MON`: names such as `MON` are not supported: use numbers"
    );
    let (_, preview) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "*/30 * * * * *", "count": 50}),
    )
    .await;
    assert_eq!(preview["nextFireTimes"].as_array().map(Vec::len), Some(50));
}

#[tokio::test]
async fn handlers_and_groups() {
    let server = Server::start();
    let admin = admin_token();
    let resp = client()
        .get(server.url("/api/handlers"))
        .bearer_auth(&admin)
        .header("Accept-Language", "en")
        .send()
        .await
        .expect("request");
    let handlers: Value = resp.json().await.expect("json");
    let echo = handlers
        .as_array()
        .expect("list")
        .iter()
        .find(|h| h["name"] == "demo.echo")
        .expect("demo.echo is registered");
    assert_eq!(echo["title"], "Example: echo a message");
    assert_eq!(
        echo["defaultParams"],
        json!({"message": "hello", "delayMs": 0})
    );
    assert_eq!(echo["paramsSchema"]["type"], "object");

    let (_, groups) = get(&server, "/api/job-groups", &admin).await;
    let codes: Vec<&str> = groups
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["code"].as_str())
        .collect();
    assert_eq!(codes, ["default", "system"]);
    assert_eq!(groups[0]["label"], "默认");
    let (status, group) = post(
        &server,
        "/api/job-groups",
        &admin,
        json!({"code": "ops", "labelZh": "运维", "labelEn": "Operations"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{group}");
    let (status, _) = post(
        &server,
        "/api/job-groups",
        &admin,
        json!({"code": "ops", "labelZh": "运维"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "in ops", "handler": "demo.echo", "group": "ops"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    // A group in use cannot be deleted.
    let (status, _) = delete(&server, "/api/job-groups/ops", &admin).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn openapi_document_is_committed_and_served() {
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
            .expect("openapi/openapi.json is committed");
    let printed = std::process::Command::new(common::BIN)
        .arg("openapi")
        .output()
        .expect("run openapi");
    assert!(printed.status.success());
    let printed = String::from_utf8(printed.stdout).expect("utf-8");
    assert!(
        printed == committed,
        "openapi/openapi.json is stale: run `cargo run -- openapi > openapi/openapi.json` and commit it"
    );
    let doc: Value = serde_json::from_str(&printed).expect("json");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1"))
    );
    for path in [
        "/api/jobs",
        "/api/jobs/{id}",
        "/api/jobs/{id}/enabled",
        "/api/jobs/batch-delete",
        "/api/cron/preview",
        "/api/handlers",
        "/api/job-groups",
        "/api/job-groups/{code}",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} is documented");
    }
    // Every operation has a summary and documents its errors.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{method} {path} has a summary"
            );
            if path.starts_with("/api/") {
                assert!(
                    op["responses"].get("401").is_some(),
                    "{method} {path} documents 401"
                );
            }
        }
    }

    let server = Server::start();
    let served = client()
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("request");
    assert_eq!(served.status(), StatusCode::OK);
    let served: Value = served.json().await.expect("json");
    assert_eq!(served, doc);
    let docs = client()
        .get(server.url("/docs/"))
        .send()
        .await
        .expect("request");
    assert_eq!(docs.status(), StatusCode::OK);
    assert!(docs.text().await.expect("html").contains("swagger"));
    let health = client()
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("request");
    assert_eq!(health.status(), StatusCode::OK);
    let ready = client()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("request");
    assert_eq!(ready.status(), StatusCode::OK);
}

/// A client may send back the job it read, every field as it came: the
/// read-only ones (ids, counters, pause, descriptions) are ignored.
#[tokio::test]
async fn a_job_read_can_be_sent_back_whole() {
    let server = Server::start();
    let admin = admin_token();
    let (status, job) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "echoed", "handler": "demo.echo", "enabled": false, "maxRuns": 3}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_i64().expect("id");
    let (status, read) = get(&server, &format!("/api/jobs/{id}"), &admin).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    let (status, saved) = put(&server, &format!("/api/jobs/{id}"), &admin, read.clone()).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(
        saved["version"],
        read["version"].as_i64().expect("version") + 1
    );
    assert_eq!(saved["name"], "echoed");
}
