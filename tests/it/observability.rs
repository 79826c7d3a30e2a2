//! Observability, black-box: the real `serve` binary with traces exported
//! to an OTLP/HTTP or OTLP/gRPC receiver inside the test, the
//! `traceparent` of remote calls and webhook deliveries, a cluster worker's
//! lost job lock, JSON logs, request ids, and `/metrics` parsed strictly.

use std::collections::HashMap;
use std::time::Duration;

use crate::common;
use crate::common::cluster::Redis;
use crate::common::receiver::hex;
use crate::common::{SECRET, admin_token, client, run_once, until};
use crate::observe;
use crate::observe::{
    Database, GRPC_EXPORT, GrpcReceiver, Proc, Received, Receiver, TestTls, cluster_env,
    parse_exposition, value,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use reqwest::StatusCode;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);
const REMOTE_SECRET: &str = "remote-secret-0123456789";
/// The caller's trace and span, as its `traceparent` names them.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A span with its resource's `service.name` and string attributes.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    resource: HashMap<String, String>,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                AnyValue::IntValue(i) => Some(i.to_string()),
                AnyValue::BoolValue(b) => Some(b.to_string()),
                AnyValue::DoubleValue(d) => Some(d.to_string()),
                _ => None,
            })
    }

    fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
}

/// Every span the receiver got so far over OTLP/HTTP.
fn spans(receiver: &Receiver) -> Vec<Got> {
    decode(receiver.received("/v1/traces"))
}

/// The spans of OTLP export requests.
fn decode(requests: Vec<Received>) -> Vec<Got> {
    let mut out = Vec::new();
    for request in requests {
        let decoded =
            ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf");
        for resource in decoded.resource_spans {
            let attributes: HashMap<String, String> = resource
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    AnyValue::StringValue(s) => Some((kv.key.clone(), s.clone())),
                    _ => None,
                })
                .collect();
            let service = attributes.get("service.name").cloned().unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    out.push(Got {
                        service: service.clone(),
                        resource: attributes.clone(),
                        span,
                    });
                }
            }
        }
    }
    out
}

fn config_file(receiver: &Receiver) -> String {
    format!(
        r#"[[handlers]]
name = "remote.work"
title_zh = "远程任务"
title_en = "Remote work"
url = "http://{}/remote"
secret = "{REMOTE_SECRET}"
"#,
        receiver.addr
    )
}

/// The variables that export traces to `endpoint` over `protocol`, in
/// small batches so the tests see them soon.
fn otel(endpoint: String, protocol: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into()),
        ("OTEL_SERVICE_NAME", "qiwu-test".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
}

/// `serve` on SQLite in its own directory, with JSON logs, the remote
/// handler declared, and traces exported to `receiver` when `tracing`.
fn serve(receiver: &Receiver, tracing: bool) -> Proc {
    let env = if tracing {
        otel(format!("http://{}", receiver.addr), "http/protobuf")
    } else {
        Vec::new()
    };
    serve_with(receiver, &env)
}

/// `serve` as [`serve`] says, with `extra` variables.
fn serve_with(receiver: &Receiver, extra: &[(&'static str, String)]) -> Proc {
    let mut env: Vec<(&str, String)> = vec![
        ("QIWU_LISTEN", "127.0.0.1:0".into()),
        ("QIWU_DATABASE_URL", "sqlite://qiwu.db".into()),
        ("QIWU_JWT_SECRET", SECRET.into()),
        ("QIWU_TIMEZONE", "UTC".into()),
        ("QIWU_LOG_FORMAT", "json".into()),
        ("QIWU_CONFIG", "handlers.toml".into()),
    ];
    env.extend(extra.iter().cloned());
    Proc::start(
        "observe",
        &["serve"],
        &env,
        &[("handlers.toml", config_file(receiver))],
    )
}

async fn create_job(p: &Proc, name: &str, handler: &str, cron: &str) -> i64 {
    common::create_job(
        p,
        json!({"name": name, "handler": handler, "cron": cron, "params": {}}),
    )
    .await
}

async fn metrics(p: &Proc) -> Vec<observe::Sample> {
    let res = client()
        .get(p.url("/metrics"))
        .send()
        .await
        .expect("scrape");
    assert_eq!(res.status(), StatusCode::OK);
    let kind = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = res.text().await.expect("text");
    parse_exposition(&text).unwrap_or_else(|e| panic!("strict parse: {e}\n{text}"))
}

/// A run's detail (with its `traceId`).
async fn run_detail(p: &Proc, run: &Value) -> Value {
    client()
        .get(p.url(&format!("/api/runs/{}", run["id"])))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("detail")
        .json()
        .await
        .expect("json")
}

/// The job's runs (newest first), once `done` holds for them.
async fn runs_when(p: &Proc, job: i64, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    until("the runs", LIMIT, async || {
        let page: Value = client()
            .get(p.url(&format!("/api/runs?jobId={job}&limit=100")))
            .bearer_auth(admin_token())
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let runs = page["items"].as_array()?.clone();
        done(&runs).then_some(runs)
    })
    .await
}

/// The job's runs (newest first) once there are `n` and none is running.
async fn ended_runs(p: &Proc, job: i64, n: usize) -> Vec<Value> {
    runs_when(p, job, |runs| {
        runs.len() == n && runs.iter().all(|r| r["status"] != "running")
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_once_is_one_trace_from_the_callers_request_to_the_remote_call() {
    let receiver = Receiver::start().await;
    let p = serve(&receiver, true);
    let job = create_job(&p, "traced remote", "remote.work", "0 0 0 1 1 *").await;

    let res = client()
        .post(p.url(&format!("/api/jobs/{job}/run")))
        .bearer_auth(admin_token())
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("X-Request-Id", "obs-run-1")
        .send()
        .await
        .expect("run once");
    assert_eq!(res.status(), StatusCode::ACCEPTED);
    assert_eq!(
        res.headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("obs-run-1")
    );
    let run = ended_runs(&p, job, 1).await.remove(0);
    assert_eq!(run["status"], "success", "{run}");
    let detail: Value = client()
        .get(p.url(&format!("/api/runs/{}", run["id"])))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("detail")
        .json()
        .await
        .expect("json");
    assert_eq!(detail["traceId"], CALLER_TRACE, "{detail}");

    // The spans of the request, the fire and its attempt, in one trace.
    let (http, fire, attempt) = until("the spans arrived", LIMIT, async || {
        let all = spans(&receiver);
        let of = |name: &str| {
            all.iter()
                .find(|g| g.trace() == CALLER_TRACE && g.span.name == name)
                .cloned()
        };
        Some((
            of("POST /api/jobs/{id}/run")?,
            of("fire traced remote")?,
            of("attempt 1 remote.work")?,
        ))
    })
    .await;
    assert_eq!(http.service, "qiwu-test");
    assert_eq!(
        http.parent(),
        CALLER_SPAN,
        "the request continues the caller's span"
    );
    assert_eq!(
        http.attr("http.route").as_deref(),
        Some("/api/jobs/{id}/run")
    );
    assert_eq!(http.attr("http.request.method").as_deref(), Some("POST"));
    assert_eq!(
        http.attr("http.response.status_code").as_deref(),
        Some("202")
    );
    assert_eq!(http.attr("request_id").as_deref(), Some("obs-run-1"));
    assert_eq!(
        fire.parent(),
        http.id(),
        "the fire is a child of the request"
    );
    assert_eq!(fire.attr("job.id"), Some(job.to_string()));
    assert_eq!(fire.attr("fire.trigger").as_deref(), Some("manual"));
    assert!(fire.attr("fire.lag_ms").is_some(), "{fire:?}");
    assert_eq!(
        attempt.parent(),
        fire.id(),
        "the attempt is a child of the fire"
    );
    for (key, expected) in [
        ("handler", "remote.work"),
        ("attempt", "1"),
        ("status", "success"),
        ("job.name", "traced remote"),
        ("trigger", "manual"),
    ] {
        assert_eq!(
            attempt.attr(key).as_deref(),
            Some(expected),
            "{key}: {attempt:?}"
        );
    }
    assert_eq!(attempt.attr("job.id"), Some(job.to_string()));
    assert!(attempt.attr("scheduled_at").is_some() && attempt.attr("lag_ms").is_some());

    // The remote handler got the attempt's traceparent.
    let calls = receiver.received("/remote");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        calls[0].headers.get("traceparent").map(String::as_str),
        Some(format!("00-{CALLER_TRACE}-{}-01", attempt.id()).as_str())
    );

    // JSON logs: one object per line; the request's lines carry its id
    // and the trace.
    let stderr = p.stderr();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let queued = lines
        .iter()
        .find(|l| l["message"] == "run once queued")
        .unwrap_or_else(|| panic!("no 'run once queued' line in\n{stderr}"));
    assert_eq!(queued["request_id"], "obs-run-1", "{queued}");
    assert_eq!(queued["trace_id"], CALLER_TRACE, "{queued}");
    assert_eq!(queued["span_id"], http.id(), "{queued}");
    assert_eq!(queued["level"], "INFO");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_fires_and_runs_and_follow_the_jobs() {
    let receiver = Receiver::start().await;
    let p = serve(&receiver, false);
    let job = create_job(&p, "metered echo", "demo.echo", "0 0 0 1 1 *").await;
    for n in 1..=3 {
        let res = client()
            .post(p.url(&format!("/api/jobs/{job}/run")))
            .bearer_auth(admin_token())
            .send()
            .await
            .expect("run once");
        assert_eq!(res.status(), StatusCode::ACCEPTED);
        let runs = ended_runs(&p, job, n).await;
        assert!(runs.iter().all(|r| r["status"] == "success"), "{runs:?}");
    }
    let id = job.to_string();
    let samples = until("the per-job series show the success", LIMIT, async || {
        let samples = metrics(&p).await;
        (value(
            &samples,
            "qiwu_job_last_run_status",
            &[("job_id", &id), ("job", "metered echo")],
        ) == Some(1.0))
        .then_some(samples)
    })
    .await;
    let echo = [("handler", "demo.echo"), ("status", "success")];
    assert_eq!(value(&samples, "qiwu_runs_total", &echo), Some(3.0));
    assert_eq!(
        value(
            &samples,
            "qiwu_run_duration_seconds_count",
            &[("handler", "demo.echo")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "qiwu_fires_total",
            &[("trigger", "manual"), ("outcome", "claimed")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "qiwu_fire_lag_seconds_count",
            &[("trigger", "manual")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "qiwu_http_requests_total",
            &[
                ("route", "/api/jobs/{id}/run"),
                ("method", "POST"),
                ("status", "202")
            ]
        ),
        Some(3.0)
    );
    let success = value(
        &samples,
        "qiwu_job_last_success_timestamp_seconds",
        &[("job_id", &id), ("job", "metered echo")],
    )
    .expect("last success");
    let now = chrono::Utc::now().timestamp() as f64;
    assert!(
        now - 60.0 < success && success <= now + 1.0,
        "{success} vs {now}"
    );
    assert_eq!(
        value(
            &samples,
            "qiwu_job_period_seconds",
            &[("job_id", &id), ("job", "metered echo")]
        ),
        Some(365.0 * 86_400.0)
    );
    for (name, expected) in [
        ("qiwu_up", 1.0),
        ("qiwu_engine_running", 1.0),
        ("qiwu_database_up", 1.0),
        ("qiwu_runs_running", 0.0),
        ("qiwu_pending_run_once", 0.0),
        ("qiwu_runs_overdue", 0.0),
        ("qiwu_outbox_backlog", 0.0),
    ] {
        assert_eq!(value(&samples, name, &[]), Some(expected), "{name}");
    }
    assert!(value(&samples, "qiwu_jobs_armed", &[]).is_some_and(|n| n >= 1.0));

    // Disabled: its series go away (after the scrape cache's 5 s).
    let res = client()
        .put(p.url(&format!("/api/jobs/{job}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("disable");
    assert!(res.status().is_success());
    until("the disabled job's series are dropped", LIMIT, async || {
        let samples = metrics(&p).await;
        samples
            .iter()
            .all(|s| s.labels.get("job_id") != Some(&id))
            .then_some(())
    })
    .await;

    // A job that never ran has its series (status 0) until it is deleted.
    let doomed = create_job(&p, "doomed", "demo.echo", "0 0 0 1 1 *").await;
    let doomed_id = doomed.to_string();
    let labels = [("job_id", doomed_id.as_str()), ("job", "doomed")];
    until("the new job's series appear", LIMIT, async || {
        (value(&metrics(&p).await, "qiwu_job_last_run_status", &labels) == Some(0.0)).then_some(())
    })
    .await;
    let res = client()
        .delete(p.url(&format!("/api/jobs/{doomed}")))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("delete");
    assert!(res.status().is_success(), "{:?}", res.status());
    until("the deleted job's series are dropped", LIMIT, async || {
        let samples = metrics(&p).await;
        samples
            .iter()
            .all(|s| s.labels.get("job_id") != Some(&doomed_id))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_has_a_request_id_and_a_5xx_names_it_as_instance() {
    let receiver = Receiver::start().await;
    let p = serve(&receiver, false);
    // Generated when absent or unusable, kept when valid.
    let mut seen = HashMap::new();
    for sent in [None, Some("bad id with spaces"), Some("ok-id_1.2~3")] {
        let mut req = client().get(p.url("/healthz"));
        if let Some(id) = sent {
            req = req.header("X-Request-Id", id);
        }
        let res = req.send().await.expect("healthz");
        let id = res
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .expect("x-request-id")
            .to_string();
        seen.insert(sent, id);
    }
    assert_eq!(seen[&Some("ok-id_1.2~3")], "ok-id_1.2~3");
    for generated in [&seen[&None], &seen[&Some("bad id with spaces")]] {
        assert_eq!(generated.len(), 32, "{generated}");
        assert!(generated.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    // Break the database under the API: a 500 whose body names the request.
    let store = qiwu_storage::Store::connect(&format!("sqlite://{}", p.path("qiwu.db").display()))
        .await
        .expect("open");
    sea_orm::ConnectionTrait::execute_unprepared(store.connection(), "DROP TABLE job_groups")
        .await
        .expect("drop");
    let res = client()
        .get(p.url("/api/job-groups"))
        .bearer_auth(admin_token())
        .header("X-Request-Id", "obs-500")
        .send()
        .await
        .expect("groups");
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        res.headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("obs-500")
    );
    let body: Value = res.json().await.expect("problem");
    assert_eq!(body["instance"], "obs-500", "{body}");
    // 4xx bodies do not carry it.
    let res = client()
        .get(p.url("/api/jobs/999999"))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("404");
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let body: Value = res.json().await.expect("problem");
    assert!(body.get("instance").is_none(), "{body}");
    // The cause is logged with the request id.
    let stderr = p.stderr();
    let logged = stderr.lines().any(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["request_id"] == "obs-500" && v["level"] == "ERROR")
    });
    assert!(logged, "no ERROR line with request_id obs-500 in\n{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_go_over_otlp_grpc_and_a_scheduled_fire_keeps_its_trace_id() {
    let receiver = Receiver::start().await;
    let grpc = GrpcReceiver::start().await;
    let mut env = otel(format!("http://{}", grpc.addr), "grpc");
    env.push((
        "OTEL_RESOURCE_ATTRIBUTES",
        "deployment.environment=ci,team=ops".into(),
    ));
    let p = serve_with(&receiver, &env);
    let job = create_job(&p, "grpc traced", "demo.echo", "* * * * * *").await;
    let runs = runs_when(&p, job, |runs| {
        runs.iter().any(|r| r["status"] == "success")
    })
    .await;
    let res = client()
        .put(p.url(&format!("/api/jobs/{job}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("disable");
    assert!(res.status().is_success());
    let run = runs
        .iter()
        .find(|r| r["status"] == "success")
        .expect("a success");
    let detail = run_detail(&p, run).await;
    let trace = detail["traceId"].as_str().expect("traceId").to_string();
    assert!(
        trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()),
        "{detail}"
    );

    // The fire and its attempt arrive over gRPC in the run's trace, and so
    // does the request that created the job (a trace of its own).
    let (fire, attempt, http) = until("the spans arrived over gRPC", LIMIT, async || {
        let all = decode(grpc.received(GRPC_EXPORT));
        let fire = all
            .iter()
            .find(|g| g.trace() == trace && g.span.name == "fire grpc traced")?
            .clone();
        let attempt = all
            .iter()
            .find(|g| g.parent() == fire.id() && g.span.name == "attempt 1 demo.echo")?
            .clone();
        let http = all
            .iter()
            .find(|g| g.span.name == "POST /api/jobs")?
            .clone();
        Some((fire, attempt, http))
    })
    .await;
    assert_eq!(fire.service, "qiwu-test");
    for (key, expected) in [
        ("deployment.environment", "ci"),
        ("team", "ops"),
        ("qiwu.role", "serve"),
    ] {
        assert_eq!(
            fire.resource.get(key).map(String::as_str),
            Some(expected),
            "{key}: {:?}",
            fire.resource
        );
    }
    assert_eq!(fire.attr("fire.trigger").as_deref(), Some("schedule"));
    assert_eq!(fire.attr("job.id"), Some(job.to_string()));
    assert_eq!(attempt.trace(), trace);
    assert_eq!(attempt.attr("status").as_deref(), Some("success"));
    assert_eq!(attempt.attr("trigger").as_deref(), Some("schedule"));
    assert_eq!(
        http.attr("http.response.status_code").as_deref(),
        Some("201")
    );
    assert_ne!(http.trace(), trace, "the fire is not the request's child");
    let calls = grpc.received(GRPC_EXPORT);
    assert!(
        calls.iter().all(|c| c
            .headers
            .get("content-type")
            .is_some_and(|t| t.starts_with("application/grpc"))),
        "{calls:?}"
    );
    assert!(
        receiver.received("/v1/traces").is_empty(),
        "nothing goes over OTLP/HTTP"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_go_over_otlp_grpc_with_tls_to_an_https_collector() {
    let tls = TestTls::make();
    let receiver = Receiver::start().await;
    let grpc = GrpcReceiver::start_tls(&tls).await;
    let port = grpc.addr.rsplit_once(':').map(|(_, p)| p).expect("port");
    let mut env = otel(format!("https://localhost:{port}"), "grpc");
    // The collector's authority, trusted as a system root would be.
    env.push(("SSL_CERT_FILE", tls.ca_file.display().to_string()));
    let p = serve_with(&receiver, &env);
    let job = create_job(&p, "grpc over tls", "demo.echo", "0 0 0 1 1 *").await;
    run_once(&p, job).await;
    let runs = ended_runs(&p, job, 1).await;
    assert_eq!(runs[0]["status"], "success", "{runs:?}");
    let trace = run_detail(&p, &runs[0]).await["traceId"]
        .as_str()
        .expect("traceId")
        .to_string();
    until("the fire's span arrived over TLS", LIMIT, async || {
        decode(grpc.received(GRPC_EXPORT))
            .into_iter()
            .find(|g| g.trace() == trace && g.span.name == "fire grpc over tls")
    })
    .await;
}

/// The trace and parent span ids a W3C `traceparent` names.
fn traceparent_ids(header: &str) -> (String, String) {
    let parts: Vec<&str> = header.split('-').collect();
    assert!(
        parts.len() == 4
            && parts[0] == "00"
            && parts[1].len() == 32
            && parts[2].len() == 16
            && parts[3] == "01",
        "a sampled W3C traceparent: {header:?}"
    );
    (parts[1].to_string(), parts[2].to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_deliveries_carry_the_traceparent_of_the_dispatch_attempt() {
    const WEBHOOK_SECRET: &str = "webhook-secret-0123456789";
    let receiver = Receiver::start().await;
    let mut env = otel(format!("http://{}", receiver.addr), "http/protobuf");
    env.push(("QIWU_WEBHOOK_SECRET", WEBHOOK_SECRET.into()));
    let p = serve_with(&receiver, &env);
    let res = client()
        .put(p.url("/api/settings/notify.webhook_url"))
        .bearer_auth(admin_token())
        .json(&json!({"value": format!("http://{}/hook", receiver.addr)}))
        .send()
        .await
        .expect("set the webhook");
    assert_eq!(res.status(), StatusCode::OK);

    // A timeout raises an alert, queued for the webhook.
    let slow = common::create_job(
        &p,
        json!({"name": "too slow", "handler": "demo.echo", "cron": "0 0 0 1 1 *",
               "timeoutMs": 200, "params": {"delayMs": 5000}}),
    )
    .await;
    run_once(&p, slow).await;
    let runs = ended_runs(&p, slow, 1).await;
    assert_eq!(runs[0]["status"], "timeout", "{runs:?}");
    until("the alert is in the inbox", LIMIT, async || {
        let inbox: Value = client()
            .get(p.url("/api/notifications"))
            .bearer_auth(admin_token())
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (!inbox["items"].as_array()?.is_empty()).then_some(())
    })
    .await;

    // The built-in dispatch job delivers it.
    let jobs: Value = client()
        .get(p.url("/api/jobs?handler=notify.dispatch"))
        .bearer_auth(admin_token())
        .send()
        .await
        .expect("jobs")
        .json()
        .await
        .expect("json");
    let dispatch = jobs["items"][0]["id"].as_i64().expect("the dispatch job");
    run_once(&p, dispatch).await;
    let hook = until("the webhook delivery", LIMIT, async || {
        receiver.received("/hook").into_iter().next()
    })
    .await;
    assert!(hook.headers.contains_key("x-qiwu-signature"), "{hook:?}");
    let traceparent = hook
        .headers
        .get("traceparent")
        .unwrap_or_else(|| panic!("no traceparent on the delivery: {hook:?}"));
    let (trace, parent) = traceparent_ids(traceparent);

    // It names the attempt of the dispatch run that sent it, whose run
    // detail gives the same trace.
    let attempt = until("the dispatch attempt's span", LIMIT, async || {
        spans(&receiver).into_iter().find(|g| g.id() == parent)
    })
    .await;
    assert_eq!(attempt.trace(), trace);
    assert_eq!(
        attempt.attr("handler").as_deref(),
        Some("notify.dispatch"),
        "{attempt:?}"
    );
    // The sender writes its trace id with its end.
    let runs = runs_when(&p, dispatch, |runs| {
        runs.iter().any(|r| r["status"] == "success")
            && runs.iter().all(|r| r["status"] != "running")
    })
    .await;
    let mut sender = None;
    for run in &runs {
        let detail = run_detail(&p, run).await;
        if detail["traceId"] == trace.as_str() {
            sender = Some(detail);
        }
    }
    let sender = sender.unwrap_or_else(|| panic!("no dispatch run in trace {trace}: {runs:?}"));
    assert!(
        sender["output"]
            .as_str()
            .is_some_and(|o| o.contains("sent 1")),
        "{sender}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_job_lock_is_counted_and_is_an_event_of_the_fire() {
    let receiver = Receiver::start().await;
    let redis = Redis::start();
    let db = Database::fresh();
    db.migrate();
    let env = |instance: &str| {
        let mut env = cluster_env(&db, &redis, instance);
        env.extend(otel(format!("http://{}", receiver.addr), "http/protobuf"));
        env
    };
    let api = Proc::start("lock-api", &["api"], &env("lock-api"), &[]);
    let worker = Proc::start("lock-worker", &["worker"], &env("lock-worker-1"), &[]);
    until("the worker is ready", LIMIT, async || {
        let res = client().get(worker.url("/readyz")).send().await.ok()?;
        res.status().is_success().then_some(())
    })
    .await;
    // A long handler of a non-concurrent job holds the job's Redis lock.
    let job = common::create_job(
        &api,
        json!({"name": "long holder", "handler": "demo.echo", "cron": "0 0 0 1 1 *",
               "timeoutMs": 0, "params": {"delayMs": 120000}}),
    )
    .await;
    run_once(&api, job).await;

    let client_redis = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = client_redis
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let key = format!("qiwu:lock:job:{job}");
    let mut pttl = async || -> i64 {
        redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("PTTL")
    };
    // Taken, then renewed (its time to live goes up again).
    let mut lowest = until("the lock is taken", LIMIT, async || {
        let ttl = pttl().await;
        (ttl > 0).then_some(ttl)
    })
    .await;
    until("the lock is renewed", LIMIT, async || {
        let ttl = pttl().await;
        assert!(ttl > 0, "the lock went away: {ttl}");
        if ttl > lowest + 1000 {
            return Some(());
        }
        lowest = lowest.min(ttl);
        None
    })
    .await;
    // Someone else's now: the next renewal fails.
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("intruder#0")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let runs = ended_runs(&api, job, 1).await;
    assert_eq!(runs[0]["status"], "failed", "{runs:?}");
    let detail = run_detail(&api, &runs[0]).await;
    assert!(
        detail["error"]
            .as_str()
            .is_some_and(|e| e.contains("lock counts as lost")),
        "{detail}"
    );
    let holder: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(holder, "intruder#0", "the loser never frees the lock");

    let samples = until("the loss is counted", LIMIT, async || {
        let samples = metrics(&worker).await;
        (value(&samples, "qiwu_lock_lost_total", &[]) == Some(1.0)).then_some(samples)
    })
    .await;
    assert_eq!(
        value(
            &samples,
            "qiwu_runs_total",
            &[("handler", "demo.echo"), ("status", "failed")]
        ),
        Some(1.0)
    );

    // The fire's span holds the lock's story as events, in order.
    let trace = detail["traceId"].as_str().expect("traceId").to_string();
    let (request, fire) = until("the request's and the fire's spans", LIMIT, async || {
        let all = spans(&receiver);
        let of = |name: &str| {
            all.iter()
                .find(|g| g.trace() == trace && g.span.name == name)
                .cloned()
        };
        Some((of("POST /api/jobs/{id}/run")?, of("fire long holder")?))
    })
    .await;
    // Across processes: the api's request is the parent of the worker's
    // fire (through the fire's row in PostgreSQL).
    assert_eq!(fire.parent(), request.id());
    assert_eq!(
        request.resource.get("qiwu.role").map(String::as_str),
        Some("api")
    );
    assert_eq!(
        fire.resource.get("qiwu.role").map(String::as_str),
        Some("worker")
    );
    assert_eq!(
        fire.resource.get("service.instance.id").map(String::as_str),
        Some("lock-worker-1")
    );
    let events: Vec<&str> = fire
        .span
        .events
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| n.starts_with("lock."))
        .collect();
    assert_eq!(events.first(), Some(&"lock.acquired"), "{events:?}");
    assert_eq!(events.last(), Some(&"lock.lost"), "{events:?}");
    assert!(
        events.len() >= 3
            && events[1..events.len() - 1]
                .iter()
                .all(|e| *e == "lock.renewed"),
        "{events:?}"
    );
    for event in fire
        .span
        .events
        .iter()
        .filter(|e| e.name.starts_with("lock."))
    {
        let job_id = event.attributes.iter().find(|kv| kv.key == "job.id");
        assert_eq!(
            job_id.and_then(|kv| kv.value.as_ref()?.value.clone()),
            Some(AnyValue::IntValue(job)),
            "{event:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_never_answers_holds_up_no_fire_and_drops_are_counted() {
    // Takes connections and never answers them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let receiver = Receiver::start().await;
    let mut env = otel(format!("http://{silent_addr}"), "http/protobuf");
    env.extend([
        ("OTEL_BSP_MAX_QUEUE_SIZE", "2".to_string()),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1".to_string()),
        ("OTEL_BSP_EXPORT_TIMEOUT", "120000".to_string()),
    ]);
    let p = serve_with(&receiver, &env);
    let job = create_job(&p, "unhindered", "demo.echo", "0 0 0 1 1 *").await;
    for n in 1..=5 {
        run_once(&p, job).await;
        let runs = ended_runs(&p, job, n).await;
        assert_eq!(runs[0]["status"], "success", "{runs:?}");
        let at = |field: &str| {
            chrono::DateTime::parse_from_rfc3339(runs[0][field].as_str().expect(field))
                .expect("a time")
        };
        let lag = at("startedAt") - at("scheduledAt");
        assert!(
            lag < chrono::Duration::seconds(5),
            "lag {lag} with the collector stuck"
        );
    }
    // The first export still waits for its answer: later spans found the
    // queue full and were dropped, and counted.
    let dropped = until("the dropped spans are counted", LIMIT, async || {
        let samples = metrics(&p).await;
        value(
            &samples,
            "qiwu_trace_spans_dropped_total",
            &[("reason", "queue_full")],
        )
        .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(dropped >= 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sampler_variables_are_obeyed() {
    let receiver = Receiver::start().await;
    let mut env = otel(format!("http://{}", receiver.addr), "http/protobuf");
    env.push(("OTEL_TRACES_SAMPLER", "always_off".into()));
    let p = serve_with(&receiver, &env);
    let job = create_job(&p, "sampled out", "demo.echo", "0 0 0 1 1 *").await;
    run_once(&p, job).await;
    let runs = ended_runs(&p, job, 1).await;
    assert_eq!(runs[0]["status"], "success", "{runs:?}");
    let detail = run_detail(&p, &runs[0]).await;
    assert_eq!(detail["traceId"], Value::Null, "not sampled: {detail}");
    assert!(
        spans(&receiver)
            .iter()
            .all(|g| !g.span.name.starts_with("fire ")),
        "a fire was exported"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn overlapping_fires_are_counted_as_skips_the_run_log_agrees_with() {
    let receiver = Receiver::start().await;
    let p = serve(&receiver, false);
    // Runs 2.5 s every second and never overlaps itself.
    let job = common::create_job(
        &p,
        json!({"name": "overlapping", "handler": "demo.echo", "cron": "* * * * * *",
               "params": {"delayMs": 2500}}),
    )
    .await;
    runs_when(&p, job, |runs| {
        runs.iter().filter(|r| r["status"] == "skipped").count() >= 2
            && runs.iter().any(|r| r["status"] == "success")
    })
    .await;
    let res = client()
        .put(p.url(&format!("/api/jobs/{job}/enabled")))
        .bearer_auth(admin_token())
        .json(&json!({"enabled": false}))
        .send()
        .await
        .expect("disable");
    assert!(res.status().is_success());
    // Once nothing runs (a claim under way at the switch may still land),
    // the counters equal the run log's records.
    let samples = until("the counters agree with the run log", LIMIT, async || {
        let runs = runs_when(&p, job, |runs| {
            runs.iter().all(|r| r["status"] != "running")
        })
        .await;
        let count = |status: &str| runs.iter().filter(|r| r["status"] == status).count() as f64;
        let samples = metrics(&p).await;
        let runs_total = |status: &str| {
            value(
                &samples,
                "qiwu_runs_total",
                &[("handler", "demo.echo"), ("status", status)],
            )
        };
        let durations = value(
            &samples,
            "qiwu_run_duration_seconds_count",
            &[("handler", "demo.echo")],
        );
        // Only what ran the handler has a duration.
        (runs_total("success") == Some(count("success"))
            && runs_total("skipped") == Some(count("skipped"))
            && durations == Some(count("success")))
        .then_some(samples)
    })
    .await;
    assert!(
        value(
            &samples,
            "qiwu_fires_total",
            &[("trigger", "schedule"), ("outcome", "skipped_overlap")]
        )
        .is_some_and(|n| n >= 1.0),
        "no skipped_overlap"
    );
}
