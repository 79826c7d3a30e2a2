//! Black-box tests of alerts (issue 10): alert channels over the API
//! (super admins only, validated, audited, URLs and secrets never shown),
//! a job's alert policy, and delivery through the outbox to local receivers
//! standing in for a signed webhook and the DingTalk, WeCom and Feishu
//! robots. Each receiver checks the body its platform documents and
//! verifies the signature as the platform computes it, here from the
//! definitions (HMAC written out over SHA-256, base64, URL decoding), not
//! with the service's code.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::receiver::{Received, hex, hmac_reference, read_request};
use crate::common::{Db, Server, admin_token, fields, token};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const WEBHOOK_SECRET: &str = "hook-secret-0123456789";
const DING_SECRET: &str = "SEC0123456789abcdefding";
const FEISHU_SECRET: &str = "feishu-secret-0123456789";

/// A local HTTP server answering every request as the platform whose path
/// it was sent to answers a success.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let Some(req) = read_request(&mut socket).await else {
                        return;
                    };
                    let answer = if req.path().starts_with("/open-apis/") {
                        r#"{"code":0,"msg":"success","data":{}}"#
                    } else if req.path() == "/hook" {
                        r#"{"ok":true}"#
                    } else {
                        r#"{"errcode":0,"errmsg":"ok"}"#
                    };
                    log.lock().expect("log").push(req);
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Receiver { url, seen }
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().expect("log").clone()
    }
}

async fn call(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, server.url(path), Some(token), Some("en"), body).await
}

/// Waits until `rows` deliveries are queued (or, with those the receiver
/// has, `count` are accounted for: the server's own `notify.dispatch`, at
/// every minute's start, may deliver them between two looks), then runs
/// `notify.dispatch` (again while it was skipped or raced the scheduled
/// run) until the receiver has `count` requests.
async fn deliver(
    server: &Server,
    admin: &str,
    receiver: &Receiver,
    rows: u64,
    count: usize,
) -> Vec<Received> {
    let store = server.store().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let queued = store.outbox().count_unfinished().await.expect("count");
        let arrived = receiver.seen().len();
        if queued >= rows || queued as usize + arrived >= count {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {queued} of {rows} deliveries were queued ({arrived} of {count} arrived)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, jobs) = call(
        server,
        reqwest::Method::GET,
        "/api/jobs?handler=notify.dispatch",
        admin,
        None,
    )
    .await;
    let id = jobs["items"][0]["id"]
        .as_i64()
        .expect("notify.dispatch job");
    loop {
        let (status, body) = call(
            server,
            reqwest::Method::POST,
            &format!("/api/jobs/{id}/run"),
            admin,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let round = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < round {
            let seen = receiver.seen();
            if seen.len() >= count {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {count} requests arrived: {:#?}",
            receiver.seen().len(),
            receiver.seen()
        );
    }
}

/// Checks one delivery as its platform would, returning its title.
fn verify(req: &Received) -> String {
    let now = chrono::Utc::now();
    match req.path() {
        "/hook" => {
            let ts = req.header("X-Qiwu-Timestamp").expect("timestamp");
            let expected = format!(
                "sha256={}",
                hex(&hmac_reference(
                    WEBHOOK_SECRET.as_bytes(),
                    format!("{ts}.{}", req.body).as_bytes()
                ))
            );
            assert_eq!(req.header("X-Qiwu-Signature"), Some(expected.as_str()));
            let body = req.json();
            assert!(body["notificationId"].is_i64(), "{body}");
            assert_eq!(body["recipient"], "alert_archive");
            body["title"].as_str().expect("title").to_string()
        }
        "/robot/send" => {
            // DingTalk: timestamp (ms) and sign in the query; sign =
            // urlEncode(base64(HmacSHA256(secret, timestamp + "\n" + secret))).
            assert_eq!(req.query("access_token").as_deref(), Some("ding-token"));
            let ts = req.query("timestamp").expect("timestamp");
            let ms: i64 = ts.parse().expect("ms");
            assert!((now.timestamp_millis() - ms).abs() < 3_600_000, "{ts}");
            let expected = STANDARD.encode(hmac_reference(
                DING_SECRET.as_bytes(),
                format!("{ts}\n{DING_SECRET}").as_bytes(),
            ));
            assert_eq!(req.query("sign"), Some(expected));
            // The raw query carries it URL-encoded.
            assert!(!req.target.split("sign=").nth(1).unwrap_or("").contains('+'));
            let body = req.json();
            assert_eq!(body["msgtype"], "markdown", "{body}");
            let title = body["markdown"]["title"].as_str().expect("title");
            assert!(
                body["markdown"]["text"]
                    .as_str()
                    .expect("text")
                    .starts_with(&format!("#### {title}\n\n")),
                "{body}"
            );
            title.to_string()
        }
        "/cgi-bin/webhook/send" => {
            // WeCom: the key in the URL, a markdown message, no signature.
            assert_eq!(req.query("key").as_deref(), Some("wecom-key"));
            let body = req.json();
            assert_eq!(body["msgtype"], "markdown", "{body}");
            let content = body["markdown"]["content"].as_str().expect("content");
            let title = content
                .strip_prefix("**")
                .and_then(|c| c.split_once("**\n"))
                .map(|(t, _)| t)
                .expect("a bold title line");
            title.to_string()
        }
        "/open-apis/bot/v2/hook/feishu-hook" => {
            // Feishu: timestamp (s, a string) and sign in the body; sign =
            // base64(HmacSHA256(key = timestamp + "\n" + secret, message = "")).
            let body = req.json();
            let ts = body["timestamp"].as_str().expect("timestamp string");
            let secs: i64 = ts.parse().expect("seconds");
            assert!((now.timestamp() - secs).abs() < 3_600, "{ts}");
            let expected = STANDARD.encode(hmac_reference(
                format!("{ts}\n{FEISHU_SECRET}").as_bytes(),
                b"",
            ));
            assert_eq!(body["sign"], expected.as_str());
            assert_eq!(body["msg_type"], "text", "{body}");
            let text = body["content"]["text"].as_str().expect("text");
            text.lines().next().expect("title").to_string()
        }
        other => panic!("unexpected request to {other}"),
    }
}

#[tokio::test]
async fn channels_are_managed_by_super_admins_and_never_show_secrets() {
    let server = Server::start();
    let admin = admin_token();
    let base = "http://127.0.0.1:9";
    let (status, created) = call(
        &server,
        reqwest::Method::POST,
        "/api/alert-channels",
        &admin,
        Some(json!({
            "name": "值班群",
            "kind": "dingtalk",
            "url": format!("{base}/robot/send?access_token=ding-token"),
            "secret": DING_SECRET,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["kind"], "dingtalk");
    assert_eq!(created["target"], base);
    assert_eq!(created["hasSecret"], true);
    assert_eq!(created["isDefault"], false);
    assert_eq!(created["version"], 1);
    let id = created["id"].as_i64().expect("id");
    let text = created.to_string();
    assert!(
        !text.contains("ding-token") && !text.contains(DING_SECRET),
        "{text}"
    );

    // Every bad field at once, in the request's language.
    let (status, problem) = call(
        &server,
        reqwest::Method::POST,
        "/api/alert-channels",
        &admin,
        Some(json!({"name": "", "kind": "dingtalk", "url": format!("{base}/robot/send"), "colour": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(fields(&problem), ["colour", "name", "url"]);
    let (status, problem) = call(
        &server,
        reqwest::Method::POST,
        "/api/alert-channels",
        &admin,
        Some(json!({"name": "值班群", "kind": "inbox"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");

    // Super admins only.
    let user = token(&["scheduler.task.browse", "scheduler.task.modify"]);
    let (status, _) = call(
        &server,
        reqwest::Method::GET,
        "/api/alert-channels",
        &user,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An edit without url or secret keeps them; a stale one is 409.
    let path = format!("/api/alert-channels/{id}");
    let (status, updated) = call(
        &server,
        reqwest::Method::PUT,
        &path,
        &admin,
        Some(json!({"version": 1, "isDefault": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        (
            &updated["name"],
            &updated["isDefault"],
            &updated["hasSecret"],
            &updated["version"]
        ),
        (&json!("值班群"), &json!(true), &json!(true), &json!(2))
    );
    let (status, _) = call(
        &server,
        reqwest::Method::PUT,
        &path,
        &admin,
        Some(json!({"version": 1, "enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, problem) = call(
        &server,
        reqwest::Method::PUT,
        &path,
        &admin,
        Some(json!({"version": 2, "kind": "feishu"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(fields(&problem), ["kind"]);

    // A job names channels that exist; a channel in use is not deleted.
    let (status, problem) = call(
        &server,
        reqwest::Method::POST,
        "/api/jobs",
        &admin,
        Some(json!({"name": "bad", "handler": "demo.echo", "alertChannels": [id, 9999], "alertAfterConsecutiveFailures": -1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(
        fields(&problem),
        ["alertAfterConsecutiveFailures", "alertChannels[1]"]
    );
    let (status, job) = call(
        &server,
        reqwest::Method::POST,
        "/api/jobs",
        &admin,
        Some(json!({"name": "uses", "handler": "demo.echo", "alertChannels": [id], "alertAfterConsecutiveFailures": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["alertChannels"], json!([id]));
    assert_eq!(job["alertAfterConsecutiveFailures"], 3);
    assert_eq!(job["alertOnFailure"], false);
    assert_eq!(job["alertOnRecovery"], false);
    let (status, problem) = call(&server, reqwest::Method::DELETE, &path, &admin, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let job_path = format!("/api/jobs/{}", job["id"]);
    let (status, edited) = call(
        &server,
        reqwest::Method::PUT,
        &job_path,
        &admin,
        Some(json!({"version": 1, "alertChannels": []})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    assert_eq!(
        edited["alertAfterConsecutiveFailures"], 3,
        "kept by the edit"
    );
    let (status, _) = call(&server, reqwest::Method::DELETE, &path, &admin, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(&server, reqwest::Method::GET, &path, &admin, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Audited, without the secret or the robot's token.
    let (_, audit) = call(
        &server,
        reqwest::Method::GET,
        "/api/audit-logs?targetType=alert_channel&limit=10",
        &admin,
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
            "alertchannel.delete",
            "alertchannel.modify",
            "alertchannel.create"
        ],
        "{audit}"
    );
    let text = audit.to_string();
    assert!(!text.contains("ding-token") && !text.contains(DING_SECRET));
}

#[tokio::test]
async fn failure_and_recovery_alerts_reach_every_platform_signed_sqlite() {
    failure_and_recovery_alerts_reach_every_platform_signed(Db::Sqlite).await;
}

#[tokio::test]
async fn failure_and_recovery_alerts_reach_every_platform_signed_postgres() {
    failure_and_recovery_alerts_reach_every_platform_signed(Db::Postgres).await;
}

#[tokio::test]
async fn failure_and_recovery_alerts_reach_every_platform_signed_mysql() {
    failure_and_recovery_alerts_reach_every_platform_signed(Db::MySql).await;
}

async fn failure_and_recovery_alerts_reach_every_platform_signed(db: Db) {
    let receiver = Receiver::start().await;
    let server = Server::start_with(
        db,
        &[("QIWU_WEBHOOK_SECRET", "the-service-secret-0123456789")],
    );
    let admin = admin_token();
    let base = &receiver.url;
    let mut channels = Vec::new();
    for (name, kind, url, secret) in [
        (
            "webhook",
            "webhook",
            format!("{base}/hook"),
            Some(WEBHOOK_SECRET),
        ),
        (
            "dingtalk",
            "dingtalk",
            format!("{base}/robot/send?access_token=ding-token"),
            Some(DING_SECRET),
        ),
        (
            "wecom",
            "wecom",
            format!("{base}/cgi-bin/webhook/send?key=wecom-key"),
            None,
        ),
        (
            "feishu",
            "feishu",
            format!("{base}/open-apis/bot/v2/hook/feishu-hook"),
            Some(FEISHU_SECRET),
        ),
    ] {
        let (status, created) = call(
            &server,
            reqwest::Method::POST,
            "/api/alert-channels",
            &admin,
            Some(json!({"name": name, "kind": kind, "url": url, "secret": secret})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        channels.push(created["id"].as_i64().expect("id"));
    }

    // A job that times out, alerting on failure and recovery on every channel.
    let (status, job) = call(
        &server,
        reqwest::Method::POST,
        "/api/jobs",
        &admin,
        Some(json!({
            "name": "报表",
            "handler": "demo.echo",
            "enabled": false,
            "timeoutMs": 200,
            "params": {"delayMs": 5000},
            "alertOnFailure": true,
            "alertOnRecovery": true,
            "alertChannels": channels,
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_i64().expect("id");
    let (status, _) = call(
        &server,
        reqwest::Method::POST,
        &format!("/api/jobs/{id}/run"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);

    // The timeout alert and the failure alert, each on four channels.
    let seen = deliver(&server, &admin, &receiver, 8, 8).await;
    let mut titles: Vec<(String, String)> = seen
        .iter()
        .map(|r| (r.path().to_string(), verify(r)))
        .collect();
    titles.sort();
    for path in [
        "/cgi-bin/webhook/send",
        "/hook",
        "/open-apis/bot/v2/hook/feishu-hook",
        "/robot/send",
    ] {
        let mine: Vec<&str> = titles
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, t)| t.as_str())
            .collect();
        let mut mine = mine;
        mine.sort();
        assert_eq!(mine, ["任务失败：报表", "任务超时：报表"], "{path}");
    }
    let failure = seen
        .iter()
        .find(|r| r.path() == "/hook" && r.json()["template"] == "scheduler.failure_alert")
        .expect("failure alert")
        .json();
    let body = failure["body"].as_str().expect("body");
    for part in ["timeout", "demo.echo", "200 毫秒", "/api/runs/"] {
        assert!(body.contains(part), "{part} in {body}");
    }

    // Fixed: the next fire succeeds and the recovery alert follows.
    let (status, edited) = call(
        &server,
        reqwest::Method::PUT,
        &format!("/api/jobs/{id}"),
        &admin,
        Some(json!({"version": 1, "params": {"delayMs": 0}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    let (status, _) = call(
        &server,
        reqwest::Method::POST,
        &format!("/api/jobs/{id}/run"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let seen = deliver(&server, &admin, &receiver, 4, 12).await;
    let recovered: Vec<String> = seen[8..].iter().map(verify).collect();
    assert_eq!(recovered, vec!["任务已恢复：报表".to_string(); 4]);
    // Nothing went to the inbox: the job names no inbox channel.
    let (_, inbox) = call(
        &server,
        reqwest::Method::GET,
        "/api/notifications",
        &admin,
        None,
    )
    .await;
    assert_eq!(inbox["items"], json!([]), "{inbox}");
}

/// In a cluster (`api` + 2 workers on PostgreSQL), each fire's end is
/// decided once, whichever worker ran it: two failed fires are one timeout
/// alert (the second folded), one failure alert and one consecutive-failures
/// alert, each delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_decides_each_fire_end_once() {
    let receiver = Receiver::start().await;
    let cluster = common::cluster::Cluster::start(Db::Postgres, 2);
    let admin = admin_token();
    let api = &cluster.api;
    let (status, channel) = call(
        api,
        reqwest::Method::POST,
        "/api/alert-channels",
        &admin,
        Some(json!({"name": "hook", "kind": "webhook", "url": format!("{}/hook", receiver.url), "secret": WEBHOOK_SECRET})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{channel}");
    let id = cluster
        .create(json!({
            "name": "slow",
            "handler": "demo.echo",
            "enabled": false,
            "timeoutMs": 200,
            "params": {"delayMs": 5000},
            // The second fire must not be skipped while the first's handler
            // is still returning after its timeout.
            "overlapPolicy": "allow",
            "alertOnFailure": true,
            "alertAfterConsecutiveFailures": 2,
            "alertChannels": [channel["id"]],
        }))
        .await;
    let store = cluster.store().await;
    for round in 1..=2usize {
        let (status, _) = call(
            api,
            reqwest::Method::POST,
            &format!("/api/jobs/{id}/run"),
            &admin,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let runs = common::runs_of(&store, id).await;
            if runs.len() == round && runs.iter().all(|r| r.status == "timeout") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{runs:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let seen = deliver(api, &admin, &receiver, 3, 3).await;
    // No worker decided an end twice: three deliveries in all.
    {
        use sea_orm::{EntityTrait, PaginatorTrait};
        let rows = qiwu_storage::entity::outbox::Entity::find()
            .count(store.connection())
            .await
            .expect("count");
        assert_eq!(rows, 3);
    }
    assert_eq!(seen.len(), 3, "{seen:#?}");
    let mut templates: Vec<String> = seen
        .iter()
        .map(|r| {
            verify(r);
            r.json()["template"].as_str().expect("template").to_string()
        })
        .collect();
    templates.sort();
    assert_eq!(
        templates,
        [
            "scheduler.consecutive_failures_alert",
            "scheduler.failure_alert",
            "scheduler.timeout_alert",
        ]
    );
    let job = store.jobs().get(id).await.expect("job").expect("job");
    assert_eq!(job.alert_state.failed_in_a_row, 2);
}
