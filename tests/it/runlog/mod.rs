//! Black-box tests of the run log, the audit log and the Excel exports: the
//! real binary on a fresh database. The execution engine is not what is
//! tested here, so runs are written straight into the server's database
//! through the storage crate.

use std::io::Read;

use crate::common;
use crate::common::{Db, Server, admin_token, audit, client, delete, get, post, put, token};
use chrono::{DateTime, TimeZone, Utc};
use qiwu_storage::Store;
use qiwu_storage::entity::run;
use reqwest::StatusCode;
use sea_orm::{ActiveValue::NotSet, ActiveValue::Set, EntityTrait};
use serde_json::{Value, json};

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

const XLSX: &str = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet";

/// 2025-11-25T00:00:00Z.
const T0: i64 = 1_764_028_800_000;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

struct Reply {
    status: StatusCode,
    content_type: String,
    headers: reqwest::header::HeaderMap,
    bytes: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.bytes).into()))
    }
}

async fn call(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    token: Option<&str>,
    lang: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut req = client().request(method, server.url(path));
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
    let headers = resp.headers().clone();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = resp.bytes().await.expect("body").to_vec();
    Reply {
        status,
        content_type,
        headers,
        bytes,
    }
}

/// The server's own database, opened beside it.
async fn open_store(server: &Server) -> Store {
    let url = match &server.database {
        None => format!("sqlite://{}", server.dir.path().join("qiwu.db").display()),
        Some((Db::Postgres, name)) => format!(
            "{}/{name}",
            std::env::var("QIWU_TEST_POSTGRES_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
        ),
        Some((_, name)) => format!(
            "{}/{name}",
            std::env::var("QIWU_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
        ),
    };
    Store::connect(&url)
        .await
        .expect("open the server's database")
}

/// A run as the execution engine would write it.
#[derive(Clone)]
struct NewRun {
    job_id: i64,
    job_name: String,
    handler: String,
    status: String,
    started_at: i64,
    output: String,
    error: String,
    deleted: bool,
}

impl NewRun {
    fn new(job_id: i64, job_name: &str, started_at: i64) -> NewRun {
        NewRun {
            job_id,
            job_name: job_name.into(),
            handler: "demo.echo".into(),
            status: "success".into(),
            started_at,
            output: format!("hello from {job_name}"),
            error: String::new(),
            deleted: false,
        }
    }

    fn status(mut self, s: &str) -> NewRun {
        self.status = s.into();
        self
    }

    fn handler(mut self, h: &str) -> NewRun {
        self.handler = h.into();
        self
    }
}

/// Inserts the runs; returns their ids in insertion order.
async fn insert_runs(store: &Store, runs: &[NewRun]) -> Vec<i64> {
    let mut ids = Vec::with_capacity(runs.len());
    for (i, r) in runs.iter().enumerate() {
        let model = run::ActiveModel {
            id: NotSet,
            // Unique per (fire, attempt), as the engine's claims make them.
            fire_id: Set((common::rand_u64() >> 2) as i64 + i as i64),
            job_id: Set(r.job_id),
            job_name: Set(r.job_name.clone()),
            handler: Set(r.handler.clone()),
            trigger: Set("schedule".into()),
            scheduled_at: Set(r.started_at - 5),
            attempt: Set(1),
            status: Set(r.status.clone()),
            started_at: Set(r.started_at),
            finished_at: Set((r.status != "running").then_some(r.started_at + 20)),
            duration_ms: Set((r.status != "running").then_some(20)),
            instance: Set("test-host-1".into()),
            output: Set(r.output.clone()),
            error: Set(r.error.clone()),
            swept_at: Set(None),
            deleted_at: Set(r.deleted.then_some(r.started_at + 1)),
            trace_id: Set(None),
            cancel_requested_at: Set(None),
            cancelled_by: Set(None),
        };
        let res = run::Entity::insert(model)
            .exec(store.connection())
            .await
            .expect("insert run");
        ids.push(res.last_insert_id);
    }
    ids
}

/// Every run the list returns for `query`, following `nextCursor`.
async fn all_pages(server: &Server, token: &str, query: &str, limit: u32) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let mut path = format!("/api/runs?limit={limit}");
        if !query.is_empty() {
            path.push('&');
            path.push_str(query);
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = get(server, &path, token).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        let items = page["items"].as_array().expect("items").clone();
        assert!(items.len() <= limit as usize);
        out.extend(items);
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
    panic!("paging did not end");
}

fn ids(items: &[Value]) -> Vec<i64> {
    items.iter().filter_map(|r| r["id"].as_i64()).collect()
}

fn ms(t: &Value) -> i64 {
    DateTime::parse_from_rfc3339(t.as_str().expect("time"))
        .expect("RFC 3339")
        .timestamp_millis()
}

async fn create_job(server: &Server, token: &str, name: &str) -> Value {
    let (status, job) = post(
        server,
        "/api/jobs",
        token,
        json!({"name": name, "handler": "demo.echo", "cron": "0 0 3 * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    job
}

mod access;
mod audit_log;
mod exports;
mod list;
