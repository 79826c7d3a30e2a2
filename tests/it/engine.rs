//! Black-box tests of execution: the real `serve` binary runs jobs and the
//! run log is read straight from its SQLite file.

use std::collections::HashSet;
use std::time::Duration;

use crate::common;
use crate::common::{Server, admin_token, client, create_job, run_once, runs_of, wait_for_runs};
use crate::observe;
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn every_second_job_runs_once_per_second() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "tick", "handler": "demo.echo", "cron": "* * * * * *", "params": {"message": "tick"}})).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| runs.len() >= 5).await;
    let seconds: Vec<i64> = runs.iter().map(|r| r.scheduled_at).collect();
    let unique: HashSet<i64> = seconds.iter().copied().collect();
    assert_eq!(
        unique.len(),
        seconds.len(),
        "no scheduled time twice: {seconds:?}"
    );
    // Consecutive seconds, each on a whole second.
    let mut sorted = seconds.clone();
    sorted.sort_unstable();
    assert!(sorted.iter().all(|s| s % 1000 == 0), "{sorted:?}");
    assert!(sorted.windows(2).all(|w| w[1] - w[0] == 1000), "{sorted:?}");
    let done = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().take(5).all(|r| r.status != "running")
    })
    .await;
    for run in done.iter().take(5) {
        assert_eq!(run.status, "success", "{run:?}");
        assert_eq!(run.output, "tick");
        assert_eq!(run.trigger, "schedule");
        assert_eq!(run.attempt, 1);
        // Started, not folded into a misfire: within the misfire threshold
        // (5 s) of its time. How close to it is measured on a paused clock
        // (engine_tests: every_fire_starts_at_its_scheduled_time) and by the
        // fire_lag benchmark, not here on a shared machine.
        assert!(run.started_at - run.scheduled_at < 5000, "{run:?}");
    }
}

#[tokio::test]
async fn run_once_obeys_timeout_and_retries() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(
        &server,
        json!({"name": "slow", "handler": "demo.echo", "enabled": false, "timeoutMs": 300, "retryCount": 2, "retryIntervalMs": 100, "params": {"delayMs": 5000}}),
    )
    .await;
    let accepted = run_once(&server, job).await;
    assert_eq!(accepted["message"], "已开始执行，结果见执行日志");
    let fire_id = accepted["fireId"].as_i64().expect("fire id");
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.len() == 3 && runs.iter().all(|r| r.status != "running")
    })
    .await;
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(run.attempt, i as i32 + 1);
        assert_eq!(run.fire_id, fire_id);
        assert_eq!(run.trigger, "manual");
        assert_eq!(run.status, "timeout", "{run:?}");
        assert!(run.error.contains("300"), "{run:?}");
        // Recorded at the deadline, not when the handler would have ended
        // (5 s); how exactly at the deadline is measured on a paused clock
        // (engine_tests: a_timeout_is_recorded_at_the_deadline_…).
        let duration = run.duration_ms.expect("duration");
        assert!((300..4500).contains(&duration), "{run:?}");
    }
    // The retry interval separates the attempts.
    assert!(runs[1].started_at - runs[0].finished_at.expect("finished") >= 100);
}

#[tokio::test]
async fn overlapping_fires_are_skipped_or_run_in_parallel() {
    let server = Server::start();
    let store = server.store().await;
    let serial = create_job(&server, json!({"name": "serial", "handler": "demo.echo", "cron": "* * * * * *", "params": {"delayMs": 2500}, "timeoutMs": 0})).await;
    let parallel = create_job(&server, json!({"name": "parallel", "handler": "demo.echo", "cron": "* * * * * *", "params": {"delayMs": 2500}, "timeoutMs": 0, "allowConcurrent": true})).await;
    let runs = wait_for_runs(&store, serial, LIMIT, |runs| {
        runs.iter().filter(|r| r.status == "skipped").count() >= 2
    })
    .await;
    let skipped: Vec<_> = runs.iter().filter(|r| r.status == "skipped").collect();
    assert!(
        skipped[0].output.contains("previous run has not finished"),
        "{:?}",
        skipped[0]
    );
    // Never two running at once for the serial job.
    let running = runs.iter().filter(|r| r.status == "running").count();
    assert!(running <= 1, "{runs:#?}");
    let runs = wait_for_runs(&store, parallel, LIMIT, |runs| {
        runs.iter().filter(|r| r.status == "running").count() >= 2
    })
    .await;
    assert!(runs.iter().all(|r| r.status != "skipped"), "{runs:#?}");
}

#[tokio::test]
async fn disabling_stops_fires_at_once_and_enabling_resumes() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(
        &server,
        json!({"name": "toggle", "handler": "demo.echo", "cron": "* * * * * *"}),
    )
    .await;
    wait_for_runs(&store, job, LIMIT, |runs| runs.len() >= 2).await;
    let resp = client()
        .put(server.url(&format!("/api/jobs/{job}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let disabled_at = chrono::Utc::now().timestamp_millis();
    let count = runs_of(&store, job).await.len();
    // Three seconds later, nothing fired after the disable (one fire may
    // have been claimed in the same instant).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = runs_of(&store, job).await;
    assert!(runs.len() <= count + 1, "{runs:#?}");
    assert!(
        runs.iter().all(|r| r.scheduled_at <= disabled_at + 1000),
        "{runs:#?}"
    );
}

#[tokio::test]
async fn restart_after_missed_fires_records_one_misfire_per_job() {
    let server = Server::start();
    let skip = create_job(
        &server,
        json!({"name": "skip", "handler": "demo.echo", "cron": "* * * * * *"}),
    )
    .await;
    let catch_up = create_job(&server, json!({"name": "catch up", "handler": "demo.echo", "cron": "* * * * * *", "misfirePolicy": "run_once", "params": {"message": "caught up"}})).await;
    let store = server.store().await;
    wait_for_runs(&store, skip, LIMIT, |runs| runs.len() >= 2).await;
    wait_for_runs(&store, catch_up, LIMIT, |runs| runs.len() >= 2).await;
    drop(store);
    let dir = server.stop();
    // Down for a few fire times.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let server = Server::restart(dir);
    let store = server.store().await;
    let runs = wait_for_runs(&store, skip, LIMIT, |runs| {
        runs.iter().any(|r| r.trigger == "misfire")
    })
    .await;
    let misfires: Vec<_> = runs.iter().filter(|r| r.trigger == "misfire").collect();
    assert_eq!(misfires.len(), 1, "{runs:#?}");
    assert_eq!(misfires[0].status, "skipped");
    assert!(misfires[0].output.contains("Missed"), "{:?}", misfires[0]);
    let runs = wait_for_runs(&store, catch_up, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.trigger == "misfire" && r.status != "running")
    })
    .await;
    let misfires: Vec<_> = runs.iter().filter(|r| r.trigger == "misfire").collect();
    assert_eq!(misfires.len(), 1, "{runs:#?}");
    assert_eq!(misfires[0].status, "success");
    // The catch-up's first log line names the times it stands for, then
    // the handler's own output follows.
    let (note, value) = misfires[0]
        .output
        .rsplit_once('\n')
        .expect("a note line, then the value");
    assert_eq!(value, "caught up");
    assert!(
        note.starts_with("服务停机期间错过了")
            && note.contains("misfire policy is run once: caught up now."),
        "{note}"
    );
    // Regular fires go on after the catch-up.
    let missed_at = misfires[0].scheduled_at;
    wait_for_runs(&store, catch_up, LIMIT, |runs| {
        runs.iter()
            .any(|r| r.trigger == "schedule" && r.scheduled_at > missed_at)
    })
    .await;

    // The metrics count the times each record stands for ("Missed N fire
    // times …"), and the two claims of the misfire path. Built-in jobs
    // may have missed times too, so at least these.
    let mut missed = 0.0;
    for job in [skip, catch_up] {
        let runs = runs_of(&store, job).await;
        let output = &runs
            .iter()
            .find(|r| r.trigger == "misfire")
            .expect("a misfire record")
            .output;
        let n: f64 = output
            .split("Missed ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in {output:?}"));
        assert!(n >= 1.0, "{output}");
        missed += n;
    }
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    let samples = observe::parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let at_least = |name: &str, labels: &[(&str, &str)], least: f64| {
        let got = observe::value(&samples, name, labels).unwrap_or(0.0);
        assert!(got >= least, "{name}{labels:?} = {got}, want ≥ {least}");
    };
    at_least("qiwu_missed_fires_total", &[("reason", "downtime")], missed);
    at_least(
        "qiwu_fires_total",
        &[("trigger", "misfire"), ("outcome", "skipped_misfire")],
        1.0,
    );
    at_least(
        "qiwu_fires_total",
        &[("trigger", "misfire"), ("outcome", "claimed")],
        1.0,
    );
}

#[tokio::test]
async fn shutdown_stops_a_long_handler_and_leaves_nothing_running() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "long", "handler": "demo.echo", "enabled": false, "timeoutMs": 0, "params": {"delayMs": 600000}})).await;
    run_once(&server, job).await;
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    let started = std::time::Instant::now();
    let dir = server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(11),
        "exit took {:?}",
        started.elapsed()
    );
    let store = qiwu_storage::Store::connect(&format!("sqlite://{}/qiwu.db", dir.path().display()))
        .await
        .expect("open");
    let runs = runs_of(&store, job).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, "failed", "{runs:#?}");
    assert!(runs[0].error.contains("shut down"), "{runs:#?}");
}

#[tokio::test]
async fn a_crash_leaves_no_run_running_after_restart() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "crashy", "handler": "demo.echo", "enabled": false, "timeoutMs": 0, "params": {"delayMs": 600000}})).await;
    run_once(&server, job).await;
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "running")
    })
    .await;
    drop(store);
    let dir = server.kill();
    let server = Server::restart(dir);
    let store = server.store().await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().all(|r| r.status != "running")
    })
    .await;
    assert_eq!(runs[0].status, "failed");
    assert!(runs[0].error.contains("instance stopped"), "{runs:#?}");
}

#[tokio::test]
async fn a_missing_handler_fails_without_retry() {
    let server = Server::start();
    let store = server.store().await;
    let job = create_job(
        &server,
        json!({"name": "orphan", "handler": "demo.echo", "enabled": false, "retryCount": 3}),
    )
    .await;
    // A later release removed the handler: simulate by renaming it in the row.
    {
        use sea_orm::{ConnectionTrait, Statement};
        store
            .connection()
            .execute_raw(Statement::from_string(
                sea_orm::DatabaseBackend::Sqlite,
                format!("UPDATE jobs SET handler = 'gone.away' WHERE id = {job}"),
            ))
            .await
            .expect("update");
    }
    run_once(&server, job).await;
    let runs = wait_for_runs(&store, job, LIMIT, |runs| {
        runs.first().is_some_and(|r| r.status != "running")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs_after = runs_of(&store, job).await;
    assert_eq!(runs_after.len(), 1, "never retried: {runs_after:#?}");
    assert_eq!(runs[0].status, "failed");
    assert!(runs[0].error.contains("gone.away"), "{runs:#?}");
}

/// A webhook receiver on 127.0.0.1:0 that records each request's headers
/// and body and answers 200.
struct Receiver {
    url: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = std::sync::Arc::clone(&seen);
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
                        let text = String::from_utf8_lossy(&data).to_string();
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let length = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if body.len() >= length {
                                seen.lock()
                                    .expect("lock")
                                    .push((head.to_string(), body.to_string()));
                                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                                return;
                            }
                        }
                    }
                });
            }
        });
        Receiver { url, requests }
    }
}

#[tokio::test]
async fn a_timeout_raises_an_inbox_alert_and_a_signed_webhook_delivery() {
    const WEBHOOK_SECRET: &str = "webhook-secret-0123456789";
    let receiver = Receiver::start().await;
    let server = Server::start_with(
        common::Db::Sqlite,
        &[("QIWU_WEBHOOK_SECRET", WEBHOOK_SECRET)],
    );
    let admin = admin_token();
    let resp = client()
        .put(server.url("/api/settings/notify.webhook_url"))
        .bearer_auth(&admin)
        .json(&json!({"value": receiver.url}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    let store = server.store().await;
    let job = create_job(&server, json!({"name": "too slow", "handler": "demo.echo", "enabled": false, "timeoutMs": 200, "params": {"delayMs": 5000}})).await;
    run_once(&server, job).await;
    wait_for_runs(&store, job, LIMIT, |runs| {
        runs.iter().any(|r| r.status == "timeout")
    })
    .await;

    // The inbox of the super admins holds the alert.
    let start = std::time::Instant::now();
    let alert = loop {
        let inbox: Value = client()
            .get(server.url("/api/notifications"))
            .bearer_auth(&admin)
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        if let Some(first) = inbox["items"].as_array().and_then(|i| i.first()).cloned() {
            break first;
        }
        assert!(start.elapsed() < LIMIT, "no alert in the inbox: {inbox}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(alert["title"], "任务超时：too slow");
    let body = alert["body"].as_str().expect("body");
    assert!(body.contains("demo.echo") && body.contains("200"), "{body}");

    // The built-in dispatch job delivers it to the webhook, signed.
    let jobs: Value = client()
        .get(server.url("/api/jobs?handler=notify.dispatch"))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    let dispatch = jobs["items"][0]["id"]
        .as_i64()
        .expect("the dispatch job was seeded");
    run_once(&server, dispatch).await;
    let start = std::time::Instant::now();
    while receiver.requests.lock().expect("lock").is_empty() {
        assert!(start.elapsed() < LIMIT, "no webhook delivery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (head, body) = receiver.requests.lock().expect("lock")[0].clone();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let timestamp = header("x-qiwu-timestamp");
    let expected =
        qiwu_scheduler_worker::handlers::dispatch::signature(WEBHOOK_SECRET, &timestamp, &body);
    // `signature` returns the header value, `sha256=<hex>`.
    assert!(expected.starts_with("sha256=") && expected.len() == 7 + 64);
    assert_eq!(header("x-qiwu-signature"), expected);
    let payload: Value = serde_json::from_str(&body).expect("json payload");
    assert_eq!(payload["title"], "任务超时：too slow");
}
