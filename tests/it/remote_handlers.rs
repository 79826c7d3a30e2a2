//! Black-box tests of handlers in other services (SPEC §7.1): the real
//! `serve` binary with a `QIWU_CONFIG` file declaring `session.sweep` and
//! `wf.task.remind`, each pointing at a receiver on 127.0.0.1:0.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use crate::common::{BIN, SECRET, Server, TempDir, admin_token, client, wait_for_runs};
use qiwu_scheduler_worker::handlers::dispatch::signature;
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);
const SESSIONS_SECRET: &str = "sessions-secret-0123456789";
const WF_SECRET: &str = "workflow-secret-0123456789";

/// One request as a receiver saw it.
#[derive(Debug, Clone)]
struct Request {
    head: String,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> String {
        self.head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    }
}

/// A service on 127.0.0.1:0 that records each request and answers every
/// one with `status` and `answer`.
struct Receiver {
    url: String,
    host: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    async fn start(status: u16, answer: &'static str) -> Receiver {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let host = listener.local_addr().expect("addr").to_string();
        let url = format!("http://{host}/jobs/run?token=in-the-url");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&data[..end]).to_string();
                        let request = Request {
                            head,
                            body: String::new(),
                        };
                        let length: usize = request.header("content-length").parse().unwrap_or(0);
                        if data.len() < end + 4 + length {
                            continue;
                        }
                        let body =
                            String::from_utf8_lossy(&data[end + 4..end + 4 + length]).to_string();
                        seen.lock().expect("lock").push(Request { body, ..request });
                        let reply = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                            answer.len()
                        );
                        let _ = socket.write_all(reply.as_bytes()).await;
                        return;
                    }
                });
            }
        });
        Receiver {
            url,
            host,
            requests,
        }
    }

    /// The request that carried `fire`, once it arrived.
    async fn request_of(&self, fire: i64) -> Request {
        let start = std::time::Instant::now();
        loop {
            let found = self
                .requests
                .lock()
                .expect("lock")
                .iter()
                .find(|r| r.header("x-qiwu-fire") == fire.to_string())
                .cloned();
            if let Some(request) = found {
                return request;
            }
            assert!(start.elapsed() < LIMIT, "no call for fire {fire}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The file declaring both handlers of SPEC §7 that live elsewhere.
fn config(sessions: &Receiver, workflow: &Receiver) -> String {
    format!(
        r#"# Handlers in other services, reviewed like code.
[[handlers]]
name = "session.sweep"
title_zh = "清理过期在线会话"
title_en = "Sweep expired sessions"
description_zh = "删除已过期的在线会话。"
description_en = "Deletes expired sessions."
url = "{}"
secret_env = "QIWU_SECRET_SESSIONS"
params_schema = '''{{"type":"object","properties":{{"batch":{{"type":"integer","minimum":1,"default":500}}}}}}'''

[[handlers]]
name = "wf.task.remind"
title_zh = "发送待办超时提醒"
title_en = "Send overdue to-do reminders"
url = "{}"
secret = "{WF_SECRET}"
"#,
        sessions.url, workflow.url
    )
}

async fn get(server: &Server, path: &str, lang: &str) -> Value {
    let resp = client()
        .get(server.url(path))
        .bearer_auth(admin_token())
        .header("Accept-Language", lang)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.json().await.expect("json")
}

async fn run_once(server: &Server, job: i64) -> i64 {
    common::run_once(server, job).await["fireId"]
        .as_i64()
        .expect("fireId")
}

/// The one built-in job of `handler`, or None.
async fn builtin_job(server: &Server, handler: &str) -> Option<Value> {
    let jobs = get(server, &format!("/api/jobs?handler={handler}"), "zh-CN").await;
    let items = jobs["items"].as_array().expect("items");
    assert!(items.len() <= 1, "{jobs}");
    items.first().cloned()
}

fn handler_named(list: &Value, name: &str) -> Option<Value> {
    list.as_array()
        .expect("a list of handlers")
        .iter()
        .find(|h| h["name"] == name)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_handlers_are_listed_seeded_and_called_signed() {
    let sessions = Receiver::start(200, "swept 3 sessions").await;
    let workflow = Receiver::start(503, "database is down").await;

    // Without QIWU_CONFIG neither handler exists and nothing is seeded.
    let server = Server::start();
    let handlers = get(&server, "/api/handlers", "zh-CN").await;
    assert!(handler_named(&handlers, "session.sweep").is_none());
    assert!(builtin_job(&server, "session.sweep").await.is_none());
    let dir = server.stop();

    // Declared at a later start: listed, and their built-in jobs seeded.
    let path = dir.path().join("handlers.toml");
    std::fs::write(&path, config(&sessions, &workflow)).expect("write the config");
    let env: Vec<(&str, String)> = vec![
        ("QIWU_LISTEN", "127.0.0.1:0".into()),
        (
            "QIWU_DATABASE_URL",
            format!("sqlite://{}/qiwu.db", dir.path().display()),
        ),
        ("QIWU_JWT_SECRET", SECRET.into()),
        ("QIWU_TIMEZONE", "UTC".into()),
        ("QIWU_CONFIG", path.display().to_string()),
        ("QIWU_SECRET_SESSIONS", SESSIONS_SECRET.into()),
    ];
    let server = Server::spawn(dir, &["serve"], &env, true);

    let handlers = get(&server, "/api/handlers", "zh-CN").await;
    let sweep = handler_named(&handlers, "session.sweep").expect("session.sweep is listed");
    assert_eq!(sweep["title"], "清理过期在线会话");
    assert_eq!(sweep["description"], "删除已过期的在线会话。");
    assert_eq!(sweep["defaultParams"], json!({"batch": 500}));
    assert_eq!(sweep["paramsSchema"]["properties"]["batch"]["minimum"], 1);
    let remind = handler_named(&handlers, "wf.task.remind").expect("wf.task.remind is listed");
    assert_eq!(remind["paramsSchema"], json!({"type": "object"}));
    let english = get(&server, "/api/handlers", "en").await;
    let sweep_en = handler_named(&english, "session.sweep").expect("listed");
    assert_eq!(sweep_en["title"], "Sweep expired sessions");
    assert!(
        handler_named(&english, "demo.echo").is_some(),
        "built-ins stay"
    );

    let job = builtin_job(&server, "session.sweep")
        .await
        .expect("the built-in job of session.sweep was seeded");
    assert_eq!(job["name"], "清理过期在线会话");
    assert_eq!(job["group"], "system");
    assert_eq!(job["cron"], "0 */10 * * * *");
    assert_eq!(job["enabled"], true);
    assert_eq!(job["builtin"], true);
    assert_eq!(job["params"], json!({"batch": 500}));
    let job_id = job["id"].as_i64().expect("id");
    let remind_job = builtin_job(&server, "wf.task.remind")
        .await
        .expect("the built-in job of wf.task.remind was seeded");
    assert_eq!(remind_job["name"], "发送待办超时提醒");

    // Run once: the service gets one signed call, and its answer is the output.
    let before = chrono::Utc::now();
    let fire = run_once(&server, job_id).await;
    let call = sessions.request_of(fire).await;
    let timestamp = call.header("x-qiwu-timestamp");
    assert_eq!(
        call.header("x-qiwu-signature"),
        signature(SESSIONS_SECRET, &timestamp, &call.body)
    );
    let sent_at: i64 = timestamp.parse().expect("Unix seconds");
    assert!((sent_at - before.timestamp()).abs() <= 5, "{timestamp}");
    assert!(
        call.head
            .starts_with("POST /jobs/run?token=in-the-url HTTP/1.1"),
        "{}",
        call.head
    );
    assert_eq!(call.header("content-type"), "application/json");
    assert_eq!(call.header("x-qiwu-job"), job_id.to_string());
    assert_eq!(call.header("x-qiwu-attempt"), "1");
    let body: Value = serde_json::from_str(&call.body).expect("a JSON body");
    assert_eq!(
        body["job"],
        json!({"id": job_id, "name": "清理过期在线会话"})
    );
    assert_eq!(body["fireId"], fire);
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["params"], json!({"batch": 500}));
    // The built-in job's timeout is one minute.
    let deadline =
        chrono::DateTime::parse_from_rfc3339(body["deadline"].as_str().expect("a deadline"))
            .expect("RFC 3339");
    let left = deadline.signed_duration_since(before).num_seconds();
    assert!(
        (55..=65).contains(&left),
        "{deadline} is {left} s after {before}"
    );

    let store = server.store().await;
    let runs = wait_for_runs(&store, job_id, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.fire_id == fire && r.status != "running")
    })
    .await;
    let run = runs.iter().find(|r| r.fire_id == fire).expect("the run");
    assert_eq!(run.status, "success", "{run:#?}");
    assert_eq!(run.handler, "session.sweep");
    // Through the API too: the log line naming the host, then the answer.
    let detail = get(&server, &format!("/api/runs/{}", run.id), "zh-CN").await;
    assert_eq!(
        detail["output"],
        format!("POST {}: HTTP 200 OK\nswept 3 sessions", sessions.host)
    );
    let listed = get(&server, &format!("/api/runs?jobId={job_id}"), "zh-CN").await;
    assert!(
        listed["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|r| r["id"] == run.id && r["status"] == "success"),
        "{listed}"
    );

    // A non-2xx answer fails the attempt with the status and the body.
    let remind_id = remind_job["id"].as_i64().expect("id");
    let fire = run_once(&server, remind_id).await;
    let call = workflow.request_of(fire).await;
    let timestamp = call.header("x-qiwu-timestamp");
    assert_eq!(
        call.header("x-qiwu-signature"),
        signature(WF_SECRET, &timestamp, &call.body),
        "signed with the inline secret"
    );
    let runs = wait_for_runs(&store, remind_id, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.fire_id == fire && r.status != "running")
    })
    .await;
    let run = runs.iter().find(|r| r.fire_id == fire).expect("the run");
    assert_eq!(run.status, "failed", "{run:#?}");
    assert_eq!(
        run.error,
        format!(
            "{} answered HTTP 503 Service Unavailable: database is down",
            workflow.host
        )
    );
    for text in [&run.error, &run.output] {
        assert!(
            !text.contains(WF_SECRET) && !text.contains("in-the-url"),
            "{text}"
        );
    }
    let status = server.terminate();
    assert!(status.success(), "SIGTERM exits 0, got {status}");
}

#[test]
fn an_invalid_config_file_stops_serve_naming_qiwu_config_and_the_entry() {
    const VALID: &str = r#"
[[handlers]]
name = "session.sweep"
title_zh = "清理过期在线会话"
title_en = "Sweep expired sessions"
url = "http://127.0.0.1:9/jobs/session-sweep"
secret_env = "QIWU_SECRET_SESSIONS"
"#;
    /// File text (None: no file at all), extra environment, and what the
    /// error must say besides QIWU_CONFIG and the file's path.
    type Case<'a> = (Option<String>, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let with_secret: &[(&str, &str)] = &[("QIWU_SECRET_SESSIONS", SESSIONS_SECRET)];
    let cases: [Case; 6] = [
        (None, with_secret, &["cannot be read"]),
        (
            Some(VALID.replace("http://127.0.0.1:9", "ftp://127.0.0.1")),
            with_secret,
            &["[[handlers]] entry 1 (session.sweep)", "scheme ftp"],
        ),
        (
            Some(VALID.to_owned()),
            &[],
            &[
                "[[handlers]] entry 1 (session.sweep)",
                "secret_env names QIWU_SECRET_SESSIONS, which is not set",
            ],
        ),
        (
            Some(format!("{VALID}{}", VALID.replace("session.sweep", "demo.echo"))),
            with_secret,
            &[
                "[[handlers]] entry 2 (demo.echo)",
                "compiled into the service",
            ],
        ),
        (
            Some(format!("{VALID}timeout_note = 5\n")),
            with_secret,
            &["[[handlers]] entry 1 (session.sweep)", "unknown field `timeout_note`"],
        ),
        (
            Some(VALID.replace(
                "secret_env",
                "params_schema = '{\"type\": \"object\", \"properties\": {\"batch\": {\"type\": \"integer\", \"default\": \"all\"}}}'\nsecret_env",
            )),
            with_secret,
            &["[[handlers]] entry 1 (session.sweep)", "defaults in params_schema"],
        ),
    ];
    for (text, env, wanted) in cases {
        let dir = TempDir::new("bad-remote-config");
        let path = dir.path().join("handlers.toml");
        if let Some(text) = &text {
            std::fs::write(&path, text).expect("write");
        }
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("QIWU_LISTEN", "127.0.0.1:0")
            .env("QIWU_CONFIG", &path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text:?} must refuse to start");
        assert!(stderr.contains("QIWU_CONFIG"), "{stderr}");
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        for want in wanted {
            assert!(stderr.contains(want), "want {want:?} in {stderr}");
        }
        assert!(!stderr.contains(SESSIONS_SECRET), "{stderr}");
        assert!(
            !dir.path().join("data").exists(),
            "nothing is created before the file is checked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_characters_from_other_services_are_stored_on_every_database() {
    // One service answers 200 with a NUL in its body, the other 500 with
    // one: output and error are stored with U+FFFD in its place.
    let sessions = Receiver::start(200, "swept\u{0}3 😀").await;
    let workflow = Receiver::start(500, "bad\u{0}thing").await;
    for db in [common::Db::Sqlite, common::Db::Postgres, common::Db::MySql] {
        let dir = TempDir::new("config");
        let path = dir.path().join("handlers.toml");
        std::fs::write(&path, config(&sessions, &workflow)).expect("write the config");
        let server = Server::start_with(
            db,
            &[
                ("QIWU_CONFIG", &path.display().to_string()),
                ("QIWU_SECRET_SESSIONS", SESSIONS_SECRET),
            ],
        );
        let store = server.store().await;
        for (handler, status, field, want) in [
            ("session.sweep", "success", "output", "swept\u{FFFD}3 😀"),
            ("wf.task.remind", "failed", "error", "bad\u{FFFD}thing"),
        ] {
            let job = builtin_job(&server, handler).await.expect("seeded");
            let id = job["id"].as_i64().expect("id");
            run_once(&server, id).await;
            let runs = wait_for_runs(&store, id, LIMIT, |runs| {
                runs.first().is_some_and(|r| r.status != "running")
            })
            .await;
            assert_eq!(runs[0].status, status, "{db:?} {handler}: {runs:#?}");
            let text = if field == "output" {
                &runs[0].output
            } else {
                &runs[0].error
            };
            assert!(text.contains(want), "{db:?} {handler}: {text:?}");
        }
    }
}
