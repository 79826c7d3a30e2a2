//! Black-box tests of the run log, the audit log and the Excel exports: the
//! real binary on a fresh database. The execution engine is not what is
//! tested here, so runs are written straight into the server's database
//! through the storage crate.

use std::io::Read;

use crate::common;
use crate::common::{Db, Server, admin_token, client, token};
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

async fn get(server: &Server, path: &str, token: &str) -> (StatusCode, Value) {
    let r = call(reqwest::Method::GET, server, path, Some(token), None, None).await;
    (r.status, r.json())
}

async fn post(server: &Server, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let r = call(
        reqwest::Method::POST,
        server,
        path,
        Some(token),
        None,
        Some(body),
    )
    .await;
    (r.status, r.json())
}

async fn put(server: &Server, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let r = call(
        reqwest::Method::PUT,
        server,
        path,
        Some(token),
        None,
        Some(body),
    )
    .await;
    (r.status, r.json())
}

async fn delete(server: &Server, path: &str, token: &str) -> (StatusCode, Value) {
    let r = call(
        reqwest::Method::DELETE,
        server,
        path,
        Some(token),
        None,
        None,
    )
    .await;
    (r.status, r.json())
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

/// A file of an .xlsx (a zip archive), as text.
fn xlsx_part(bytes: &[u8], name: &str) -> String {
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).expect("an .xlsx is a zip");
    let mut part = archive
        .by_name(name)
        .unwrap_or_else(|_| panic!("{name} is in the workbook"));
    let mut text = String::new();
    part.read_to_string(&mut text).expect("utf-8");
    text
}

/// The value of cell `cell` (such as `J2`) in the first worksheet.
fn cell_value(sheet_xml: &str, cell: &str) -> Option<String> {
    let start = sheet_xml.find(&format!("r=\"{cell}\""))?;
    let rest = &sheet_xml[start..];
    let end_of_cell = rest.find("</c>")?;
    let v = rest[..end_of_cell].find("<v>")? + 3;
    let v_end = rest[..end_of_cell].find("</v>")?;
    Some(rest[v..v_end].to_string())
}

/// Checks an export answer and returns (shared strings, first sheet).
fn open_export(reply: &Reply, prefix: &str) -> (String, String) {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    assert_eq!(reply.content_type, XLSX);
    let disposition = reply
        .headers
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .expect("Content-Disposition")
        .to_string();
    // attachment; filename="jobs-20251125-080000.xlsx"
    let name = disposition
        .strip_prefix("attachment; filename=\"")
        .and_then(|s| s.strip_suffix(".xlsx\""))
        .unwrap_or_else(|| panic!("{disposition}"));
    let stamp = name
        .strip_prefix(&format!("{prefix}-"))
        .unwrap_or_else(|| panic!("{disposition}"));
    assert_eq!(stamp.len(), 15, "{disposition}");
    assert!(
        stamp
            .chars()
            .enumerate()
            .all(|(i, c)| if i == 8 { c == '-' } else { c.is_ascii_digit() }),
        "{disposition}"
    );
    assert_eq!(&reply.bytes[..2], b"PK", "a zip archive");
    let strings = xlsx_part(&reply.bytes, "xl/sharedStrings.xml");
    let sheet = xlsx_part(&reply.bytes, "xl/worksheets/sheet1.xml");
    // Header row frozen, header bold.
    assert!(sheet.contains("state=\"frozen\""), "frozen first row");
    assert!(sheet.contains("<cols>"), "column widths");
    let styles = xlsx_part(&reply.bytes, "xl/styles.xml");
    assert!(styles.contains("<b/>"), "a bold style");
    (strings, sheet)
}

fn sheet_rows(sheet: &str) -> usize {
    sheet.matches("<row ").count()
}

/// The Excel serial number of a wall-clock time (days since 1899-12-30).
fn excel_serial(y: i32, m: u32, d: u32, h: u32, mi: u32, s: u32) -> f64 {
    let t = Utc
        .with_ymd_and_hms(y, m, d, h, mi, s)
        .single()
        .expect("time");
    let base = Utc
        .with_ymd_and_hms(1899, 12, 30, 0, 0, 0)
        .single()
        .expect("base");
    (t - base).num_seconds() as f64 / 86_400.0
}

// ---------------------------------------------------------------------------
// Paging and soft delete, on every database
// ---------------------------------------------------------------------------

async fn paging_and_soft_delete(db: Db) {
    let server = Server::start_with(db, &[]);
    // The seeded every-minute jobs would add runs of their own.
    common::quiet_run_log(&server).await;
    let store = open_store(&server).await;
    let reader = token(&["scheduler.run.browse", "scheduler.run.view"]);
    let remover = token(&["scheduler.run.remove"]);

    // 250 runs of three jobs, out of time order, with ties on the start
    // time so that ids must break them.
    let runs: Vec<NewRun> = (0..250i64)
        .map(|i| {
            NewRun::new(
                1 + i % 3,
                &format!("job-{}", i % 3),
                T0 + ((i * 37) % 250) / 4 * 1000,
            )
        })
        .collect();
    insert_runs(&store, &runs).await;

    let all = all_pages(&server, &reader, "", 20).await;
    assert_eq!(all.len(), 250, "every run once");
    let keys: Vec<(i64, i64)> = all
        .iter()
        .map(|r| (ms(&r["startedAt"]), r["id"].as_i64().expect("id")))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(keys, sorted, "newest first, no duplicates");
    // Another page size walks the same sequence; the default is 20.
    assert_eq!(ids(&all_pages(&server, &reader, "", 100).await), ids(&all));
    let (_, first) = get(&server, "/api/runs", &reader).await;
    assert_eq!(first["items"].as_array().map(Vec::len), Some(20));
    assert!(first["nextCursor"].is_string());
    // The summary carries the run's fields but not its output.
    let top = &all[0];
    for field in [
        "id",
        "fireId",
        "jobId",
        "jobName",
        "handler",
        "trigger",
        "scheduledAt",
        "attempt",
        "status",
        "startedAt",
        "finishedAt",
        "durationMs",
        "instance",
    ] {
        assert!(top.get(field).is_some(), "{field} in {top}");
    }
    assert!(top.get("output").is_none());

    // Delete one: gone from the list and the detail at once.
    let victim = ids(&all)[0];
    let (status, detail) = get(&server, &format!("/api/runs/{victim}"), &reader).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let (status, _) = delete(&server, &format!("/api/runs/{victim}"), &remover).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, problem) = get(&server, &format!("/api/runs/{victim}"), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    let (status, _) = delete(&server, &format!("/api/runs/{victim}"), &remover).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a deleted run is gone");
    let left = all_pages(&server, &reader, "", 50).await;
    assert_eq!(left.len(), 249);
    assert!(!ids(&left).contains(&victim));

    // Delete many (unknown and repeated ids are ignored).
    let batch: Vec<i64> = ids(&left)[..30].to_vec();
    let mut body = batch.clone();
    body.extend([batch[0], 999_999_999]);
    let (status, _) = post(
        &server,
        "/api/runs/batch-delete",
        &remover,
        json!({ "ids": body }),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let left = all_pages(&server, &reader, "", 100).await;
    assert_eq!(left.len(), 219);
    assert!(batch.iter().all(|id| !ids(&left).contains(id)));
    let (status, _) = get(&server, &format!("/api/runs/{}", batch[5]), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Clear: nothing is left.
    let (status, _) = post(&server, "/api/runs/clear", &remover, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, page) = get(&server, "/api/runs", &reader).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page, json!({"items": [], "nextCursor": null}));
    let (status, _) = get(&server, &format!("/api/runs/{}", ids(&left)[0]), &reader).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    store.connection().clone().close().await.ok();
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_sqlite() {
    paging_and_soft_delete(Db::Sqlite).await;
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_postgres() {
    paging_and_soft_delete(Db::Postgres).await;
}

#[tokio::test]
async fn run_log_paging_and_soft_delete_on_mariadb() {
    paging_and_soft_delete(Db::MySql).await;
}

// ---------------------------------------------------------------------------
// Filters, detail, recent runs
// ---------------------------------------------------------------------------

#[tokio::test]
async fn run_list_filters() {
    let server = Server::start();
    let store = open_store(&server).await;
    let reader = token(&["scheduler.run.browse"]);
    insert_runs(
        &store,
        &[
            NewRun::new(1, "Nightly Report", T0),
            NewRun::new(1, "Nightly Report", T0 + 60_000).status("failed"),
            NewRun::new(2, "100% done", T0 + 120_000).status("timeout"),
            NewRun::new(3, "清理过期日志", T0 + 180_000)
                .status("skipped")
                .handler("audit.purge"),
            NewRun::new(4, "echo v2", T0 + 240_000)
                .status("running")
                .handler("demo.echo.v2"),
            NewRun {
                deleted: true,
                ..NewRun::new(1, "Nightly Report", T0 + 300_000)
            },
        ],
    )
    .await;
    let names = |items: Vec<Value>| -> Vec<String> {
        items
            .iter()
            .filter_map(|r| r["jobName"].as_str().map(str::to_string))
            .collect()
    };
    let list = |q: &'static str| {
        let server = &server;
        let reader = reader.clone();
        async move { all_pages(server, &reader, q, 100).await }
    };
    assert_eq!(list("").await.len(), 5, "deleted runs never show");
    assert_eq!(
        names(list("jobId=1").await),
        ["Nightly Report", "Nightly Report"]
    );
    assert_eq!(
        names(list("jobName=nIGHTLY").await),
        ["Nightly Report", "Nightly Report"]
    );
    assert_eq!(names(list("jobName=0%25%20d").await), ["100% done"]);
    assert_eq!(
        names(list("jobName=%E8%BF%87%E6%9C%9F").await),
        ["清理过期日志"]
    );
    // Handler is matched exactly: `demo.echo` is not `demo.echo.v2`.
    assert_eq!(list("handler=demo.echo").await.len(), 3);
    assert_eq!(names(list("handler=demo.echo.v2").await), ["echo v2"]);
    assert!(list("handler=demo").await.is_empty());
    assert_eq!(names(list("status=timeout").await), ["100% done"]);
    assert_eq!(names(list("status=running").await), ["echo v2"]);
    // Start time range, inclusive, in any offset: 08:01–08:03 in +08:00
    // is 00:01–00:03 UTC.
    assert_eq!(
        names(
            list("startedFrom=2025-11-25T08:01:00%2B08:00&startedTo=2025-11-25T08:03:00%2B08:00")
                .await
        ),
        ["清理过期日志", "100% done", "Nightly Report"]
    );
    // An unencoded `+` arrives as a space and is still understood.
    assert_eq!(
        names(list("startedFrom=2025-11-25T08:04:00+08:00").await),
        ["echo v2"]
    );
    assert_eq!(
        names(list("startedTo=2025-11-25T00:00:00Z").await),
        ["Nightly Report"]
    );
    assert_eq!(
        names(list("jobId=1&status=failed&startedFrom=2025-11-25T00:00:00Z").await),
        ["Nightly Report"]
    );
    // Blank filters mean "any" (an empty form field).
    assert_eq!(list("jobName=&status=&handler=").await.len(), 5);
}

#[tokio::test]
async fn run_detail_has_output_and_error() {
    let server = Server::start();
    let store = open_store(&server).await;
    let ids = insert_runs(
        &store,
        &[NewRun {
            output: "line 1\nline 2\nreturned: ok".into(),
            error: "handler failed: 连接超时".into(),
            ..NewRun::new(7, "with output", T0).status("failed")
        }],
    )
    .await;
    let (status, run) = get(
        &server,
        &format!("/api/runs/{}", ids[0]),
        &token(&["scheduler.run.view"]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["id"], ids[0]);
    assert_eq!(run["jobId"], 7);
    assert_eq!(run["jobName"], "with output");
    assert_eq!(run["status"], "failed");
    assert_eq!(run["trigger"], "schedule");
    assert_eq!(run["attempt"], 1);
    assert_eq!(run["durationMs"], 20);
    assert_eq!(run["instance"], "test-host-1");
    assert_eq!(ms(&run["startedAt"]), T0);
    assert_eq!(ms(&run["scheduledAt"]), T0 - 5);
    assert_eq!(ms(&run["finishedAt"]), T0 + 20);
    assert_eq!(run["output"], "line 1\nline 2\nreturned: ok");
    assert_eq!(run["error"], "handler failed: 连接超时");
    let resp = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/424242",
        Some(&admin_token()),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(resp.status, StatusCode::NOT_FOUND);
    assert_eq!(resp.content_type, "application/problem+json");
    assert_eq!(resp.json()["detail"], "Run 424242 does not exist");
}

#[tokio::test]
async fn job_detail_lists_its_recent_runs() {
    let server = Server::start();
    let store = open_store(&server).await;
    let admin = admin_token();
    let job = create_job(&server, &admin, "with history").await;
    let id = job["id"].as_i64().expect("id");
    let other = create_job(&server, &admin, "other").await;
    let other_id = other["id"].as_i64().expect("id");
    let mut runs: Vec<NewRun> = (0..15i64)
        .map(|i| NewRun::new(id, "with history", T0 + i * 1000))
        .collect();
    runs.push(NewRun::new(other_id, "other", T0 + 100_000));
    runs.push(NewRun {
        deleted: true,
        ..NewRun::new(id, "with history", T0 + 200_000)
    });
    let inserted = insert_runs(&store, &runs).await;

    let (status, detail) = get(
        &server,
        &format!("/api/jobs/{id}"),
        &token(&["scheduler.task.view", "scheduler.run.browse"]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let recent = detail["recentRuns"].as_array().expect("recentRuns").clone();
    assert_eq!(recent.len(), 10);
    // The 10 newest visible runs of this job: inserted 14, 13, … 5.
    let expected: Vec<i64> = inserted[5..15].iter().rev().copied().collect();
    assert_eq!(ids(&recent), expected);
    assert!(recent.iter().all(|r| r["jobId"] == id));

    // Without run.browse the field is absent.
    let (_, detail) = get(
        &server,
        &format!("/api/jobs/{id}"),
        &token(&["scheduler.task.view"]),
    )
    .await;
    assert!(detail.get("recentRuns").is_none(), "{detail}");

    // A job without runs has an empty list.
    let fresh = create_job(&server, &admin, "fresh").await;
    let (_, detail) = get(&server, &format!("/api/jobs/{}", fresh["id"]), &admin).await;
    assert_eq!(detail["recentRuns"], json!([]));
}

// ---------------------------------------------------------------------------
// Exports
// ---------------------------------------------------------------------------

#[tokio::test]
async fn exports_are_workbooks_in_the_readers_language_and_zone() {
    let server = Server::start_with(Db::Sqlite, &[("QIWU_TIMEZONE", "Asia/Shanghai")]);
    let store = open_store(&server).await;
    let admin = admin_token();
    create_job(&server, &admin, "alpha report").await;
    create_job(&server, &admin, "beta =SUM(A1)").await;
    let (status, _) = post(
        &server,
        "/api/jobs",
        &admin,
        json!({"name": "gamma", "handler": "demo.echo", "group": "system", "enabled": false}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);

    // Jobs, Chinese by default, all of them.
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export",
        Some(&token(&["scheduler.task.export"])),
        None,
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "jobs");
    for header in ["任务名称", "处理器", "Cron 表达式", "启用", "创建时间"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(strings.contains("alpha report"));
    // A value that looks like a formula stays text.
    assert!(strings.contains("beta =SUM(A1)"));
    assert!(!sheet.contains("<f>"), "no formulas");
    assert!(strings.contains("系统"), "group label");
    assert_eq!(
        sheet_rows(&sheet),
        7,
        "header + 3 jobs + 3 seeded built-in jobs"
    );

    // Filtered, in English.
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export?enabled=false&group=system",
        Some(&admin),
        Some("en-US,en;q=0.9"),
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "jobs");
    for header in ["Name", "Handler", "Enabled", "Created at", "Misfire policy"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(!strings.contains("任务名称"));
    assert!(strings.contains("gamma"));
    assert!(!strings.contains("alpha report"));
    assert_eq!(sheet_rows(&sheet), 2, "header + gamma");

    // Runs: the filter applies, headers are localized, times are in the
    // service zone (Asia/Shanghai, +08:00) as real date-times.
    insert_runs(
        &store,
        &[
            NewRun::new(1, "alpha report", T0),
            NewRun {
                error: "boom".into(),
                ..NewRun::new(1, "alpha report", T0 + 3_600_000).status("failed")
            },
            NewRun::new(2, "beta =SUM(A1)", T0 + 7_200_000),
        ],
    )
    .await;
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?jobId=1",
        Some(&token(&["scheduler.run.export"])),
        None,
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "runs");
    for header in ["任务名称", "状态", "开始时间", "错误信息", "成功", "失败"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert!(strings.contains("boom"));
    assert!(!strings.contains("beta"));
    assert_eq!(sheet_rows(&sheet), 3, "header + 2 runs");
    // Row 2 is the newest run: started 2025-11-25T01:00:00Z = 09:00 in +08:00.
    let started: f64 = cell_value(&sheet, "J2")
        .expect("J2 holds the start time")
        .parse()
        .expect("a date-time is a number");
    let expected = excel_serial(2025, 11, 25, 9, 0, 0);
    assert!((started - expected).abs() < 1e-6, "{started} vs {expected}");

    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?status=success",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    let (strings, sheet) = open_export(&reply, "runs");
    for header in ["Job name", "Status", "Started at", "Success"] {
        assert!(strings.contains(header), "{header} in {strings}");
    }
    assert_eq!(sheet_rows(&sheet), 3, "header + 2 successful runs");
}

// ---------------------------------------------------------------------------
// Audit log
// ---------------------------------------------------------------------------

/// The audit entries matching `query`, newest first.
async fn audit(server: &Server, query: &str) -> Vec<Value> {
    let (status, page) = get(
        server,
        &format!("/api/audit-logs?limit=100&{query}"),
        &admin_token(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"].as_array().expect("items").clone()
}

#[tokio::test]
async fn audit_log_records_every_action_with_before_and_after() {
    let server = Server::start();
    let store = open_store(&server).await;
    let alice = common::mint("alice", &ALL_PERMS, false, 3600);

    // job.create
    let job = create_job(&server, &alice, "audited").await;
    let id = job["id"].as_i64().expect("id");
    let entries = audit(&server, "action=job.create").await;
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["targetType"], "job");
    assert_eq!(e["targetId"], id.to_string());
    assert_eq!(e["before"], Value::Null);
    assert_eq!(e["after"], job, "the job as the API showed it");
    assert_eq!(e["actionLabel"], "创建任务");
    assert!(e["summary"].as_str().is_some_and(|s| s.contains("audited")));
    assert!(DateTime::parse_from_rfc3339(e["at"].as_str().expect("at")).is_ok());

    // job.modify
    let (status, updated) = put(
        &server,
        &format!("/api/jobs/{id}"),
        &alice,
        json!({"version": 1, "cron": "0 30 4 * * *"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    let e = &audit(&server, "action=job.modify").await[0];
    assert_eq!(e["before"]["cron"], "0 0 3 * * *");
    assert_eq!(e["before"]["version"], 1);
    assert_eq!(e["after"]["cron"], "0 30 4 * * *");
    assert_eq!(e["after"]["version"], 2);

    // job.disable, then a no-op disable (no entry), then job.enable.
    let enabled_path = format!("/api/jobs/{id}/enabled");
    for enabled in [false, false, true] {
        let (status, _) = put(&server, &enabled_path, &alice, json!({"enabled": enabled})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let disabled = audit(&server, "action=job.disable").await;
    assert_eq!(
        disabled.len(),
        1,
        "setting the same state again is not a change"
    );
    assert_eq!(disabled[0]["before"]["enabled"], true);
    assert_eq!(disabled[0]["after"]["enabled"], false);
    let enabled = audit(&server, "action=job.enable").await;
    assert_eq!(enabled.len(), 1);
    assert_eq!(enabled[0]["after"]["enabled"], true);
    assert_eq!(enabled[0]["after"]["version"], 4);

    // job.export
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/jobs/export?name=aud",
        Some(&alice),
        None,
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let e = &audit(&server, "action=job.export").await[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["targetId"], Value::Null);
    assert_eq!(e["after"]["rows"], 1);
    assert_eq!(e["after"]["filters"]["name"], "aud");

    // job.delete: one entry per job, in single and batch deletes.
    let second = create_job(&server, &alice, "second").await;
    let third = create_job(&server, &alice, "third").await;
    let (status, _) = delete(&server, &format!("/api/jobs/{id}"), &alice).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = post(
        &server,
        "/api/jobs/batch-delete",
        &alice,
        json!({"ids": [second["id"], third["id"], 987_654]}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deletes = audit(&server, "action=job.delete").await;
    assert_eq!(deletes.len(), 3);
    let mut deleted_names: Vec<&str> = deletes
        .iter()
        .filter_map(|e| e["before"]["name"].as_str())
        .collect();
    deleted_names.sort_unstable();
    assert_eq!(deleted_names, ["audited", "second", "third"]);
    assert!(deletes.iter().all(|e| e["after"].is_null()));
    let mine = audit(&server, &format!("targetType=job&targetId={id}")).await;
    let actions: Vec<&str> = mine.iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(
        actions,
        [
            "job.delete",
            "job.enable",
            "job.disable",
            "job.modify",
            "job.create"
        ]
    );

    // run.delete (one and many), run.export, run.clear.
    let run_ids = insert_runs(
        &store,
        &(0..5)
            .map(|i| NewRun::new(9, "runner", T0 + i * 1000))
            .collect::<Vec<_>>(),
    )
    .await;
    let (status, _) = delete(&server, &format!("/api/runs/{}", run_ids[0]), &alice).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.delete").await[0];
    assert_eq!(e["targetType"], "run");
    assert_eq!(e["targetId"], run_ids[0].to_string());
    assert_eq!(e["before"]["id"], run_ids[0]);
    assert_eq!(e["before"]["jobName"], "runner");
    let (status, _) = post(
        &server,
        "/api/runs/batch-delete",
        &alice,
        json!({"ids": [run_ids[1], run_ids[2]]}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.delete").await[0];
    assert_eq!(e["targetId"], Value::Null);
    assert_eq!(e["after"]["deleted"], 2);
    assert_eq!(e["after"]["ids"], json!([run_ids[1], run_ids[2]]));
    let reply = call(
        reqwest::Method::GET,
        &server,
        "/api/runs/export?status=success",
        Some(&alice),
        None,
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let e = &audit(&server, "action=run.export").await[0];
    assert_eq!(e["after"]["rows"], 2);
    assert_eq!(e["after"]["filters"]["status"], "success");
    let (status, _) = post(&server, "/api/runs/clear", &alice, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let e = &audit(&server, "action=run.clear").await[0];
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["after"]["deleted"], 2);

    // Everything above, by actor, newest first, paged by cursor.
    let everything = audit(&server, "actor=alice").await;
    assert_eq!(everything.len(), 14);
    let (_, page) = get(&server, "/api/audit-logs?limit=4", &admin_token()).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(4));
    let mut seen: Vec<i64> = ids(page["items"].as_array().expect("items"));
    let mut cursor = page["nextCursor"].as_str().map(str::to_string);
    while let Some(c) = cursor {
        let (status, page) = get(
            &server,
            &format!("/api/audit-logs?limit=4&cursor={c}"),
            &admin_token(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        seen.extend(ids(page["items"].as_array().expect("items")));
        cursor = page["nextCursor"].as_str().map(str::to_string);
    }
    assert_eq!(seen, ids(&everything));
    // Time filter and the English label.
    let resp = call(
        reqwest::Method::GET,
        &server,
        "/api/audit-logs?action=run.clear&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z",
        Some(&admin_token()),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(resp.json()["items"][0]["actionLabel"], "Clear runs");
    assert!(
        audit(&server, "to=2000-01-01T00:00:00Z").await.is_empty(),
        "nothing that old"
    );
}

// ---------------------------------------------------------------------------
// Permissions and bad input
// ---------------------------------------------------------------------------

#[tokio::test]
async fn new_endpoints_need_their_permission() {
    let server = Server::start();
    let store = open_store(&server).await;
    let run_ids = insert_runs(&store, &[NewRun::new(1, "guarded", T0)]).await;
    let run_path = format!("/api/runs/{}", run_ids[0]);
    // (method, path, body, the permission needed)
    let endpoints: Vec<(reqwest::Method, String, Option<Value>, &str)> = vec![
        (
            reqwest::Method::GET,
            "/api/runs".into(),
            None,
            "scheduler.run.browse",
        ),
        (
            reqwest::Method::GET,
            run_path.clone(),
            None,
            "scheduler.run.view",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export".into(),
            None,
            "scheduler.run.export",
        ),
        (
            reqwest::Method::GET,
            "/api/jobs/export".into(),
            None,
            "scheduler.task.export",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({"ids": [999_999]})),
            "scheduler.run.remove",
        ),
        (
            reqwest::Method::DELETE,
            "/api/runs/999999".into(),
            None,
            "scheduler.run.remove",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/clear".into(),
            None,
            "scheduler.run.remove",
        ),
    ];
    for (method, path, body, needed) in &endpoints {
        let r = call(method.clone(), &server, path, None, None, body.clone()).await;
        assert_eq!(
            r.status,
            StatusCode::UNAUTHORIZED,
            "{method} {path} without a token"
        );
        assert_eq!(r.content_type, "application/problem+json");
        let others: Vec<&str> = ALL_PERMS.iter().copied().filter(|p| p != needed).collect();
        let r = call(
            method.clone(),
            &server,
            path,
            Some(&token(&others)),
            None,
            body.clone(),
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::FORBIDDEN,
            "{method} {path} without {needed}"
        );
        assert!(
            r.json()["detail"]
                .as_str()
                .is_some_and(|d| d.contains(needed)),
            "{}",
            r.json()
        );
        let r = call(
            method.clone(),
            &server,
            path,
            Some(&token(&[needed])),
            None,
            body.clone(),
        )
        .await;
        assert!(
            r.status.is_success() || r.status == StatusCode::NOT_FOUND,
            "{method} {path} with {needed} → {}: {}",
            r.status,
            r.json()
        );
    }
    // Clear, called last with its permission, hid the run.
    let (status, _) = get(&server, &run_path, &admin_token()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The audit log is for super admins only.
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/audit-logs",
        None,
        None,
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let (status, problem) = get(&server, "/api/audit-logs", &token(&ALL_PERMS)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    let (status, _) = get(&server, "/api/audit-logs", &admin_token()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn refused_calls_change_nothing() {
    let server = Server::start();
    let store = open_store(&server).await;
    let run_ids = insert_runs(&store, &[NewRun::new(1, "kept", T0)]).await;
    let browse_only = token(&["scheduler.run.browse", "scheduler.run.view"]);
    for (method, path, body) in [
        (
            reqwest::Method::DELETE,
            format!("/api/runs/{}", run_ids[0]),
            None,
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".to_string(),
            Some(json!({"ids": run_ids})),
        ),
        (reqwest::Method::POST, "/api/runs/clear".to_string(), None),
    ] {
        let r = call(method, &server, &path, Some(&browse_only), None, body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
    }
    let (status, _) = get(&server, &format!("/api/runs/{}", run_ids[0]), &browse_only).await;
    assert_eq!(status, StatusCode::OK);
    assert!(audit(&server, "").await.is_empty(), "nothing to audit");
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field() {
    let server = Server::start();
    let admin = admin_token();
    let too_many: Vec<i64> = (1..=1001).collect();
    // (method, path, body, the field named)
    let cases: Vec<(reqwest::Method, String, Option<Value>, &str)> = vec![
        (
            reqwest::Method::GET,
            "/api/runs?cursor=garbage".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?cursor=00000000000000000000000000000000zz".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=0".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=101".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?limit=ten".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?status=ok".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?status=SUCCESS".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedFrom=yesterday".into(),
            None,
            "startedFrom",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedTo=2025-11-25".into(),
            None,
            "startedTo",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?startedFrom=2025-11-26T00:00:00Z&startedTo=2025-11-25T00:00:00Z".into(),
            None,
            "startedTo",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?jobId=abc".into(),
            None,
            "jobId",
        ),
        (
            reqwest::Method::GET,
            "/api/runs?jobId=-1".into(),
            None,
            "jobId",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export?status=nope".into(),
            None,
            "status",
        ),
        (
            reqwest::Method::GET,
            "/api/runs/export?startedFrom=2025-13-01T00:00:00Z".into(),
            None,
            "startedFrom",
        ),
        (
            reqwest::Method::GET,
            "/api/jobs/export?enabled=maybe".into(),
            None,
            "enabled",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({"ids": []})),
            "ids",
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete".into(),
            Some(json!({ "ids": too_many })),
            "ids",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?cursor=abc".into(),
            None,
            "cursor",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?limit=0".into(),
            None,
            "limit",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?action=job.nuke".into(),
            None,
            "action",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?targetType=user".into(),
            None,
            "targetType",
        ),
        (
            reqwest::Method::GET,
            "/api/audit-logs?from=now".into(),
            None,
            "from",
        ),
    ];
    for (method, path, body, field) in cases {
        let r = call(method.clone(), &server, &path, Some(&admin), None, body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{method} {path}: {}",
            r.json()
        );
        assert_eq!(r.content_type, "application/problem+json", "{path}");
        let problem = r.json();
        assert_eq!(problem["status"], 400);
        assert_eq!(problem["errors"][0]["field"], field, "{path}: {problem}");
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{problem}"
        );
    }
    // Malformed bodies and ids are 4xx too, never 5xx.
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete",
            Some("{\"ids\": [\"a\"]}"),
        ),
        (
            reqwest::Method::POST,
            "/api/runs/batch-delete",
            Some("nope"),
        ),
        (reqwest::Method::GET, "/api/runs/abc", None),
        (
            reqwest::Method::DELETE,
            "/api/runs/99999999999999999999",
            None,
        ),
    ] {
        let mut req = client()
            .request(method.clone(), server.url(path))
            .bearer_auth(&admin);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.expect("request");
        assert!(
            resp.status().is_client_error(),
            "{method} {path} → {}",
            resp.status()
        );
    }
    // In English on request.
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/runs?limit=0",
        Some(&admin),
        Some("en"),
        None,
    )
    .await;
    assert_eq!(
        r.json()["errors"][0]["message"],
        "limit must be a whole number from 1 to 100"
    );
    let r = call(
        reqwest::Method::GET,
        &server,
        "/api/runs?cursor=x",
        Some(&admin),
        None,
        None,
    )
    .await;
    assert_eq!(
        r.json()["errors"][0]["message"],
        "cursor 无效：请原样传回上一页返回的 nextCursor"
    );
}

#[test]
fn the_new_endpoints_are_documented() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
            .expect("openapi/openapi.json"),
    )
    .expect("json");
    for (path, method) in [
        ("/api/runs", "get"),
        ("/api/runs/{id}", "get"),
        ("/api/runs/{id}", "delete"),
        ("/api/runs/batch-delete", "post"),
        ("/api/runs/clear", "post"),
        ("/api/runs/export", "get"),
        ("/api/jobs/export", "get"),
        ("/api/audit-logs", "get"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op["summary"].is_string(), "{method} {path} is documented");
        for code in ["401", "403"] {
            assert!(
                op["responses"].get(code).is_some(),
                "{method} {path} documents {code}"
            );
        }
    }
    assert!(
        doc["paths"]["/api/runs/export"]["get"]["responses"]["200"]["content"][XLSX].is_object()
    );
}
