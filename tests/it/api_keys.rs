//! Black-box tests of service accounts' API keys (SPEC §9): created by super
//! admins, shown once, scoped to permissions, revocable, audited.

use crate::common::{Db, Server, admin_token, audit, client, token};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const ALL_PERMS: [&str; 11] = [
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

/// One answer: status, headers, the body as text and as JSON (or a string).
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Value,
}

async fn call(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
    lang: Option<&str>,
) -> Answer {
    let mut req = client().request(method, server.url(path));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    if let Some(l) = lang {
        req = req.header("Accept-Language", l);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    let json = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
    Answer {
        status,
        headers,
        text,
        json,
    }
}

async fn get(server: &Server, path: &str, bearer: &str) -> Answer {
    call(reqwest::Method::GET, server, path, Some(bearer), None, None).await
}

async fn post(server: &Server, path: &str, bearer: &str, body: Value) -> Answer {
    call(
        reqwest::Method::POST,
        server,
        path,
        Some(bearer),
        Some(body),
        None,
    )
    .await
}

async fn delete(server: &Server, path: &str, bearer: &str) -> Answer {
    call(
        reqwest::Method::DELETE,
        server,
        path,
        Some(bearer),
        None,
        None,
    )
    .await
}

/// A disabled demo.echo job (so nothing fires on schedule); its id.
async fn create_job(server: &Server, name: &str) -> i64 {
    let a = post(
        server,
        "/api/jobs",
        &admin_token(),
        json!({"name": name, "handler": "demo.echo", "enabled": false}),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    a.json["id"].as_i64().expect("id")
}

/// Creates a key as the super admin; returns (the created answer's JSON, key).
async fn create_key(server: &Server, name: &str, perms: &[&str]) -> (Value, String) {
    let a = post(
        server,
        "/api/api-keys",
        &admin_token(),
        json!({"name": name, "perms": perms}),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let key = a.json["key"].as_str().expect("key").to_owned();
    (a.json, key)
}

/// The whole life of a service account's key, on one database.
async fn service_account_lifecycle(db: Db) {
    let server = Server::start_with(db, &[]);
    let admin = admin_token();
    let job = create_job(&server, "called by a service").await;
    let job_path = format!("/api/jobs/{job}");

    // Created once, with the plaintext and the record.
    let a = post(
        &server,
        "/api/api-keys",
        &admin,
        json!({"name": "wf-service", "perms": ["scheduler.task.run", "scheduler.task.view"]}),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(
        a.headers.get("cache-control").and_then(|v| v.to_str().ok()),
        Some("no-store")
    );
    let created = a.json;
    let key = created["key"].as_str().expect("key").to_owned();
    let id = created["id"].as_i64().expect("id");
    let prefix = created["prefix"].as_str().expect("prefix").to_owned();
    assert!(
        key.starts_with(&format!("qk_{prefix}_")),
        "{key} / {prefix}"
    );
    let secret = key[format!("qk_{prefix}_").len()..].to_owned();
    assert!(secret.len() >= 43, "{secret}");
    assert_eq!(created["name"], "wf-service");
    assert_eq!(
        created["perms"],
        json!(["scheduler.task.view", "scheduler.task.run"])
    );
    assert_eq!(created["createdBy"], "admin");
    assert!(created["createdAt"].is_string());
    assert_eq!(created["revokedAt"], Value::Null);
    assert_eq!(created["lastUsedAt"], Value::Null);
    assert_eq!(created["notice"], "请立即保存此密钥：它只显示这一次");

    // The key runs the job once and reads it...
    let a = post(&server, &format!("{job_path}/run"), &key, json!({})).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
    assert!(a.json["fireId"].as_i64().is_some(), "{}", a.text);
    let a = get(&server, &job_path, &key).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.json["id"], job);
    // ...without the run log, which its scopes do not include.
    assert!(a.json.get("recentRuns").is_none(), "{}", a.text);

    // Beyond its scopes: 403, not 401.
    let a = call(
        reqwest::Method::PUT,
        &server,
        &job_path,
        Some(&key),
        Some(json!({"version": 1, "remark": "by a key"})),
        Some("en"),
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    assert_eq!(a.json["type"], "urn:qiwu:problem:forbidden");
    assert!(
        a.json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("scheduler.task.modify")),
        "{}",
        a.text
    );
    for path in ["/api/jobs", "/api/runs"] {
        let a = get(&server, path, &key).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{path}: {}", a.text);
    }
    // A key is never a super admin.
    for a in [
        get(&server, "/api/api-keys", &key).await,
        get(&server, "/api/audit-logs", &key).await,
        post(
            &server,
            "/api/api-keys",
            &key,
            json!({"name": "escalate", "perms": ["scheduler.task.run"]}),
        )
        .await,
        delete(&server, &format!("/api/api-keys/{id}"), &key).await,
    ] {
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    }

    // The run is audited under the key's name.
    let runs = audit(&server, "action=job.run").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["actor"], "apikey:wf-service");

    // The list shows the key's use but never its secret.
    let a = get(&server, "/api/api-keys", &admin).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(!a.text.contains(&secret), "{}", a.text);
    let items = a.json.as_array().expect("a list").clone();
    assert_eq!(items.len(), 1);
    let listed = &items[0];
    assert!(listed.get("key").is_none(), "{listed}");
    assert_eq!(listed["id"], id);
    assert_eq!(listed["prefix"], prefix.as_str());
    assert_eq!(listed["name"], "wf-service");
    assert!(listed["lastUsedAt"].is_string(), "{listed}");
    assert_eq!(listed["revokedAt"], Value::Null);

    // Revoke: 204, again 204, and the key is refused from then on (401).
    let a = delete(&server, &format!("/api/api-keys/{id}"), &admin).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text);
    let a = delete(&server, &format!("/api/api-keys/{id}"), &admin).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{}", a.text);
    for a in [
        post(&server, &format!("{job_path}/run"), &key, json!({})).await,
        get(&server, &job_path, &key).await,
    ] {
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{}", a.text);
        assert_eq!(a.json["type"], "urn:qiwu:problem:unauthenticated");
        assert_eq!(
            a.headers
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
    }
    let a = get(&server, "/api/api-keys", &admin).await;
    assert!(a.json[0]["revokedAt"].is_string(), "{}", a.text);
    let a = delete(&server, "/api/api-keys/999999", &admin).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);

    // Create and revoke are audited once each, never with the secret.
    let created = audit(&server, "action=apikey.create").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["actor"], "admin");
    assert_eq!(created[0]["targetType"], "apikey");
    assert_eq!(created[0]["targetId"], id.to_string());
    assert_eq!(created[0]["after"]["prefix"], prefix.as_str());
    assert_eq!(created[0]["actionLabel"], "创建 API 密钥");
    let revoked = audit(&server, "action=apikey.revoke").await;
    assert_eq!(revoked.len(), 1, "a second revoke changes nothing");
    assert_eq!(revoked[0]["before"]["revokedAt"], Value::Null);
    assert!(revoked[0]["after"]["revokedAt"].is_string());
    let everything = get(&server, "/api/audit-logs?limit=100", &admin).await;
    assert!(!everything.text.contains(&secret));
    let by_target = audit(&server, "targetType=apikey").await;
    assert_eq!(by_target.len(), 2);
}

#[tokio::test]
async fn service_account_lifecycle_on_sqlite() {
    service_account_lifecycle(Db::Sqlite).await;
}

#[tokio::test]
async fn service_account_lifecycle_on_postgres() {
    service_account_lifecycle(Db::Postgres).await;
}

#[tokio::test]
async fn service_account_lifecycle_on_mariadb() {
    service_account_lifecycle(Db::MySql).await;
}

#[tokio::test]
async fn key_endpoints_are_for_super_admins_only() {
    let server = Server::start();
    let (created, _) = create_key(&server, "svc", &["scheduler.task.run"]).await;
    let id = created["id"].as_i64().expect("id");
    let everyone = token(&ALL_PERMS);
    let body = json!({"name": "mine", "perms": ["scheduler.task.run"]});
    let key_path = format!("/api/api-keys/{id}");
    let requests = [
        (reqwest::Method::GET, "/api/api-keys", None),
        (reqwest::Method::POST, "/api/api-keys", Some(body.clone())),
        (reqwest::Method::DELETE, key_path.as_str(), None),
    ];
    for (method, path, body) in requests {
        let a = call(
            method.clone(),
            &server,
            path,
            Some(&everyone),
            body.clone(),
            None,
        )
        .await;
        assert_eq!(
            a.status,
            StatusCode::FORBIDDEN,
            "{method} {path}: {}",
            a.text
        );
        assert_eq!(a.json["type"], "urn:qiwu:problem:forbidden");
        let a = call(method.clone(), &server, path, None, body, None).await;
        assert_eq!(
            a.status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {}",
            a.text
        );
    }
    // Nothing changed.
    let a = get(&server, "/api/api-keys", &admin_token()).await;
    let items = a.json.as_array().expect("a list");
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["revokedAt"], Value::Null);
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field() {
    let server = Server::start();
    let admin = admin_token();
    let cases = [
        (json!({"perms": ["scheduler.task.run"]}), vec!["name"]),
        (
            json!({"name": "  ", "perms": ["scheduler.task.run"]}),
            vec!["name"],
        ),
        (
            json!({"name": "x".repeat(65), "perms": ["scheduler.task.run"]}),
            vec!["name"],
        ),
        (
            json!({"name": 7, "perms": ["scheduler.task.run"]}),
            vec!["name"],
        ),
        (json!({"name": "svc"}), vec!["perms"]),
        (json!({"name": "svc", "perms": []}), vec!["perms"]),
        (
            json!({"name": "svc", "perms": "scheduler.task.run"}),
            vec!["perms"],
        ),
        (
            json!({"name": "svc", "perms": ["scheduler.task.run", "scheduler.task.nuke"]}),
            vec!["perms/1"],
        ),
        (
            json!({"name": "svc", "perms": ["superAdmin", 3]}),
            vec!["perms/0", "perms/1"],
        ),
        (
            json!({"name": "svc", "perms": ["scheduler.task.run"], "superAdmin": true}),
            vec!["superAdmin"],
        ),
        (json!({}), vec!["name", "perms"]),
    ];
    for (body, fields) in cases {
        let a = call(
            reqwest::Method::POST,
            &server,
            "/api/api-keys",
            Some(&admin),
            Some(body.clone()),
            Some("en"),
        )
        .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {}", a.text);
        assert_eq!(a.json["type"], "urn:qiwu:problem:validation", "{}", a.text);
        let got: Vec<&str> = a.json["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|e| e["field"].as_str())
            .collect();
        assert_eq!(got, fields, "{body}: {}", a.text);
    }
    // The English message names the unknown code.
    let a = call(
        reqwest::Method::POST,
        &server,
        "/api/api-keys",
        Some(&admin),
        Some(json!({"name": "svc", "perms": ["scheduler.task.nuke"]})),
        Some("en"),
    )
    .await;
    assert!(
        a.json["errors"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("scheduler.task.nuke") && m.contains("Unknown")),
        "{}",
        a.text
    );
    // Not JSON, or not an object.
    let a = client()
        .post(server.url("/api/api-keys"))
        .bearer_auth(&admin)
        .header("Content-Type", "application/json")
        .body("{name:")
        .send()
        .await
        .expect("request");
    assert_eq!(a.status(), StatusCode::BAD_REQUEST);
    let a = post(&server, "/api/api-keys", &admin, json!(["svc"])).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    // A bad id is a 404.
    let a = delete(&server, "/api/api-keys/abc", &admin).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    // Nothing was created or audited.
    let a = get(&server, "/api/api-keys", &admin).await;
    assert_eq!(a.json, json!([]));
    assert!(audit(&server, "targetType=apikey").await.is_empty());
}

#[tokio::test]
async fn unknown_wrong_or_malformed_keys_are_401() {
    let server = Server::start();
    let job = create_job(&server, "guarded").await;
    let (created, key) = create_key(&server, "svc", &["scheduler.task.view"]).await;
    let prefix = created["prefix"].as_str().expect("prefix");
    let secret = &key[format!("qk_{prefix}_").len()..];
    let wrong_secret = format!("qk_{prefix}_{}", "A".repeat(secret.len()));
    let wrong_prefix = format!("qk_00000000_{secret}");
    let path = format!("/api/jobs/{job}");
    for bad in [
        wrong_secret.as_str(),
        wrong_prefix.as_str(),
        "qk_",
        "qk_short",
        &key[..key.len() - 1],
    ] {
        let a = call(
            reqwest::Method::GET,
            &server,
            &path,
            Some(bad),
            None,
            Some("en"),
        )
        .await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{bad}: {}", a.text);
        assert_eq!(
            a.json["detail"], "The API key is not valid or has been revoked",
            "{}",
            a.text
        );
    }
    let a = get(&server, &path, &wrong_secret).await;
    assert_eq!(a.json["detail"], "API 密钥无效或已被吊销");
    // Failed attempts record no use; the right key still works.
    let a = get(&server, "/api/api-keys", &admin_token()).await;
    assert_eq!(a.json[0]["lastUsedAt"], Value::Null, "{}", a.text);
    let a = get(&server, &path, &key).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    // JWTs are unaffected.
    let a = get(&server, &path, &token(&["scheduler.task.view"])).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
}
