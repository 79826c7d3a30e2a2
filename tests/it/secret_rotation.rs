//! Black-box tests of rotating secrets without downtime: the real binary
//! with `QIWU_JWT_PREVIOUS_SECRETS` (tokens signed with a previous secret are
//! still accepted, new ones are signed with the current), with
//! `QIWU_WEBHOOK_PREVIOUS_SECRETS` and a `QIWU_CONFIG` entry's
//! `previous_secrets_env` (each call carries one signature per secret,
//! current first), and every bad value refused at start-up by name.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{BIN, Server, TempDir, client};
use qiwu_api::{Claims, JwtKeys};
use qiwu_scheduler_worker::handlers::dispatch::signature;
use qiwu_scheduler_worker::{TimeoutAlert, raise_timeout_alert};
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);
const CURRENT: &str = "jwt-current-secret-0123456789";
const OLD: &str = "jwt-old-secret-0123456789";
const OLDER: &str = "jwt-older-secret-0123456789";
const STRANGER: &str = "jwt-stranger-secret-0123456789";
const WEBHOOK_CURRENT: &str = "webhook-current-0123456789";
const WEBHOOK_OLD: &str = "webhook-old-0123456789";
const SESSIONS_CURRENT: &str = "sessions-current-0123456789";
const SESSIONS_OLD: &str = "sessions-old-0123456789";
const SESSIONS_OLDER: &str = "sessions-older-0123456789";

fn mint(secret: &str, ttl: i64) -> String {
    JwtKeys::from_secret(secret.as_bytes())
        .expect("keys")
        .mint(&Claims {
            sub: "admin".into(),
            name: "admin".into(),
            perms: vec![],
            super_admin: true,
            exp: chrono::Utc::now().timestamp() + ttl,
        })
        .expect("mint")
}

/// True when `token` verifies with `secret` alone.
fn signed_with(token: &str, secret: &str) -> bool {
    JwtKeys::from_secret(secret.as_bytes())
        .expect("keys")
        .verify(token)
        .is_ok()
}

async fn list_jobs(server: &Server, token: &str) -> (StatusCode, Value) {
    let resp = client()
        .get(server.url("/api/jobs"))
        .bearer_auth(token)
        .header("Accept-Language", "en")
        .send()
        .await
        .expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn sqlite_env(dir: &TempDir, extra: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("QIWU_LISTEN", "127.0.0.1:0".to_owned()),
        (
            "QIWU_DATABASE_URL",
            format!("sqlite://{}/qiwu.db", dir.path().display()),
        ),
        ("QIWU_TIMEZONE", "UTC".to_owned()),
    ];
    env.extend(extra.iter().cloned());
    env
}

#[tokio::test]
async fn tokens_of_previous_jwt_secrets_are_accepted_until_removed() {
    // Mid-rotation: the new secret signs, the two before it still verify.
    let dir = TempDir::new("jwt-rotation");
    let env = sqlite_env(
        &dir,
        &[
            ("QIWU_JWT_SECRET", CURRENT.into()),
            ("QIWU_JWT_PREVIOUS_SECRETS", format!("{OLD}, {OLDER}")),
        ],
    );
    let server = Server::spawn(dir, &["serve"], &env, true);
    for secret in [CURRENT, OLD, OLDER] {
        let (status, body) = list_jobs(&server, &mint(secret, 3600)).await;
        assert_eq!(status, StatusCode::OK, "a token of one secret: {body}");
    }
    let (status, body) = list_jobs(&server, &mint(STRANGER, 3600)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["detail"], "The token is not valid", "{body}");
    // An expired token of a previous secret says it expired.
    let (status, body) = list_jobs(&server, &mint(OLD, -3600)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["detail"], "The token has expired: sign in again");

    // What the service signs, it signs with the current secret only.
    let banner = server
        .banner
        .iter()
        .find_map(|l| l.split("token (valid 30 days): ").nth(1))
        .expect("the start-up token")
        .trim()
        .to_owned();
    assert!(signed_with(&banner, CURRENT));
    assert!(!signed_with(&banner, OLD) && !signed_with(&banner, OLDER));
    let out = Command::new(BIN)
        .args(["token", "--sub", "svc", "--super-admin"])
        .current_dir(server.dir.path())
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run token");
    assert!(out.status.success(), "{out:?}");
    let minted = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(signed_with(&minted, CURRENT));
    assert!(!signed_with(&minted, OLD));

    // Rotation finished: the previous secrets are removed and refused.
    let dir = server.stop();
    let env = sqlite_env(&dir, &[("QIWU_JWT_SECRET", CURRENT.into())]);
    let server = Server::spawn(dir, &["serve"], &env, true);
    let (status, _) = list_jobs(&server, &mint(OLD, 3600)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = list_jobs(&server, &minted).await;
    assert_eq!(status, StatusCode::OK, "a token of the current secret");
}

/// A receiver on 127.0.0.1:0 answering 200; keeps each request's head and
/// body.
struct Receiver {
    url: String,
    requests: Arc<Mutex<Vec<(String, String)>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
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
                        let length: usize = header(&head, "content-length").parse().unwrap_or(0);
                        if data.len() < end + 4 + length {
                            continue;
                        }
                        let body =
                            String::from_utf8_lossy(&data[end + 4..end + 4 + length]).to_string();
                        seen.lock().expect("lock").push((head, body));
                        let _ = socket
                            .write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                            )
                            .await;
                        return;
                    }
                });
            }
        });
        Receiver { url, requests }
    }

    /// The first request, once it arrived.
    async fn first(&self) -> (String, String) {
        let start = std::time::Instant::now();
        loop {
            if let Some(first) = self.requests.lock().expect("lock").first().cloned() {
                return first;
            }
            assert!(start.elapsed() < LIMIT, "no request arrived");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn header(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// Checks `X-Qiwu-Signature` lists exactly one signature per secret, in
/// order, and that a receiver knowing any one of them accepts the call.
fn assert_signed_by(head: &str, body: &str, secrets: &[&str]) {
    let timestamp = header(head, "x-qiwu-timestamp");
    let value = header(head, "x-qiwu-signature");
    let listed: Vec<&str> = value.split(", ").collect();
    let expected: Vec<String> = secrets
        .iter()
        .map(|s| signature(s, &timestamp, body))
        .collect();
    assert_eq!(listed, expected, "one signature per secret, current first");
    for secret in secrets {
        let mine = signature(secret, &timestamp, body);
        assert!(listed.contains(&mine.as_str()));
    }
}

async fn admin_post(server: &Server, path: &str, token: &str) -> Value {
    let resp = client()
        .post(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::ACCEPTED, "{path}");
    resp.json().await.expect("json")
}

async fn job_of_handler(server: &Server, handler: &str, token: &str) -> i64 {
    let jobs: Value = client()
        .get(server.url(&format!("/api/jobs?handler={handler}")))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    jobs["items"][0]["id"].as_i64().expect("the built-in job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_deliveries_carry_a_signature_per_secret_during_a_rotation() {
    let receiver = Receiver::start().await;
    let dir = TempDir::new("webhook-rotation");
    let env = sqlite_env(
        &dir,
        &[
            ("QIWU_JWT_SECRET", CURRENT.into()),
            ("QIWU_WEBHOOK_SECRET", WEBHOOK_CURRENT.into()),
            ("QIWU_WEBHOOK_PREVIOUS_SECRETS", WEBHOOK_OLD.into()),
        ],
    );
    let server = Server::spawn(dir, &["serve"], &env, true);
    let admin = mint(CURRENT, 3600);
    let resp = client()
        .put(server.url("/api/settings/notify.webhook_url"))
        .bearer_auth(&admin)
        .json(&json!({"value": receiver.url}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    // A notification waiting in the outbox, written as a worker does.
    let store = server.store().await;
    raise_timeout_alert(
        &store,
        &TimeoutAlert {
            job_id: 3,
            job_name: "夜间报表".into(),
            handler: "demo.echo".into(),
            timeout_ms: 1000,
            started_at: chrono::Utc::now(),
            attempt: 1,
            timezone: chrono_tz::UTC,
            channels: vec![],
        },
    )
    .await
    .expect("alert");

    let dispatch = job_of_handler(&server, "notify.dispatch", &admin).await;
    admin_post(&server, &format!("/api/jobs/{dispatch}/run"), &admin).await;
    let (head, body) = receiver.first().await;
    assert_signed_by(&head, &body, &[WEBHOOK_CURRENT, WEBHOOK_OLD]);
    let payload: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(payload["title"], "任务超时：夜间报表");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_handler_calls_carry_a_signature_per_secret_during_a_rotation() {
    let receiver = Receiver::start().await;
    let dir = TempDir::new("remote-rotation");
    let path = dir.path().join("handlers.toml");
    std::fs::write(
        &path,
        format!(
            r#"[[handlers]]
name = "session.sweep"
title_zh = "清理过期在线会话"
title_en = "Sweep expired sessions"
url = "{}"
secret_env = "QIWU_SECRET_SESSIONS"
previous_secrets_env = "QIWU_SECRET_SESSIONS_PREVIOUS"
"#,
            receiver.url
        ),
    )
    .expect("write the config");
    let env = sqlite_env(
        &dir,
        &[
            ("QIWU_JWT_SECRET", CURRENT.into()),
            ("QIWU_CONFIG", path.display().to_string()),
            ("QIWU_SECRET_SESSIONS", SESSIONS_CURRENT.into()),
            (
                "QIWU_SECRET_SESSIONS_PREVIOUS",
                format!("{SESSIONS_OLD},{SESSIONS_OLDER}"),
            ),
        ],
    );
    let server = Server::spawn(dir, &["serve"], &env, true);
    let admin = mint(CURRENT, 3600);
    let job = job_of_handler(&server, "session.sweep", &admin).await;
    admin_post(&server, &format!("/api/jobs/{job}/run"), &admin).await;
    let (head, body) = receiver.first().await;
    assert_signed_by(
        &head,
        &body,
        &[SESSIONS_CURRENT, SESSIONS_OLD, SESSIONS_OLDER],
    );
}

#[test]
fn bad_previous_secrets_stop_start_up_naming_the_variable_and_the_entry() {
    const CONFIG: &str = r#"[[handlers]]
name = "session.sweep"
title_zh = "清理过期在线会话"
title_en = "Sweep expired sessions"
url = "http://127.0.0.1:9/sweep"
secret_env = "QIWU_SECRET_SESSIONS"
previous_secrets_env = "QIWU_SECRET_SESSIONS_PREVIOUS"
"#;
    /// Extra environment, and what the error must say.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 6] = [
        (
            &[("QIWU_JWT_PREVIOUS_SECRETS", "too-short")],
            &["QIWU_JWT_PREVIOUS_SECRETS", "entry 1 has 9 characters"],
        ),
        (
            &[("QIWU_JWT_PREVIOUS_SECRETS", "jwt-old-secret-0123456789,,x")],
            &[
                "QIWU_JWT_PREVIOUS_SECRETS",
                "entry 2 is empty",
                "entry 3 has 1 characters",
            ],
        ),
        (
            &[("QIWU_JWT_PREVIOUS_SECRETS", CURRENT)],
            &[
                "QIWU_JWT_PREVIOUS_SECRETS",
                "entry 1 equals QIWU_JWT_SECRET",
            ],
        ),
        (
            &[
                ("QIWU_WEBHOOK_SECRET", WEBHOOK_CURRENT),
                (
                    "QIWU_WEBHOOK_PREVIOUS_SECRETS",
                    "webhook-old-0123456789,short",
                ),
            ],
            &["QIWU_WEBHOOK_PREVIOUS_SECRETS", "entry 2 has 5 characters"],
        ),
        (
            &[("QIWU_WEBHOOK_PREVIOUS_SECRETS", WEBHOOK_OLD)],
            &["QIWU_WEBHOOK_PREVIOUS_SECRETS is set but QIWU_WEBHOOK_SECRET is not"],
        ),
        (
            &[("QIWU_SECRET_SESSIONS_PREVIOUS", SESSIONS_CURRENT)],
            &[
                "QIWU_CONFIG",
                "[[handlers]] entry 1 (session.sweep)",
                "previous_secrets_env names QIWU_SECRET_SESSIONS_PREVIOUS, whose entry 1 equals the current secret",
            ],
        ),
    ];
    for (extra, wanted) in cases {
        let dir = TempDir::new("bad-previous");
        let path = dir.path().join("handlers.toml");
        std::fs::write(&path, CONFIG).expect("write");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("QIWU_LISTEN", "127.0.0.1:0")
            .env("QIWU_JWT_SECRET", CURRENT)
            .env("QIWU_CONFIG", &path)
            .env("QIWU_SECRET_SESSIONS", SESSIONS_CURRENT);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} must refuse to start");
        for want in wanted {
            assert!(stderr.contains(want), "want {want:?} in {stderr}");
        }
        for secret in [CURRENT, WEBHOOK_CURRENT, WEBHOOK_OLD, SESSIONS_CURRENT] {
            assert!(!stderr.contains(secret), "no secret echoed: {stderr}");
        }
        assert!(
            !dir.path().join("data").exists(),
            "nothing is created before the configuration is checked"
        );
    }
}
