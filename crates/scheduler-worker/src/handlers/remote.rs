//! Handlers that live in other services (SPEC §7.1): each attempt is one
//! signed HTTP POST to the service that owns the work.
//!
//! The body is `{"job": {"id", "name"}, "fireId", "attempt", "deadline",
//! "params"}` (`deadline` RFC 3339, or null for no limit). The headers carry
//! `X-Qiwu-Timestamp` (Unix seconds) and `X-Qiwu-Signature` (`sha256=` and
//! the hex HMAC-SHA256 of `{timestamp}.{body}`, the webhook's scheme), plus
//! `X-Qiwu-Job`, `X-Qiwu-Fire` and `X-Qiwu-Attempt`, and `traceparent`
//! (the attempt's span) while tracing. While a secret is
//! rotated the signature header lists one signature per secret (see
//! `signing`). A 2xx answer's body is
//! the run's return value; anything else fails the attempt. The request
//! times out at the attempt's deadline and is dropped at once when the
//! handler is told to stop.

use std::sync::Arc;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::dispatch::describe;
use super::signing::SigningSecrets;
use super::{Handler, HandlerFuture};
use crate::context::{MAX_OUTPUT_CHARS, RunContext, cut};
use crate::error::WorkerError;

/// The URL type [`RemoteHandler::new`] takes, so callers need no HTTP crate.
pub use reqwest::Url;

pub const TIMESTAMP_HEADER: &str = "X-Qiwu-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Qiwu-Signature";
pub const JOB_HEADER: &str = "X-Qiwu-Job";
pub const FIRE_HEADER: &str = "X-Qiwu-Fire";
pub const ATTEMPT_HEADER: &str = "X-Qiwu-Attempt";

/// A host that does not even accept the connection fails fast, whatever
/// the job's timeout (or when it has none).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a 2xx answer kept: the output limit in the widest UTF-8, so
/// the executor's cut sees everything it keeps and memory stays bounded.
const MAX_ANSWER_BYTES: usize = MAX_OUTPUT_CHARS * 4;
/// Characters of a failed answer's body quoted in the run's error.
const ERROR_BODY_CHARS: usize = 1000;

/// The HTTP client every remote handler shares (one connection pool).
/// Redirects are not followed: a signed call goes where it was declared.
pub fn client() -> Result<reqwest::Client, WorkerError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("qiwu-scheduler/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| WorkerError::HttpClient(describe(e)))
}

/// A handler declared by the operator that calls `url`, signing with `secret`.
pub struct RemoteHandler {
    inner: Arc<Target>,
}

struct Target {
    url: Url,
    secret: SigningSecrets,
    client: reqwest::Client,
    /// `host[:port]`: what logs and errors name instead of the whole URL,
    /// which may carry a token in its path or query.
    host: String,
}

impl RemoteHandler {
    pub fn new(
        url: Url,
        secret: impl Into<SigningSecrets>,
        client: reqwest::Client,
    ) -> RemoteHandler {
        let host = host_of(&url);
        RemoteHandler {
            inner: Arc::new(Target {
                url,
                secret: secret.into(),
                client,
                host,
            }),
        }
    }

    /// The `host[:port]` this handler calls.
    pub fn host(&self) -> &str {
        &self.inner.host
    }
}

/// `host` or `host:port` when the URL names a port.
pub fn host_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

impl Handler for RemoteHandler {
    fn run(&self, params: Map<String, Value>, ctx: RunContext) -> HandlerFuture {
        let target = self.inner.clone();
        Box::pin(async move { call(&target, params, ctx).await })
    }
}

/// The JSON body of one call.
fn body_of(params: Map<String, Value>, ctx: &RunContext) -> String {
    json!({
        "job": {"id": ctx.job_id, "name": ctx.job_name},
        "fireId": ctx.fire_id,
        "attempt": ctx.attempt,
        "deadline": ctx.deadline.map(|d| d.to_rfc3339_opts(SecondsFormat::Millis, false)),
        "params": params,
    })
    .to_string()
}

/// One attempt: the signed POST, raced against the stop signal.
async fn call(
    target: &Target,
    params: Map<String, Value>,
    mut ctx: RunContext,
) -> Result<String, String> {
    let host = &target.host;
    let body = body_of(params, &ctx);
    let timestamp = Utc::now().timestamp().to_string();
    let mut request = target
        .client
        .post(target.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(TIMESTAMP_HEADER, &timestamp)
        .header(
            SIGNATURE_HEADER,
            target.secret.header_value(&timestamp, &body),
        )
        .header(JOB_HEADER, ctx.job_id.to_string())
        .header(FIRE_HEADER, ctx.fire_id.to_string())
        .header(ATTEMPT_HEADER, ctx.attempt.to_string())
        .body(body);
    // The receiver can join the attempt's trace (W3C Trace Context).
    if let Some(parent) = qiwu_telemetry::trace::traceparent(&tracing::Span::current()) {
        request = request.header("traceparent", parent);
    }
    if let Some(deadline) = ctx.deadline {
        // The executor times the attempt out too; this bounds the request
        // itself, so nothing is left in flight past the deadline.
        match (deadline - Utc::now()).to_std() {
            Ok(left) if !left.is_zero() => request = request.timeout(left),
            _ => {
                ctx.log
                    .line(format!("POST {host}: not sent, the deadline had passed"));
                return Err(format!(
                    "the deadline {} passed before {host} could be called",
                    deadline.to_rfc3339_opts(SecondsFormat::Millis, false)
                ));
            }
        }
    }
    let exchange = async {
        let response = request.send().await?;
        let status = response.status();
        let limit = if status.is_success() {
            MAX_ANSWER_BYTES
        } else {
            ERROR_BODY_CHARS * 4
        };
        let text = read_capped(response, limit).await?;
        Ok::<_, reqwest::Error>((status, text))
    };
    let outcome = tokio::select! {
        // A stop that is already there wins over an answer arriving with it.
        biased;
        reason = ctx.stop.stopped() => {
            ctx.log.line(format!("POST {host}: abandoned, told to stop ({reason:?})"));
            return Err(format!("stopped ({reason:?}) while waiting for {host}"));
        }
        outcome = exchange => outcome,
    };
    match outcome {
        Ok((status, text)) if status.is_success() => {
            ctx.log.line(format!("POST {host}: HTTP {status}"));
            Ok(text)
        }
        Ok((status, text)) => {
            ctx.log.line(format!("POST {host}: HTTP {status}"));
            let text = cut(text.trim(), ERROR_BODY_CHARS);
            if text.is_empty() {
                Err(format!("{host} answered HTTP {status}"))
            } else {
                Err(format!("{host} answered HTTP {status}: {text}"))
            }
        }
        Err(e) if e.is_timeout() => {
            ctx.log
                .line(format!("POST {host}: no answer before the deadline"));
            Err(format!(
                "{host} did not answer before the deadline: {}",
                describe(e)
            ))
        }
        Err(e) => {
            ctx.log.line(format!("POST {host}: no answer"));
            Err(format!("cannot call {host}: {}", describe(e)))
        }
    }
}

/// The answer's body as text, at most `limit` bytes of it; the rest is
/// never read.
async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<String, reqwest::Error> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit.saturating_sub(bytes.len());
        bytes.extend_from_slice(chunk.get(..room).unwrap_or(&chunk[..]));
        if bytes.len() >= limit {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use chrono::DateTime;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::context::{LogSink, StopReason, Stopper, stop_pair};
    use crate::handlers::signing::signature;

    const SECRET: &str = "remote-secret-0123456789";

    /// One request as the receiver saw it.
    #[derive(Debug, Clone)]
    struct Received {
        request_line: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Received {
        fn header(&self, name: &str) -> &str {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map_or("", |(_, v)| v.as_str())
        }
    }

    /// A tiny HTTP/1.1 receiver on 127.0.0.1:0 that answers every request
    /// with `status` and `body` after `delay`.
    struct Receiver {
        url: Url,
        seen: Arc<Mutex<Vec<Received>>>,
    }

    impl Receiver {
        async fn start(status: u16, body: String, delay: Duration) -> Receiver {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = Url::parse(&format!(
                "http://{}/jobs/session-sweep?token=t0ken",
                listener.local_addr().unwrap()
            ))
            .unwrap();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let record = seen.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        return;
                    };
                    let record = record.clone();
                    let body = body.clone();
                    tokio::spawn(async move {
                        let Some(req) = read_request(&mut socket).await else {
                            return;
                        };
                        record.lock().unwrap().push(req);
                        tokio::time::sleep(delay).await;
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(answer.as_bytes()).await;
                    });
                }
            });
            Receiver { url, seen }
        }

        fn seen(&self) -> Vec<Received> {
            self.seen.lock().unwrap().clone()
        }

        async fn wait_for_a_request(&self) {
            for _ in 0..500 {
                if !self.seen().is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("no request arrived");
        }
    }

    async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.lines();
        let request_line = lines.next()?.to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_string(), v.trim().to_string()))
            })
            .collect();
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let n = socket.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(Received {
            request_line,
            headers,
            body: String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string(),
        })
    }

    fn context(deadline: Option<DateTime<Utc>>) -> (Stopper, RunContext) {
        let (stopper, stop) = stop_pair();
        (
            stopper,
            RunContext {
                job_id: 7,
                job_name: "清理过期在线会话".into(),
                fire_id: 42,
                attempt: 2,
                deadline,
                stop,
                log: LogSink::default(),
            },
        )
    }

    fn handler(url: &Url) -> RemoteHandler {
        RemoteHandler::new(url.clone(), SECRET, client().unwrap())
    }

    fn params() -> Map<String, Value> {
        let Value::Object(params) = json!({"batch": 500}) else {
            unreachable!()
        };
        params
    }

    #[tokio::test]
    async fn a_signed_call_whose_2xx_body_is_the_return_value() {
        let receiver = Receiver::start(200, "swept 3 sessions".into(), Duration::ZERO).await;
        let deadline = Utc::now() + chrono::Duration::seconds(30);
        let (_stopper, ctx) = context(Some(deadline));
        let log = ctx.log.clone();
        let remote = handler(&receiver.url);

        let result = remote.run(params(), ctx).await;
        assert_eq!(result, Ok("swept 3 sessions".to_string()));

        let seen = receiver.seen();
        assert_eq!(seen.len(), 1);
        let req = &seen[0];
        assert_eq!(
            req.request_line,
            "POST /jobs/session-sweep?token=t0ken HTTP/1.1"
        );
        let timestamp = req.header("x-qiwu-timestamp");
        let sent_at: i64 = timestamp.parse().unwrap();
        assert!((Utc::now().timestamp() - sent_at).abs() <= 5, "{timestamp}");
        assert_eq!(
            req.header("x-qiwu-signature"),
            signature(SECRET, timestamp, &req.body)
        );
        assert_eq!(req.header("x-qiwu-job"), "7");
        assert_eq!(req.header("x-qiwu-fire"), "42");
        assert_eq!(req.header("x-qiwu-attempt"), "2");
        assert_eq!(req.header("content-type"), "application/json");
        let body: Value = serde_json::from_str(&req.body).unwrap();
        assert_eq!(
            body,
            json!({
                "job": {"id": 7, "name": "清理过期在线会话"},
                "fireId": 42,
                "attempt": 2,
                "deadline": deadline.to_rfc3339_opts(SecondsFormat::Millis, false),
                "params": {"batch": 500},
            })
        );
        let host = receiver.url.authority().to_string();
        assert_eq!(remote.host(), host);
        assert_eq!(log.contents(), format!("POST {host}: HTTP 200 OK\n"));
        assert!(!log.contents().contains("t0ken"), "only the host is logged");
    }

    #[tokio::test]
    async fn no_deadline_is_sent_as_null() {
        let receiver = Receiver::start(204, String::new(), Duration::ZERO).await;
        let (_stopper, ctx) = context(None);
        assert_eq!(
            handler(&receiver.url).run(Map::new(), ctx).await,
            Ok(String::new())
        );
        let body: Value = serde_json::from_str(&receiver.seen()[0].body).unwrap();
        assert_eq!(body["deadline"], Value::Null);
        assert_eq!(body["params"], json!({}));
    }

    #[tokio::test]
    async fn a_non_2xx_answer_fails_with_the_status_and_the_start_of_the_body() {
        let cases = [
            (500, "x".repeat(3000), "500 Internal Server Error"),
            (404, String::new(), "404 Not Found"),
            (302, "elsewhere".into(), "302 Found"),
        ];
        for (status, body, status_text) in cases {
            let receiver = Receiver::start(status, body.clone(), Duration::ZERO).await;
            let (_stopper, ctx) = context(None);
            let log = ctx.log.clone();
            let err = handler(&receiver.url).run(params(), ctx).await.unwrap_err();
            let host = receiver.url.authority().to_string();
            let want = match body.len().min(ERROR_BODY_CHARS) {
                0 => format!("{host} answered HTTP {status_text}"),
                n => format!("{host} answered HTTP {status_text}: {}", &body[..n]),
            };
            assert_eq!(err, want, "{status}");
            assert_eq!(
                log.contents(),
                format!("POST {host}: HTTP {status_text}\n"),
                "{status}"
            );
        }
    }

    #[tokio::test]
    async fn a_stop_abandons_the_call_at_once() {
        let receiver = Receiver::start(200, "late".into(), Duration::from_secs(3600)).await;
        let (stopper, ctx) = context(None);
        let log = ctx.log.clone();
        let run = tokio::spawn(handler(&receiver.url).run(params(), ctx));
        receiver.wait_for_a_request().await;
        let started = std::time::Instant::now();
        stopper.stop(StopReason::Timeout);
        let err = run.await.unwrap().unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert!(
            err.starts_with("stopped (Timeout) while waiting for 127.0.0.1:"),
            "{err}"
        );
        assert!(log.contents().contains("abandoned"), "{}", log.contents());
    }

    #[tokio::test]
    async fn the_request_times_out_at_the_deadline() {
        let receiver = Receiver::start(200, "late".into(), Duration::from_secs(3600)).await;
        let (_stopper, ctx) = context(Some(Utc::now() + chrono::Duration::milliseconds(300)));
        let started = std::time::Instant::now();
        let err = handler(&receiver.url).run(params(), ctx).await.unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert!(err.contains("did not answer before the deadline"), "{err}");
        assert_eq!(receiver.seen().len(), 1);
    }

    #[tokio::test]
    async fn a_deadline_already_passed_sends_nothing() {
        let receiver = Receiver::start(200, "ok".into(), Duration::ZERO).await;
        let (_stopper, ctx) = context(Some(Utc::now() - chrono::Duration::seconds(1)));
        let err = handler(&receiver.url).run(params(), ctx).await.unwrap_err();
        assert!(err.contains("passed before"), "{err}");
        assert!(receiver.seen().is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_service_fails_naming_only_its_host() {
        // Bind then drop: nothing listens on that port any more.
        let addr = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let url = Url::parse(&format!("http://{addr}/hook?token=t0ken")).unwrap();
        let (_stopper, ctx) = context(None);
        let log = ctx.log.clone();
        let err = handler(&url).run(params(), ctx).await.unwrap_err();
        assert!(err.starts_with(&format!("cannot call {addr}: ")), "{err}");
        for text in [&err, &log.contents()] {
            assert!(!text.contains(SECRET), "{text}");
            assert!(!text.contains("t0ken"), "{text}");
        }
        assert_eq!(log.contents(), format!("POST {addr}: no answer\n"));
    }

    #[tokio::test]
    async fn a_huge_answer_is_read_only_as_far_as_the_output_can_hold() {
        let receiver = Receiver::start(200, "y".repeat(200_000), Duration::ZERO).await;
        let (_stopper, ctx) = context(None);
        let out = handler(&receiver.url).run(params(), ctx).await.unwrap();
        assert_eq!(out.len(), MAX_ANSWER_BYTES);
        assert!(out.chars().count() >= MAX_OUTPUT_CHARS);
    }

    #[test]
    fn hosts_name_the_port_only_when_the_url_does() {
        let cases = [
            (
                "http://sessions.internal:8080/jobs/x",
                "sessions.internal:8080",
            ),
            ("https://wf.internal/remind?key=secret", "wf.internal"),
            ("http://user:pw@10.0.0.1:81/", "10.0.0.1:81"),
        ];
        for (url, want) in cases {
            assert_eq!(host_of(&Url::parse(url).unwrap()), want, "{url}");
        }
    }
}
