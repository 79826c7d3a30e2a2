//! Black-box tests of "run once" (issue 10, part 5) on the real binary:
//! the `Idempotency-Key` (a repeat answers the first fire with 200, a race
//! starts one fire, another job is 422, keys are per caller, bad keys are
//! 400), the callback (a local receiver gets the report of the fire's end,
//! after its retries, signed as the webhook is: the signature is checked
//! here from the HMAC definition), and `startedBy` in the run detail; in
//! `serve` on SQLite and PostgreSQL, and in a cluster (`api` + `worker` on
//! PostgreSQL and Redis), where the worker that records the end queues the
//! callback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::cluster::{Redis, cluster_env, migrate};
use crate::common::receiver::{Received, hex, hmac_reference, read_request};
use crate::common::{Db, Server, TempDir, admin_token, client, create_job, fields, mint};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const WEBHOOK_SECRET: &str = "run-once-callback-secret-0123";

/// Checks `X-Qiwu-Signature` as a receiver would: HMAC-SHA256 of
/// `{timestamp}.{body}` keyed by the shared secret.
fn verify(req: &Received) {
    let ts = req.header("X-Qiwu-Timestamp").expect("timestamp");
    let seconds: i64 = ts.parse().expect("Unix seconds");
    assert!(
        (chrono::Utc::now().timestamp() - seconds).abs() < 600,
        "{ts}"
    );
    let expected = format!(
        "sha256={}",
        hex(&hmac_reference(
            WEBHOOK_SECRET.as_bytes(),
            format!("{ts}.{}", req.body).as_bytes()
        ))
    );
    assert_eq!(req.header("X-Qiwu-Signature"), Some(expected.as_str()));
}

/// A local HTTP server answering 200 to every request.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/done", listener.local_addr().expect("addr"));
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
                    log.lock().expect("log").push(req);
                    let _ = socket
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Receiver { url, seen }
    }

    /// The callbacks received for `fire`.
    fn of(&self, fire: i64) -> Vec<Received> {
        self.seen
            .lock()
            .expect("log")
            .iter()
            .filter(|r| r.json()["fireId"] == fire)
            .cloned()
            .collect()
    }
}

/// `POST /api/jobs/{job}/run` with an optional key and body.
async fn run(
    base: &str,
    job: i64,
    token: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = client()
        .post(format!("{base}/api/jobs/{job}/run"))
        .bearer_auth(token)
        .header("Accept-Language", "en");
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(base: &str, path: &str) -> Value {
    client()
        .get(format!("{base}{path}"))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

/// Runs `notify.dispatch` (again while it was skipped or raced the
/// scheduled run) until the receiver has the callback of `fire`.
async fn callback_of(base: &str, receiver: &Receiver, fire: i64) -> Received {
    let jobs = get(base, "/api/jobs?handler=notify.dispatch").await;
    let dispatch = jobs["items"][0]["id"].as_i64().expect("notify.dispatch");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, body) = run(base, dispatch, &admin_token(), None, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let round = Instant::now() + Duration::from_secs(5);
        while Instant::now() < round {
            if let Some(found) = receiver.of(fire).first() {
                return found.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            Instant::now() < deadline,
            "no callback of fire {fire} arrived"
        );
    }
}

/// The run of `fire` once every attempt has ended.
async fn ended_runs(store: &qiwu_storage::Store, job: i64, fire: i64, attempts: usize) {
    common::wait_for_runs(store, job, Duration::from_secs(60), |runs| {
        let mine: Vec<_> = runs.iter().filter(|r| r.fire_id == fire).collect();
        mine.len() == attempts && mine.iter().all(|r| r.status != "running")
    })
    .await;
}

/// Keys, races, callers, bad input, callbacks and `startedBy` on one
/// `serve` process.
async fn run_once_on(db: Db) {
    let server = Server::start_with(db, &[("QIWU_WEBHOOK_SECRET", WEBHOOK_SECRET)]);
    let base = server.url("");
    let base = base.trim_end_matches('/');
    let store = server.store().await;
    let receiver = Receiver::start().await;
    let job = create_job(
        base,
        json!({"name": "orders", "handler": "demo.echo", "enabled": false,
               "params": {"message": "done"}}),
    )
    .await;
    let other = create_job(
        base,
        json!({"name": "other", "handler": "demo.echo", "enabled": false}),
    )
    .await;
    let alice = mint("alice", &["scheduler.task.run"], false, 3600);
    let bob = mint("bob", &["scheduler.task.run"], false, 3600);

    // Bad keys and bodies are 400s naming what is wrong; nothing is queued.
    let long = "k".repeat(256);
    for bad in ["two words", long.as_str()] {
        let (status, problem) = run(base, job, &alice, Some(bad), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {problem}");
        assert_eq!(fields(&problem), ["Idempotency-Key"], "{problem}");
    }
    for (body, field) in [
        (
            json!({"callbackUrl": "ftp://files.example.com/x"}),
            "callbackUrl",
        ),
        (json!({"callbackUrl": "not a url"}), "callbackUrl"),
        (
            json!({"callbackUrl": format!("https://h.example/{}", "p".repeat(2048))}),
            "callbackUrl",
        ),
        (json!({"callbackUrl": 5}), "callbackUrl"),
        (json!({"params": {"message": "override"}}), "params"),
        (json!({"callback": "https://h.example/"}), "callback"),
    ] {
        let (status, problem) = run(base, job, &alice, Some("bad-body"), Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(fields(&problem), [field], "{problem}");
    }
    let (status, problem) = run(base, job, &alice, None, Some(json!({"params": {}}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        problem.to_string().contains("cannot be overridden"),
        "{problem}"
    );
    assert_eq!(store.fires().pending_count(job).await.expect("count"), 0);
    // A refused key was not taken: it starts a fire later.

    // The first request with a key is 202 and starts the fire (with its
    // callback); its repeat is 200 with the same fire and starts nothing.
    let with_callback = json!({"callbackUrl": receiver.url});
    let (status, first) = run(
        base,
        job,
        &alice,
        Some("order-42"),
        Some(with_callback.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let fire = first["fireId"].as_i64().expect("fireId");
    let (status, again) = run(base, job, &alice, Some("order-42"), Some(with_callback)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["fireId"], fire);
    // The same key for another job: 422.
    let (status, problem) = run(base, other, &alice, Some("order-42"), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["type"], "urn:qiwu:problem:unprocessable");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or("")
            .contains("Idempotency-Key"),
        "{problem}"
    );
    // Another caller's key of the same text is its own: a second fire.
    let (status, bobs) = run(base, job, &bob, Some("order-42"), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{bobs}");
    let bobs_fire = bobs["fireId"].as_i64().expect("fireId");
    assert_ne!(bobs_fire, fire);

    // Eight concurrent requests with a new key: one fire, named by all.
    let answers = futures_join(
        (0..8)
            .map(|_| {
                let (base, alice) = (base.to_string(), alice.clone());
                tokio::spawn(async move { run(&base, job, &alice, Some("burst-1"), None).await })
            })
            .collect(),
    )
    .await;
    let created = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::ACCEPTED)
        .count();
    let replayed = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    assert_eq!((created, replayed), (1, 7), "{answers:?}");
    let burst = answers[0].1["fireId"].as_i64().expect("fireId");
    assert!(
        answers.iter().all(|(_, b)| b["fireId"] == burst),
        "{answers:?}"
    );

    // The fire ran; its run detail names who started it, the callback
    // reports it, signed.
    ended_runs(&store, job, fire, 1).await;
    let runs = common::runs_of(&store, job).await;
    let run_id = runs.iter().find(|r| r.fire_id == fire).expect("run").id;
    let detail = get(base, &format!("/api/runs/{run_id}")).await;
    assert_eq!(detail["startedBy"], "alice", "{detail}");
    assert_eq!(detail["trigger"], "manual");
    let bobs_run = runs
        .iter()
        .find(|r| r.fire_id == bobs_fire)
        .expect("run")
        .id;
    assert_eq!(
        get(base, &format!("/api/runs/{bobs_run}")).await["startedBy"],
        "bob"
    );
    let received = callback_of(base, &receiver, fire).await;
    verify(&received);
    let body = received.json();
    assert_eq!(body["fireId"], fire);
    assert_eq!(body["jobId"], job);
    assert_eq!(body["status"], "success");
    assert_eq!(body["attempts"], 1);
    assert_eq!(body["error"], Value::Null);
    let started = body["startedAt"].as_str().expect("startedAt");
    let finished = body["finishedAt"].as_str().expect("finishedAt");
    assert!(
        chrono::DateTime::parse_from_rfc3339(started).expect("time")
            <= chrono::DateTime::parse_from_rfc3339(finished).expect("time"),
        "{body}"
    );
    // Fires without a callback report nothing.
    assert!(receiver.of(bobs_fire).is_empty());

    // A fire that keeps timing out reports once, after its retries, with
    // the last attempt's status and error.
    let slow = create_job(
        base,
        json!({"name": "slow", "handler": "demo.echo", "enabled": false, "timeoutMs": 200,
               "retryCount": 2, "retryIntervalMs": 100, "params": {"delayMs": 60000}}),
    )
    .await;
    let (status, body) = run(
        base,
        slow,
        &alice,
        Some("slow-1"),
        Some(json!({"callbackUrl": receiver.url})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let slow_fire = body["fireId"].as_i64().expect("fireId");
    ended_runs(&store, slow, slow_fire, 3).await;
    let received = callback_of(base, &receiver, slow_fire).await;
    verify(&received);
    let body = received.json();
    assert_eq!(body["status"], "timeout", "{body}");
    assert_eq!(body["attempts"], 3, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("200"),
        "{body}"
    );
    assert_eq!(receiver.of(slow_fire).len(), 1, "one report per fire");
}

/// Awaits every task, in order.
async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_once_keys_callbacks_and_started_by_on_sqlite() {
    run_once_on(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_once_keys_callbacks_and_started_by_on_postgres() {
    run_once_on(Db::Postgres).await;
}

/// In a cluster the `api` process queues the fire and a `worker` runs it:
/// the worker that records the end queues the callback, keys hold across
/// processes, and an API key is named as `apikey:<name>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_once_in_a_cluster_on_postgres() {
    let (url, database) = common::fresh_database(Db::Postgres);
    let _drop = DropDatabase(Db::Postgres, database);
    let redis = Redis::start();
    migrate(&url, &redis.url());
    let env = |instance: &str| {
        let mut env = cluster_env(&url, &redis.url(), instance);
        env.push(("QIWU_WEBHOOK_SECRET", WEBHOOK_SECRET.into()));
        env
    };
    let api = Server::spawn(TempDir::new("api"), &["api"], &env("api-1"), true);
    let worker = Server::spawn(TempDir::new("worker"), &["worker"], &env("w1"), true);
    let base = api.url("");
    let base = base.trim_end_matches('/');
    let store = qiwu_storage::Store::connect(&url).await.expect("store");
    let receiver = Receiver::start().await;
    let job = create_job(
        base,
        json!({"name": "cluster orders", "handler": "demo.echo", "enabled": false}),
    )
    .await;
    // An API key calls in.
    let resp = client()
        .post(format!("{base}/api/api-keys"))
        .bearer_auth(admin_token())
        .json(&json!({"name": "orders-service", "perms": ["scheduler.task.run"]}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::CREATED);
    let key: Value = resp.json().await.expect("json");
    let api_key = key["key"].as_str().expect("key").to_string();

    let body = json!({"callbackUrl": receiver.url});
    let (status, first) = run(base, job, &api_key, Some("c-1"), Some(body.clone())).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let fire = first["fireId"].as_i64().expect("fireId");
    let (status, again) = run(base, job, &api_key, Some("c-1"), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["fireId"], fire);

    ended_runs(&store, job, fire, 1).await;
    let runs = common::runs_of(&store, job).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].instance, "w1");
    let detail = get(base, &format!("/api/runs/{}", runs[0].id)).await;
    assert_eq!(detail["startedBy"], "apikey:orders-service", "{detail}");
    let received = callback_of(base, &receiver, fire).await;
    verify(&received);
    let body = received.json();
    assert_eq!(
        (body["status"].clone(), body["attempts"].clone()),
        (json!("success"), json!(1))
    );

    // A worker killed mid-run writes no end: the sweep that closes its run
    // (here its own restart under the same instance id) reports it.
    let long = create_job(
        base,
        json!({"name": "cluster long", "handler": "demo.echo", "enabled": false,
               "timeoutMs": 0, "params": {"delayMs": 600000}}),
    )
    .await;
    let body = json!({"callbackUrl": receiver.url});
    let (status, started) = run(base, long, &api_key, Some("c-2"), Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let long_fire = started["fireId"].as_i64().expect("fireId");
    common::wait_for_runs(&store, long, Duration::from_secs(30), |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let dir = worker.kill();
    let worker = Server::spawn(dir, &["worker"], &env("w1"), true);
    let runs = common::wait_for_runs(&store, long, Duration::from_secs(30), |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert_eq!(runs[0].status, "failed", "{runs:#?}");
    let received = callback_of(base, &receiver, long_fire).await;
    verify(&received);
    let body = received.json();
    assert_eq!(body["status"], "failed", "{body}");
    assert_eq!(body["error"], json!(runs[0].error), "{body}");
    drop(worker);
    drop(api);
}

/// Drops a test database when the test ends, however it ends.
struct DropDatabase(Db, String);

impl Drop for DropDatabase {
    fn drop(&mut self) {
        common::drop_database(self.0, &self.1);
    }
}
