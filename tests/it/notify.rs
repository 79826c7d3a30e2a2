//! Black-box tests of settings, the notification inbox and notification
//! templates: the real binary on port 0 against a fresh SQLite file, with
//! notifications written straight into that file through the storage crate
//! (as the worker does).

use crate::common;
use crate::common::{Server, admin_token, fields, get, put, token};
use chrono::{Duration, TimeZone, Utc};
use qiwu_scheduler_worker::{TimeoutAlert, raise_timeout_alert};
use qiwu_storage::{NewNotification, Store};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Every permission code, but not super admin.
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

async fn send(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    lang: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, server.url(path), token, lang, body).await
}

async fn post(server: &Server, path: &str, token: &str) -> (StatusCode, Value) {
    send(server, reqwest::Method::POST, path, Some(token), None, None).await
}

/// The server's own database, opened beside it.
async fn server_store(server: &Server) -> Store {
    let url = format!("sqlite://{}", server.dir.path().join("qiwu.db").display());
    Store::connect(&url)
        .await
        .expect("open the server's database")
}

#[tokio::test]
async fn settings_are_super_admin_only_validated_and_audited() {
    let server = Server::start();
    let admin = admin_token();
    let everyone_else = token(&ALL_PERMS);

    let (status, _) = send(
        &server,
        reqwest::Method::GET,
        "/api/settings",
        None,
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = get(&server, "/api/settings", &everyone_else).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _) = put(
        &server,
        "/api/settings/audit.retention_days",
        &everyone_else,
        json!({"value": "30"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Defaults while nothing is stored.
    let (status, list) = get(&server, "/api/settings", &admin).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list[0]["key"], "audit.retention_days");
    assert_eq!(list[0]["value"], "180");
    assert_eq!(list[0]["updatedAt"], Value::Null);
    assert!(
        list[0]["description"]
            .as_str()
            .unwrap()
            .contains("保留天数")
    );
    assert_eq!(list[1]["key"], "notify.webhook_url");
    assert_eq!(list[1]["value"], "");
    let (_, en) = send(
        &server,
        reqwest::Method::GET,
        "/api/settings",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    assert!(en[0]["description"].as_str().unwrap().starts_with("Days"));

    // Valid changes.
    let (status, saved) = put(
        &server,
        "/api/settings/audit.retention_days",
        &admin,
        json!({"value": " 30 "}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["value"], "30");
    assert_eq!(saved["updatedBy"], "admin");
    let (status, saved) = put(
        &server,
        "/api/settings/audit.retention_days",
        &admin,
        json!({"value": 45}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["value"], "45");
    for url in ["https://hooks.example.com/qiwu?x=1", ""] {
        let (status, saved) = put(
            &server,
            "/api/settings/notify.webhook_url",
            &admin,
            json!({"value": url}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{saved}");
        assert_eq!(saved["value"], url);
    }

    // Invalid values: 400 naming `value`, nothing stored.
    for (key, value) in [
        ("audit.retention_days", json!("0")),
        ("audit.retention_days", json!("36501")),
        ("audit.retention_days", json!("abc")),
        ("audit.retention_days", json!(1.5)),
        ("audit.retention_days", json!(true)),
        ("audit.retention_days", json!(null)),
        ("notify.webhook_url", json!("ftp://example.com/x")),
        ("notify.webhook_url", json!("not a url")),
    ] {
        let (status, problem) = put(
            &server,
            &format!("/api/settings/{key}"),
            &admin,
            json!({"value": value}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}={value}: {problem}");
        assert_eq!(fields(&problem), ["value"], "{key}={value}: {problem}");
    }
    let (status, problem) = send(
        &server,
        reqwest::Method::PUT,
        "/api/settings/audit.retention_days",
        Some(&admin),
        Some("en"),
        Some(json!({"value": "0"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("1 to 36500"),
        "{problem}"
    );
    let (status, _) = put(
        &server,
        "/api/settings/audit.retention_days",
        &admin,
        json!({"value": "30", "extra": 1}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = put(
        &server,
        "/api/settings/audit.retention_days",
        &admin,
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Unknown keys.
    let (status, problem) = put(
        &server,
        "/api/settings/core.default_timezone",
        &admin,
        json!({"value": "UTC"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");

    let (_, list) = get(&server, "/api/settings", &admin).await;
    assert_eq!(list[0]["value"], "45");
    assert_eq!(list[1]["value"], "");

    // Each change is in the audit log with its before and after values.
    let store = server_store(&server).await;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let audits = qiwu_storage::entity::audit_log::Entity::find()
        .filter(qiwu_storage::entity::audit_log::Column::Action.eq("setting.modify"))
        .order_by_asc(qiwu_storage::entity::audit_log::Column::Id)
        .all(store.connection())
        .await
        .expect("audit rows");
    assert_eq!(audits.len(), 4);
    assert_eq!(audits[1].actor, "admin");
    assert_eq!(
        audits[1]
            .before_json
            .as_deref()
            .map(serde_json::from_str::<Value>)
            .map(Result::ok),
        Some(Some(json!({"key": "audit.retention_days", "value": "30"})))
    );
    assert_eq!(
        audits[1]
            .after_json
            .as_deref()
            .map(serde_json::from_str::<Value>)
            .map(Result::ok),
        Some(Some(json!({"key": "audit.retention_days", "value": "45"})))
    );
    // And readable through the audit log API, newest first.
    let (status, page) = get(
        &server,
        "/api/audit-logs?action=setting.modify&targetType=setting",
        &admin,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let items = page["items"].as_array().expect("items");
    assert_eq!(items.len(), 4);
    assert_eq!(items[0]["actionLabel"], "修改参数");
    assert_eq!(items[0]["targetId"], "notify.webhook_url");
    assert_eq!(
        items[0]["before"],
        json!({"key": "notify.webhook_url", "value": "https://hooks.example.com/qiwu?x=1"})
    );
    assert_eq!(
        items[0]["after"],
        json!({"key": "notify.webhook_url", "value": ""})
    );
}

#[tokio::test]
async fn inbox_pages_newest_first_and_marks_read() {
    let server = Server::start();
    let admin = admin_token();
    let store = server_store(&server).await;
    let base = Utc.with_ymd_and_hms(2026, 5, 1, 8, 0, 0).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let n = store
            .notifications()
            .create(
                &NewNotification {
                    recipient: "super_admins".into(),
                    template_code: "scheduler.timeout_alert".into(),
                    title: format!("任务超时：job {i}"),
                    body: format!("body {i}"),
                },
                base + Duration::minutes(i),
            )
            .await
            .expect("notification");
        ids.push(n.id);
    }
    let private = store
        .notifications()
        .create(
            &NewNotification {
                recipient: "someone-else".into(),
                template_code: "x".into(),
                title: "not for super admins".into(),
                body: String::new(),
            },
            base,
        )
        .await
        .expect("notification");

    // Walk the pages.
    let mut seen = Vec::new();
    let mut path = "/api/notifications?limit=2".to_string();
    loop {
        let (status, page) = get(&server, &path, &admin).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert_eq!(page["unreadCount"], 5);
        for item in page["items"].as_array().expect("items") {
            seen.push(item["id"].as_i64().expect("id"));
            assert_eq!(item["read"], false);
            assert_eq!(item["templateCode"], "scheduler.timeout_alert");
        }
        match page["nextCursor"].as_str() {
            Some(c) => path = format!("/api/notifications?limit=2&cursor={c}"),
            None => break,
        }
    }
    let newest_first: Vec<i64> = ids.iter().rev().copied().collect();
    assert_eq!(seen, newest_first);
    let (_, first) = get(&server, "/api/notifications", &admin).await;
    assert_eq!(first["items"][0]["title"], "任务超时：job 4");
    assert_eq!(first["items"][0]["createdAt"], "2026-05-01T08:04:00Z");

    // Bad queries.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("cursor=garbage", "cursor"),
    ] {
        let (status, problem) = get(&server, &format!("/api/notifications?{query}"), &admin).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(fields(&problem), [field], "{query}: {problem}");
    }
    let (status, _) = get(&server, "/api/notifications?unread=maybe", &admin).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Mark one read.
    let (status, read) = post(
        &server,
        &format!("/api/notifications/{}/read", ids[1]),
        &admin,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["read"], true);
    let read_at = read["readAt"].clone();
    assert!(read_at.is_string());
    let (_, again) = post(
        &server,
        &format!("/api/notifications/{}/read", ids[1]),
        &admin,
    )
    .await;
    assert_eq!(again["readAt"], read_at, "the first read time is kept");
    let (_, unread) = get(&server, "/api/notifications?unread=true", &admin).await;
    assert_eq!(unread["items"].as_array().map(Vec::len), Some(4));
    assert_eq!(unread["unreadCount"], 4);
    for missing in [private.id.to_string(), "999999".into(), "abc".into()] {
        let (status, _) = post(
            &server,
            &format!("/api/notifications/{missing}/read"),
            &admin,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    }

    // Mark all read.
    let (status, done) = post(&server, "/api/notifications/read-all", &admin).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["count"], 4);
    let (_, page) = get(&server, "/api/notifications?unread=true", &admin).await;
    assert_eq!(page["items"], json!([]));
    assert_eq!(page["unreadCount"], 0);

    // Super admins only.
    let user = token(&ALL_PERMS);
    let (status, _) = get(&server, "/api/notifications", &user).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = post(
        &server,
        &format!("/api/notifications/{}/read", ids[0]),
        &user,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = post(&server, "/api/notifications/read-all", &user).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn templates_are_read_edited_and_used_by_the_next_alert() {
    let server = Server::start();
    let admin = admin_token();
    let path = "/api/notification-templates/scheduler.timeout_alert";

    // Seeded at start-up.
    let (status, list) = get(&server, "/api/notification-templates", &admin).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let codes: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|t| t["code"].as_str())
        .collect();
    assert_eq!(
        codes,
        [
            "scheduler.calendar_data_alert",
            "scheduler.consecutive_failures_alert",
            "scheduler.failure_alert",
            "scheduler.recovery_alert",
            "scheduler.timeout_alert",
        ]
    );
    let timeout = &list[4];
    assert_eq!(timeout["name"], "任务超时告警");
    assert_eq!(timeout["titleZh"], "任务超时：{jobName}");
    assert_eq!(timeout["updatedBy"], "system");
    assert!(
        timeout["placeholders"]
            .as_array()
            .expect("placeholders")
            .contains(&json!("startedAt"))
    );
    let (status, one) = send(
        &server,
        reqwest::Method::GET,
        path,
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["name"], "Job timeout alert");
    assert_eq!(one["titleEn"], "Job timed out: {jobName}");
    let (status, _) = get(&server, "/api/notification-templates/no.such", &admin).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Invalid edits name every bad field and change nothing.
    let (status, problem) = put(
        &server,
        path,
        &admin,
        json!({"titleZh": "  ", "bodyZh": "ok {handler}", "titleEn": "ok", "bodyEn": "Hi {jobNmae}"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(fields(&problem), ["titleZh", "bodyEn"]);
    let (status, problem) = put(
        &server,
        path,
        &admin,
        json!({"titleZh": "x".repeat(201), "bodyZh": "b", "titleEn": "t"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(fields(&problem), ["titleZh", "bodyEn"]);
    let (status, _) = put(
        &server,
        path,
        &admin,
        json!({"titleZh": "t", "bodyZh": "b", "titleEn": "t", "bodyEn": "b", "code": "x"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, unchanged) = get(&server, path, &admin).await;
    assert_eq!(unchanged["titleZh"], "任务超时：{jobName}");

    // Super admins only; unknown templates cannot be created by an edit.
    let user = token(&ALL_PERMS);
    let edit = json!({
        "titleZh": "【超时】{jobName}",
        "bodyZh": "处理器 {handler}，超时 {timeoutMs} 毫秒，第 {attempt} 次",
        "titleEn": "[Timeout] {jobName}",
        "bodyEn": "Handler {handler}, {timeoutMs} ms, attempt {attempt}",
    });
    let (status, _) = put(&server, path, &user, edit.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = get(&server, "/api/notification-templates", &user).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = put(
        &server,
        "/api/notification-templates/no.such",
        &admin,
        edit.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, saved) = put(&server, path, &admin, edit).await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["titleZh"], "【超时】{jobName}");
    assert_eq!(saved["updatedBy"], "admin");
    let (_, audit) = send(
        &server,
        reqwest::Method::GET,
        "/api/audit-logs?action=template.modify",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(audit["items"].as_array().map(Vec::len), Some(1), "{audit}");
    assert_eq!(
        audit["items"][0]["actionLabel"],
        "Modify notification template"
    );
    assert_eq!(audit["items"][0]["targetType"], "notification_template");
    assert_eq!(audit["items"][0]["targetId"], "scheduler.timeout_alert");
    assert_eq!(
        audit["items"][0]["before"]["titleZh"],
        "任务超时：{jobName}"
    );
    assert_eq!(audit["items"][0]["after"]["titleZh"], "【超时】{jobName}");
    let (_, reread) = get(&server, path, &admin).await;
    assert_eq!(
        reread["bodyEn"],
        "Handler {handler}, {timeoutMs} ms, attempt {attempt}"
    );

    // The next alert uses the edited text.
    let store = server_store(&server).await;
    raise_timeout_alert(
        &store,
        &TimeoutAlert {
            job_id: 3,
            job_name: "夜间报表".into(),
            handler: "demo.echo".into(),
            timeout_ms: 1000,
            started_at: Utc::now(),
            attempt: 2,
            timezone: chrono_tz::UTC,
            channels: vec![],
        },
    )
    .await
    .expect("alert");
    let (_, inbox) = get(&server, "/api/notifications", &admin).await;
    assert_eq!(inbox["items"][0]["title"], "【超时】夜间报表");
    assert_eq!(
        inbox["items"][0]["body"],
        "处理器 demo.echo，超时 1000 毫秒，第 2 次"
    );
}

#[test]
fn a_short_webhook_secret_is_refused_at_start_up() {
    let dir = common::TempDir::new("webhook-secret");
    let out = std::process::Command::new(common::BIN)
        .arg("serve")
        .current_dir(dir.path())
        .env_clear()
        .env("QIWU_LISTEN", "127.0.0.1:0")
        .env("QIWU_WEBHOOK_SECRET", "short")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("QIWU_WEBHOOK_SECRET"), "{stderr}");
}
