//! Calls to a running server's HTTP API that many test modules make: one
//! request with an optional token, language and JSON body, creating a job
//! and running it once as the super admin, and the field names of a 400.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{Server, admin_token, client};

/// Something that answers HTTP: a server, another test process, or a
/// base URL such as `http://127.0.0.1:1234`.
pub trait Base {
    /// The full URL of `path` (which starts with `/`).
    fn at(&self, path: &str) -> String;
}

impl Base for Server {
    fn at(&self, path: &str) -> String {
        self.url(path)
    }
}

impl Base for crate::observe::Proc {
    fn at(&self, path: &str) -> String {
        self.url(path)
    }
}

impl Base for str {
    fn at(&self, path: &str) -> String {
        format!("{self}{path}")
    }
}

impl Base for String {
    fn at(&self, path: &str) -> String {
        format!("{self}{path}")
    }
}

/// Sends one request and returns the status and the body as JSON (a body
/// that is not JSON comes back as a JSON string, so a test can show it).
pub async fn send(
    method: Method,
    url: String,
    token: Option<&str>,
    lang: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = client().request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(l) = lang {
        req = req.header("Accept-Language", l);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `POST /api/jobs` as the super admin: asserts 201 and returns the job's id.
pub async fn create_job<B: Base + ?Sized>(base: &B, body: Value) -> i64 {
    let (status, job) = send(
        Method::POST,
        base.at("/api/jobs"),
        Some(&admin_token()),
        None,
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    job["id"].as_i64().expect("id")
}

/// `POST /api/jobs/{job}/run` as the super admin with no body: asserts 202
/// and returns the answer (its `fireId`).
pub async fn run_once<B: Base + ?Sized>(base: &B, job: i64) -> Value {
    let (status, answer) = send(
        Method::POST,
        base.at(&format!("/api/jobs/{job}/run")),
        Some(&admin_token()),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    answer
}

/// The `field` of each error a 400 problem lists, in its order.
pub fn fields(problem: &Value) -> Vec<String> {
    problem["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e["field"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The wall clock in Unix milliseconds, as the run log stores times.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `GET path` with a token.
pub async fn get<B: Base + ?Sized>(base: &B, path: &str, token: &str) -> (StatusCode, Value) {
    send(Method::GET, base.at(path), Some(token), None, None).await
}

/// `POST path` with a token and a JSON body.
pub async fn post<B: Base + ?Sized>(
    base: &B,
    path: &str,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    send(Method::POST, base.at(path), Some(token), None, Some(body)).await
}

/// `PUT path` with a token and a JSON body.
pub async fn put<B: Base + ?Sized>(
    base: &B,
    path: &str,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    send(Method::PUT, base.at(path), Some(token), None, Some(body)).await
}

/// `DELETE path` with a token.
pub async fn delete<B: Base + ?Sized>(base: &B, path: &str, token: &str) -> (StatusCode, Value) {
    send(Method::DELETE, base.at(path), Some(token), None, None).await
}

/// The audit entries matching `query` (such as `action=job.create`),
/// newest first, read as the super admin.
pub async fn audit<B: Base + ?Sized>(base: &B, query: &str) -> Vec<Value> {
    let (status, page) = get(
        base,
        &format!("/api/audit-logs?limit=100&{query}"),
        &admin_token(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"].as_array().expect("items").clone()
}
