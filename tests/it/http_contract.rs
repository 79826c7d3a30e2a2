//! Black-box tests of the HTTP contract a generated client relies on: the
//! status codes of the framework's own failures (405 with `Allow`, 413,
//! 414, 415), problem+json with field-named zh/en messages for every bad
//! body, query and path, integers bounded to what JSON numbers carry,
//! `Accept-Language` quality 0, the Swagger UI working offline, and the
//! API-side rules of issue 7 (control characters, long `sub`, the run-once
//! queue bound); calendars (issue 11) follow the same rules, and the probes
//! answer a closed status with their reasons.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{BIN, Db, Server, TempDir, admin_token, client, mint, token};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One answer: status, headers, body as JSON (or the text as a string).
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    json: Value,
}

impl Answer {
    async fn of(resp: reqwest::Response) -> Answer {
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            headers,
            json,
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem+json answer with `status` and returns the fields
    /// its `errors` name.
    fn problem(&self, status: StatusCode) -> Vec<String> {
        assert_eq!(self.status, status, "{}", self.json);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.json
        );
        assert_eq!(self.json["status"], status.as_u16(), "{}", self.json);
        assert!(
            self.json["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{}",
            self.json
        );
        self.json["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|e| e["field"].as_str().map(str::to_string))
            .collect()
    }
}

async fn send(
    server: &Server,
    method: &str,
    path: &str,
    lang: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client()
        .request(method, server.url(path))
        .bearer_auth(admin_token());
    if let Some(lang) = lang {
        req = req.header("Accept-Language", lang);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    Answer::of(req.send().await.expect("request")).await
}

async fn create_job(server: &Server, body: Value) -> Value {
    let a = send(server, "POST", "/api/jobs", None, Some(body)).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    a.json
}

#[tokio::test]
async fn unsupported_methods_are_405_naming_the_allowed_ones() {
    let server = Server::start();
    let cases = [
        ("TRACE", "/api/jobs", "GET, POST"),
        ("DELETE", "/api/jobs", "GET, POST"),
        ("POST", "/api/jobs/7", "GET, PUT, DELETE"),
        ("PATCH", "/api/jobs/7", "GET, PUT, DELETE"),
        ("OPTIONS", "/api/jobs/7", "GET, PUT, DELETE"),
        // Literal paths are not taken for an id.
        ("POST", "/api/jobs/export", "GET"),
        ("PUT", "/api/jobs/export", "GET"),
        ("GET", "/api/jobs/batch-delete", "POST"),
        ("GET", "/api/runs/clear", "POST"),
        ("PUT", "/api/cron/preview", "POST"),
        ("POST", "/healthz", "GET"),
        ("POST", "/metrics", "GET"),
        ("DELETE", "/openapi.json", "GET"),
    ];
    for (method, path, allow) in cases {
        let a = send(&server, method, path, Some("en"), None).await;
        a.problem(StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(a.header("allow"), Some(allow), "{method} {path}");
        assert!(
            a.json["detail"].as_str().is_some_and(|d| d.contains(allow)),
            "{method} {path}: {}",
            a.json
        );
    }
    // The methods a path has still work, and unknown paths are 404.
    let a = send(
        &server,
        "POST",
        "/api/jobs/batch-delete",
        None,
        Some(json!({"ids": [99]})),
    )
    .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = send(&server, "POST", "/api/runs/clear", None, None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = send(&server, "GET", "/api/nope", None, None).await;
    a.problem(StatusCode::NOT_FOUND);
    assert_eq!(a.header("allow"), None);
}

#[tokio::test]
async fn framework_failures_are_problem_json() {
    let server = Server::start();
    let admin = admin_token();
    // A body over 256 KiB: 413, with or without a length.
    let big = json!({"cron": "x".repeat(300 * 1024)}).to_string();
    let a = Answer::of(
        client()
            .post(server.url("/api/cron/preview"))
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .expect("request"),
    )
    .await;
    a.problem(StatusCode::PAYLOAD_TOO_LARGE);
    // A body that is not JSON by its type: 415, also without a type.
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut req = client()
            .post(server.url("/api/cron/preview"))
            .bearer_auth(&admin)
            .header("accept-language", "en")
            .body(r#"{"cron": "* * * * *"}"#);
        if let Some(t) = content_type {
            req = req.header("content-type", t);
        }
        let a = Answer::of(req.send().await.expect("request")).await;
        a.problem(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(
            a.json["detail"]
                .as_str()
                .is_some_and(|d| d.contains("application/json")),
            "{}",
            a.json
        );
    }
    // A +json type is JSON.
    let a = Answer::of(
        client()
            .post(server.url("/api/cron/preview"))
            .bearer_auth(&admin)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"cron": "* * * * *"}"#)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    // A request target over 16 KiB: 414, before authentication.
    let long = format!("/api/jobs?name={}", "n".repeat(20_000));
    let a = Answer::of(
        client()
            .get(server.url(&long))
            .send()
            .await
            .expect("request"),
    )
    .await;
    a.problem(StatusCode::URI_TOO_LONG);
    // Malformed and empty JSON bodies: 400 in the request's language.
    let a = Answer::of(
        client()
            .post(server.url("/api/jobs"))
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .header("accept-language", "en")
            .body("{\"name\": ")
            .send()
            .await
            .expect("request"),
    )
    .await;
    a.problem(StatusCode::BAD_REQUEST);
    assert!(
        a.json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("not valid JSON") && d.contains("line 1")),
        "{}",
        a.json
    );
    let a = Answer::of(
        client()
            .put(server.url("/api/jobs/1/enabled"))
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .send()
            .await
            .expect("request"),
    )
    .await;
    a.problem(StatusCode::BAD_REQUEST);
    assert!(
        a.json["detail"]
            .as_str()
            .is_some_and(|d| d.contains("请求体")),
        "{}",
        a.json
    );
}

#[tokio::test]
async fn bad_values_are_named_in_both_languages() {
    let server = Server::start();
    let job = create_job(&server, json!({"name": "named", "handler": "demo.echo"})).await;
    let id = job["id"].as_i64().expect("id");
    // (method, path, body, the fields the 400 must name)
    let cases: Vec<(&str, String, Option<Value>, Vec<&str>)> = vec![
        (
            "POST",
            "/api/cron/preview".into(),
            Some(json!({"cron": "* * * * *", "from": "2026-02-30T00:00:00Z"})),
            vec!["from"],
        ),
        (
            "POST",
            "/api/cron/preview".into(),
            Some(json!({"cron": 5, "count": 51, "tz": "UTC"})),
            vec!["cron", "count", "tz"],
        ),
        (
            "POST",
            "/api/cron/preview".into(),
            Some(json!({})),
            vec!["cron"],
        ),
        ("GET", "/api/jobs?page=abc".into(), None, vec!["page"]),
        (
            "GET",
            "/api/jobs?page=18446744073709551615".into(),
            None,
            vec!["page"],
        ),
        (
            "GET",
            "/api/jobs?page=9007199254740992".into(),
            None,
            vec!["page"],
        ),
        ("GET", "/api/jobs?pageSize=0".into(), None, vec!["pageSize"]),
        ("GET", "/api/jobs?enabled=yes".into(), None, vec!["enabled"]),
        ("GET", "/api/jobs?page=1&page=2".into(), None, vec!["page"]),
        (
            "GET",
            "/api/runs?jobId=9007199254740992".into(),
            None,
            vec!["jobId"],
        ),
        ("GET", "/api/runs?status=done".into(), None, vec!["status"]),
        (
            "GET",
            "/api/notifications?limit=abc".into(),
            None,
            vec!["limit"],
        ),
        (
            "GET",
            "/api/notifications?unread=1".into(),
            None,
            vec!["unread"],
        ),
        (
            "PUT",
            format!("/api/jobs/{id}/enabled"),
            Some(json!({"enabled": "yes", "version": 9007199254740992_i64})),
            vec!["enabled", "version"],
        ),
        (
            "PUT",
            format!("/api/jobs/{id}"),
            Some(json!({"version": 9007199254740992_i64})),
            vec!["version"],
        ),
        (
            "POST",
            "/api/jobs/batch-delete".into(),
            Some(json!({"ids": [1, 0, "x", 9007199254740992_i64]})),
            vec!["ids/1", "ids/2", "ids/3"],
        ),
        (
            "POST",
            "/api/runs/batch-delete".into(),
            Some(json!({"ids": [], "all": true})),
            vec!["ids", "all"],
        ),
        (
            "POST",
            "/api/job-groups".into(),
            Some(json!({"code": 5, "labelZh": "运维\u{7}"})),
            vec!["code"],
        ),
        (
            "PUT",
            "/api/settings/audit.retention_days".into(),
            Some(json!({"value": true})),
            vec!["value"],
        ),
        (
            "PUT",
            "/api/notification-templates/scheduler.timeout_alert".into(),
            Some(json!({"titleZh": 1})),
            vec!["titleZh"],
        ),
    ];
    for (method, path, body, fields) in cases {
        let zh = send(&server, method, &path, None, body.clone()).await;
        assert_eq!(
            zh.problem(StatusCode::BAD_REQUEST),
            fields,
            "{method} {path}"
        );
        let en = send(&server, method, &path, Some("en"), body.clone()).await;
        assert_eq!(
            en.problem(StatusCode::BAD_REQUEST),
            fields,
            "{method} {path}"
        );
        // Each message names its field, in each language, and the two differ.
        for (i, field) in fields.iter().enumerate() {
            let name = field.split('/').next().unwrap_or(field);
            for a in [&zh, &en] {
                let message = a.json["errors"][i]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains(name) || name == "ids",
                    "{method} {path}: {message}"
                );
            }
            assert_ne!(
                zh.json["errors"][i]["message"],
                en.json["errors"][i]["message"]
            );
        }
        assert!(
            !en.json["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("deserialize"),
            "{}",
            en.json
        );
    }
    // A path that cannot hold an id names nothing there: 404 naming `id`.
    for path in [
        "/api/jobs/abc",
        "/api/jobs/0",
        "/api/jobs/9007199254740992",
        "/api/runs/-1",
    ] {
        let a = send(&server, "GET", path, Some("en"), None).await;
        assert_eq!(a.problem(StatusCode::NOT_FOUND), ["id"], "{path}");
        assert!(
            a.json["detail"]
                .as_str()
                .is_some_and(|d| d.contains("9007199254740991") && !d.contains("i64")),
            "{}",
            a.json
        );
    }
    // The largest safe id is an id (of nothing).
    let a = send(&server, "GET", "/api/jobs/9007199254740991", None, None).await;
    assert_eq!(a.problem(StatusCode::NOT_FOUND), Vec::<String>::new());
    // None of it changed the job.
    let a = send(&server, "GET", &format!("/api/jobs/{id}"), None, None).await;
    assert_eq!(a.json["version"], 1);
}

#[tokio::test]
async fn accept_language_quality_zero_is_not_acceptable() {
    let server = Server::start();
    let cases = [
        ("en", "Not found"),
        ("en;q=0", "不存在"),
        ("en;q=0, zh;q=0.5", "不存在"),
        ("zh;q=0, en;q=0.1", "Not found"),
        ("zh-CN;q=0", "Not found"),
        ("fr, en;q=0.3", "Not found"),
    ];
    for (header, title) in cases {
        let a = send(&server, "GET", "/api/jobs/424242", Some(header), None).await;
        a.problem(StatusCode::NOT_FOUND);
        assert_eq!(a.json["title"], title, "{header}");
    }
}

#[tokio::test]
async fn control_characters_are_refused_in_names_remarks_and_labels() {
    for db in [Db::Sqlite, Db::Postgres] {
        let server = Server::start_with(db, &[]);
        let job = create_job(&server, json!({"name": "clean", "handler": "demo.echo"})).await;
        let id = job["id"].as_i64().expect("id");
        let cases: Vec<(&str, String, Value, &str)> = vec![
            (
                "POST",
                "/api/jobs".into(),
                json!({"name": "a\u{0}b", "handler": "demo.echo"}),
                "name",
            ),
            (
                "POST",
                "/api/jobs".into(),
                json!({"name": "tab\tname", "handler": "demo.echo"}),
                "name",
            ),
            (
                "POST",
                "/api/jobs".into(),
                json!({"name": "line\n", "handler": "demo.echo"}),
                "name",
            ),
            (
                "POST",
                "/api/jobs".into(),
                json!({"name": "ok", "handler": "demo.echo", "remark": "x\u{7f}"}),
                "remark",
            ),
            (
                "PUT",
                format!("/api/jobs/{id}"),
                json!({"version": 1, "remark": "a\u{0}"}),
                "remark",
            ),
            (
                "PUT",
                format!("/api/jobs/{id}"),
                json!({"version": 1, "name": "\u{1b}[31m"}),
                "name",
            ),
            (
                "POST",
                "/api/job-groups".into(),
                json!({"code": "ops", "labelZh": "运\u{0}维"}),
                "labelZh",
            ),
            (
                "POST",
                "/api/job-groups".into(),
                json!({"code": "ops", "labelZh": "运维", "labelEn": "Ops\r\n"}),
                "labelEn",
            ),
        ];
        for (method, path, body, field) in cases {
            for lang in [None, Some("en")] {
                let a = send(&server, method, &path, lang, Some(body.clone())).await;
                assert_eq!(
                    a.problem(StatusCode::BAD_REQUEST),
                    [field],
                    "{db:?} {method} {path} {body}"
                );
            }
        }
        // U+0000 in a filter or a path matches nothing (PostgreSQL would
        // refuse it in a comparison), and a template refuses it.
        for path in [
            "/api/jobs?name=a%00b",
            "/api/jobs?group=%00&handler=%00",
            "/api/runs?jobName=%00&handler=%00",
            "/api/audit-logs?actor=%00&targetId=%00",
            "/api/jobs/export?name=%00",
            "/api/runs/export?handler=%00",
        ] {
            let a = send(&server, "GET", path, None, None).await;
            assert_eq!(a.status, StatusCode::OK, "{db:?} {path}: {}", a.json);
        }
        let a = send(&server, "DELETE", "/api/job-groups/a%00b", None, None).await;
        a.problem(StatusCode::NOT_FOUND);
        let a = send(
            &server,
            "PUT",
            "/api/notification-templates/scheduler.timeout_alert",
            None,
            Some(json!({"titleZh": "超时\u{0}", "bodyZh": "x", "titleEn": "x", "bodyEn": "x"})),
        )
        .await;
        assert_eq!(a.problem(StatusCode::BAD_REQUEST), ["titleZh"], "{db:?}");
        let nul_sub = mint("a\u{0}b", &[], true, 600);
        let a = Answer::of(
            client()
                .get(server.url("/api/jobs"))
                .bearer_auth(&nul_sub)
                .send()
                .await
                .expect("request"),
        )
        .await;
        a.problem(StatusCode::UNAUTHORIZED);
        // Other characters are fine, and nothing above was stored.
        let a = create_job(
            &server,
            json!({"name": "名字 · naïve ✓", "handler": "demo.echo", "remark": "备注 \u{a0}"}),
        )
        .await;
        assert_eq!(a["name"], "名字 · naïve ✓");
        let a = send(&server, "GET", "/api/jobs", None, None).await;
        let names: Vec<&str> = a.json["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|j| j["name"].as_str())
            .filter(|n| !n.starts_with("清理") && !n.starts_with("派发") && !n.starts_with("示例"))
            .collect();
        assert_eq!(names, ["clean", "名字 · naïve ✓"], "{db:?}");
        let a = send(&server, "GET", "/api/job-groups", None, None).await;
        assert_eq!(a.json.as_array().map(Vec::len), Some(2), "{db:?}");
    }
}

#[tokio::test]
async fn calendars_follow_the_same_conventions() {
    for db in [Db::Sqlite, Db::Postgres] {
        let server = Server::start_with(db, &[]);
        let a = send(
            &server,
            "POST",
            "/api/calendars",
            None,
            Some(json!({"code": "acme", "name": "Acme", "dates": [{"date": "2026-12-24", "kind": "holiday"}]})),
        )
        .await;
        assert_eq!(a.status, StatusCode::CREATED, "{db:?} {}", a.json);
        // Control characters, in every text field, named in both languages.
        let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
            (
                "POST",
                "/api/calendars",
                json!({"code": "c1", "name": "a\u{0}b"}),
                vec!["name"],
            ),
            (
                "POST",
                "/api/calendars",
                json!({"code": "c1", "name": "n", "description": "line\nbreak"}),
                vec!["description"],
            ),
            (
                "POST",
                "/api/calendars",
                json!({"code": "c1", "name": "n", "dates": [{"date": "2026-01-02", "kind": "holiday", "name": "\u{7f}"}]}),
                vec!["dates[0].name"],
            ),
            // Every bad field of an update at once, the version's included.
            (
                "PUT",
                "/api/calendars/acme",
                json!({"version": "1", "name": "\u{0}"}),
                vec!["version", "name"],
            ),
            (
                "PUT",
                "/api/calendars/acme",
                json!({"version": 9007199254740992_i64, "name": "n"}),
                vec!["version"],
            ),
            (
                "PUT",
                "/api/calendars/acme",
                json!({"name": "n"}),
                vec!["version"],
            ),
            // The preview reads calendarRule as a closed set and names
            // unknown fields.
            (
                "POST",
                "/api/cron/preview",
                json!({"cron": "0 0 9 * * *", "calendar": "cn-workdays", "calendarRule": "Workdays"}),
                vec!["calendarRule"],
            ),
            (
                "POST",
                "/api/cron/preview",
                json!({"cron": "0 0 9 * * *", "calendar": "cn-workdays", "calendarRule": 1}),
                vec!["calendarRule"],
            ),
            (
                "POST",
                "/api/cron/preview",
                json!({"cron": "0 0 9 * * *", "calendar": "a\u{0}b", "calendarRule": "workdays"}),
                vec!["calendar"],
            ),
            (
                "POST",
                "/api/cron/preview",
                json!({"cron": "0 0 9 * * *", "calendar": 5, "calendarRule": "workdays", "calendarRules": "x"}),
                vec!["calendar", "calendarRules"],
            ),
        ];
        for (method, path, body, fields) in cases {
            for lang in [None, Some("en")] {
                let a = send(&server, method, path, lang, Some(body.clone())).await;
                assert_eq!(
                    a.problem(StatusCode::BAD_REQUEST),
                    fields,
                    "{db:?} {method} {path} {body}"
                );
            }
        }
        let a = send(
            &server,
            "POST",
            "/api/cron/preview",
            Some("en"),
            Some(json!({"cron": "0 0 9 * * *", "calendar": "cn-workdays", "calendarRule": "weekdays"})),
        )
        .await;
        a.problem(StatusCode::BAD_REQUEST);
        assert_eq!(
            a.json["errors"][0]["message"],
            "calendarRule must be one of: workdays, holidays, exclude"
        );
        // A whole number written as 1.0 is a version like 1.
        let a = send(
            &server,
            "PUT",
            "/api/calendars/acme",
            None,
            Some(json!({"version": 1.0, "name": "Acme 2"})),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{db:?} {}", a.json);
        assert_eq!(a.json["version"], 2);
        // A path code no calendar can have names none (U+0000 included,
        // which PostgreSQL would refuse in a comparison).
        for method in ["GET", "PUT", "DELETE"] {
            for path in [
                "/api/calendars/a%00b",
                "/api/calendars/Upper",
                "/api/calendars/nope",
            ] {
                let body = (method == "PUT").then(|| json!({"version": 1, "name": "n"}));
                let a = send(&server, method, path, None, body).await;
                a.problem(StatusCode::NOT_FOUND);
            }
        }
        // Nothing above was stored.
        let a = send(&server, "GET", "/api/calendars", None, None).await;
        let codes: Vec<&str> = a
            .json
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|c| c["code"].as_str())
            .collect();
        assert_eq!(codes, ["cn-workdays", "acme"], "{db:?}");
    }
}

#[tokio::test]
async fn probes_say_a_closed_status_and_their_reasons() {
    let server = Server::start_with(Db::Sqlite, &[]);
    server.wait_ready();
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let a = Answer::of(
            client()
                .get(server.url(path))
                .send()
                .await
                .expect("request"),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert_eq!(a.json, json!({"status": status, "reasons": []}), "{path}");
    }
}

#[tokio::test]
async fn a_sub_over_128_characters_is_refused_at_authentication() {
    let server = Server::start();
    let ok = mint(&"s".repeat(128), &["scheduler.task.browse"], false, 600);
    let resp = client()
        .get(server.url("/api/jobs"))
        .bearer_auth(&ok)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let long = mint(&"长".repeat(129), &[], true, 600);
    for (lang, needle) in [("zh", "128"), ("en", "at most 128 characters")] {
        let a = Answer::of(
            client()
                .post(server.url("/api/jobs"))
                .bearer_auth(&long)
                .header("accept-language", lang)
                .json(&json!({"name": "x", "handler": "demo.echo"}))
                .send()
                .await
                .expect("request"),
        )
        .await;
        a.problem(StatusCode::UNAUTHORIZED);
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
        assert!(
            a.json["detail"]
                .as_str()
                .is_some_and(|d| d.contains(needle)),
            "{}",
            a.json
        );
    }
    // Nothing was created.
    let a = send(&server, "GET", "/api/jobs?name=x", None, None).await;
    assert_eq!(a.json["total"], 0);
}

#[tokio::test]
async fn recent_runs_carry_their_error() {
    let server = Server::start();
    // An attempt that times out records why.
    let job = create_job(
        &server,
        json!({"name": "slow", "handler": "demo.echo", "enabled": false,
               "params": {"delayMs": 5000}, "timeoutMs": 100}),
    )
    .await;
    let id = job["id"].as_i64().expect("id");
    let a = send(&server, "POST", &format!("/api/jobs/{id}/run"), None, None).await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    let reader = token(&["scheduler.task.view", "scheduler.run.browse"]);
    let start = Instant::now();
    let run = loop {
        let resp = client()
            .get(server.url(&format!("/api/jobs/{id}")))
            .bearer_auth(&reader)
            .send()
            .await
            .expect("request");
        let detail: Value = resp.json().await.expect("json");
        let runs = detail["recentRuns"].as_array().cloned().unwrap_or_default();
        if let Some(run) = runs.into_iter().find(|r| r["status"] == "timeout") {
            break run;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no timed-out run within 20 s: {detail}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        run["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{run}"
    );
    assert_eq!(run["attempt"], 1);
    assert!(run.get("output").is_none(), "{run}");
    // The same error as the run's own page.
    let run_id = run["id"].as_i64().expect("run id");
    let a = send(&server, "GET", &format!("/api/runs/{run_id}"), None, None).await;
    assert_eq!(a.json["error"], run["error"]);
}

#[tokio::test]
async fn changing_only_the_handler_applies_the_manuals_params_rule() {
    let server = Server::start();
    let put = |id: i64, body: Value| {
        let server = &server;
        async move {
            send(
                server,
                "PUT",
                &format!("/api/jobs/{id}"),
                Some("en"),
                Some(body),
            )
            .await
        }
    };
    // Still the old handler's defaults: they become the new handler's.
    let echo = create_job(
        &server,
        json!({"name": "echo defaults", "handler": "demo.echo"}),
    )
    .await;
    assert_eq!(echo["params"], json!({"message": "hello", "delayMs": 0}));
    let id = echo["id"].as_i64().expect("id");
    let a = put(id, json!({"version": 1, "handler": "audit.purge"})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["params"], json!({}));
    // Empty params: the new handler's defaults.
    let a = put(id, json!({"version": 2, "handler": "demo.echo"})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["params"], json!({"message": "hello", "delayMs": 0}));
    // A client that echoes the old defaults back gets the same.
    let a = put(
        id,
        json!({"version": 3, "handler": "audit.purge", "params": {"message": "hello", "delayMs": 0}}),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["params"], json!({}));
    // Params the user edited are kept and checked against the new handler.
    let custom = create_job(
        &server,
        json!({"name": "echo custom", "handler": "demo.echo", "params": {"message": "hi"}}),
    )
    .await;
    let cid = custom["id"].as_i64().expect("id");
    let a = put(cid, json!({"version": 1, "handler": "audit.purge"})).await;
    let fields = a.problem(StatusCode::BAD_REQUEST);
    assert!(fields.iter().all(|f| f.starts_with("params")), "{}", a.json);
    // Changing only the cron keeps the params (no handler change).
    let a = put(cid, json!({"version": 1, "cron": "0 */10 * * * *"})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.json);
    assert_eq!(a.json["params"], json!({"message": "hi", "delayMs": 0}));
}

/// A private Redis server, stopped on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let redis = Redis { child, port };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        redis
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn run_once_queue_is_bounded_per_job() {
    // `api` alone takes no fires, so they stay queued.
    let redis = Redis::start();
    let (url, database) = common::fresh_database(Db::Postgres);
    let migrate = Command::new(BIN)
        .arg("migrate")
        .env("QIWU_DATABASE_URL", &url)
        .output()
        .expect("migrate");
    assert!(migrate.status.success(), "{migrate:?}");
    let env: Vec<(&str, String)> = vec![
        ("QIWU_LISTEN", "127.0.0.1:0".into()),
        ("QIWU_DATABASE_URL", url.clone()),
        (
            "QIWU_REDIS_URL",
            format!("redis://127.0.0.1:{}", redis.port),
        ),
        ("QIWU_JWT_SECRET", common::SECRET.into()),
        ("QIWU_TIMEZONE", "UTC".into()),
        ("QIWU_MAX_PENDING_RUN_ONCE", "3".into()),
    ];
    let mut server = Server::spawn(TempDir::new("api"), &["api"], &env, true);
    server.database = Some((Db::Postgres, database));
    let a = create_job(&server, json!({"name": "queued", "handler": "demo.echo"})).await;
    let id = a["id"].as_i64().expect("id");
    let other = create_job(&server, json!({"name": "other", "handler": "demo.echo"})).await;
    let other = other["id"].as_i64().expect("id");
    for _ in 0..3 {
        let a = send(&server, "POST", &format!("/api/jobs/{id}/run"), None, None).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.json);
    }
    for lang in ["zh", "en"] {
        let a = send(
            &server,
            "POST",
            &format!("/api/jobs/{id}/run"),
            Some(lang),
            None,
        )
        .await;
        a.problem(StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = a
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("Retry-After in seconds");
        assert!(retry >= 1, "{retry}");
        assert!(
            a.json["detail"].as_str().is_some_and(|d| d.contains('3')),
            "{}",
            a.json
        );
    }
    // The bound is per job.
    let a = send(
        &server,
        "POST",
        &format!("/api/jobs/{other}/run"),
        None,
        None,
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.json);
    // Refused requests queued nothing and audited nothing.
    let a = send(&server, "GET", "/api/audit-logs?action=job.run", None, None).await;
    assert_eq!(
        a.json["items"].as_array().map(Vec::len),
        Some(4),
        "{}",
        a.json
    );
    drop(server);
    drop(redis);
}

#[test]
fn a_bad_pending_run_once_bound_stops_start_up() {
    for value in ["0", "-1", "many", "100001"] {
        let dir = TempDir::new("bad-pending");
        let out = Command::new(BIN)
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("QIWU_LISTEN", "127.0.0.1:0")
            .env("QIWU_MAX_PENDING_RUN_ONCE", value)
            .output()
            .expect("run");
        assert!(!out.status.success(), "{value} must refuse to start");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("QIWU_MAX_PENDING_RUN_ONCE"),
            "{value}: {stderr}"
        );
    }
}

#[tokio::test]
async fn swagger_ui_works_offline() {
    let server = Server::start();
    let page = client()
        .get(server.url("/docs/"))
        .send()
        .await
        .expect("request");
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.expect("html");
    let initializer = client()
        .get(server.url("/docs/swagger-initializer.js"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("js");
    assert!(initializer.contains("validatorUrl: null"), "{initializer}");
    // Every file the page loads is served by the binary; neither the page
    // nor the initializer names another host, and the style sheets load
    // nothing but inline data.
    for (name, text) in [
        ("index.html", &html),
        ("swagger-initializer.js", &initializer),
    ] {
        for scheme in ["http://", "https://", "//unpkg", "//cdn"] {
            assert!(!text.contains(scheme), "{name} names {scheme}: {text}");
        }
    }
    let mut loaded = 0;
    for attr in ["src=\"", "href=\""] {
        for part in html.split(attr).skip(1) {
            let target = part.split('"').next().unwrap_or_default();
            assert!(
                !target.contains("//") && !target.starts_with('/'),
                "the page loads {target}"
            );
            let resp = client()
                .get(server.url(&format!("/docs/{}", target.trim_start_matches("./"))))
                .send()
                .await
                .expect("request");
            assert_eq!(resp.status(), StatusCode::OK, "{target}");
            loaded += 1;
            if target.ends_with(".css") {
                let css = resp.text().await.expect("css");
                assert!(!css.contains("@import"), "{target} imports");
                for url in css.split("url(").skip(1) {
                    let url = url.trim_start_matches(['"', '\'']);
                    assert!(
                        url.starts_with("data:") || !url.contains("//"),
                        "{target} loads {}",
                        &url[..url.len().min(80)]
                    );
                }
            }
        }
    }
    assert!(loaded >= 5, "{html}");
    // The document the initializer names is ours.
    let doc = client()
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("request");
    assert_eq!(doc.status(), StatusCode::OK);
}
