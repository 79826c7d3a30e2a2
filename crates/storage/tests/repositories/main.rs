//! Repository tests. Every scenario is written once, as an async fn taking a
//! migrated [`Store`], and run against SQLite (a fresh temp file), PostgreSQL
//! and MySQL/MariaDB (a fresh database each, dropped afterwards).
//!
//! Servers: `QIWU_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432`)
//! and `QIWU_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`). An
//! unreachable server fails the test; it is never skipped.
//!
//! This file holds the harness, the `scenarios!` macro and the shared
//! fixtures; each module holds one repository's or topic's scenarios and
//! lists them in its own `scenarios!` (tests are named
//! `<module>::<backend>::<scenario>`, e.g. `jobs::postgres::job_name_taken`).

use std::future::Future;
use std::path::PathBuf;

use chrono::{DateTime, TimeZone, Utc};
use qiwu_storage::entity::{
    api_key, audit_log, fire, instance, job, job_group, notification, notification_template,
    outbox, run, seed_marker, setting,
};
use qiwu_storage::timestamp::truncate_to_millis;
use qiwu_storage::{Backend, GroupRecord, JobFilter, JobRecord, NewJob, StorageError, Store};
use sea_orm::{
    ActiveModelTrait, ActiveValue::NotSet, ColumnTrait, ConnectionTrait, EntityTrait,
    IntoActiveModel, QueryFilter, SqlErr,
};
use serde_json::json;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

const PG_ENV: &str = "QIWU_TEST_POSTGRES_URL";
const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432";
const MYSQL_ENV: &str = "QIWU_TEST_MYSQL_URL";
const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306";

#[derive(Clone, Copy, Debug)]
enum Kind {
    Sqlite,
    Postgres,
    MySql,
}

/// What to remove once the scenario is over.
enum Cleanup {
    Dir(PathBuf),
    Database {
        admin: Store,
        name: String,
        kind: Kind,
    },
}

fn random_name() -> String {
    format!("qiwu_t_{:016x}", rand::random::<u64>())
}

/// The URL with any password replaced, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if s + 3 < at => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// `base` with its path replaced by `/db`, query string kept.
fn with_database(base: &str, db: &str) -> String {
    let (head, query) = match base.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (base, None),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let authority_end = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |i| scheme_end + i);
    let mut url = format!("{}/{db}", &head[..authority_end]);
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

async fn server_store(kind: Kind) -> (Store, Cleanup) {
    let (env, default, admin_db, what) = match kind {
        Kind::Postgres => (PG_ENV, PG_DEFAULT, Some("postgres"), "PostgreSQL"),
        Kind::MySql => (MYSQL_ENV, MYSQL_DEFAULT, None, "MySQL/MariaDB"),
        Kind::Sqlite => unreachable!("SQLite needs no server"),
    };
    let base = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    let admin_url = match admin_db {
        Some(db) => with_database(&base, db),
        None => base.clone(),
    };
    let admin = Store::connect(&admin_url).await.unwrap_or_else(|e| {
        panic!(
            "{what} test server unreachable at {} (set {env} to point elsewhere): {e}",
            redact(&admin_url)
        )
    });
    let name = random_name();
    admin
        .connection()
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("cannot create test database {name} on {what}: {e:?}"));
    let url = with_database(&base, &name);
    let store = Store::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {} : {e:?}", redact(&url)));
    (store, Cleanup::Database { admin, name, kind })
}

async fn sqlite_store() -> (Store, Cleanup) {
    // A directory that does not exist yet: `connect` must create it.
    let dir = std::env::temp_dir().join(random_name());
    let path = dir.join("nested").join("qiwu.db");
    let url = format!("sqlite://{}", path.display());
    let store = Store::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e:?}"));
    (store, Cleanup::Dir(dir))
}

async fn cleanup(store: Store, cleanup: Cleanup) {
    // Close our pool first: PostgreSQL refuses to drop a database in use.
    let _ = store.connection().close_by_ref().await;
    drop(store);
    match cleanup {
        Cleanup::Dir(dir) => {
            let _ = std::fs::remove_dir_all(dir);
        }
        Cleanup::Database { admin, name, kind } => {
            let sql = match kind {
                Kind::Postgres => format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                _ => format!("DROP DATABASE IF EXISTS {name}"),
            };
            if let Err(e) = admin.connection().execute_unprepared(&sql).await {
                eprintln!("warning: could not drop test database {name}: {e}");
            }
            let _ = admin.connection().close_by_ref().await;
        }
    }
}

/// Opens a fresh migrated database of `kind`, runs the scenario, cleans up
/// (also when the scenario panics), then re-raises any failure.
async fn run<F, Fut>(kind: Kind, scenario: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (store, guard) = match kind {
        Kind::Sqlite => sqlite_store().await,
        Kind::Postgres | Kind::MySql => server_store(kind).await,
    };
    let migrated = store.migrate().await;
    let outcome = match migrated {
        Ok(()) => tokio::spawn(scenario(store.clone())).await,
        Err(e) => {
            cleanup(store, guard).await;
            panic!("migration failed on {kind:?}: {e:?}");
        }
    };
    cleanup(store, guard).await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("scenario did not finish: {e}"),
        }
    }
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::run(super::Kind::Sqlite, super::$name).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::run(super::Kind::Postgres, super::$name).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::run(super::Kind::MySql, super::$name).await;
                }
            )*
        }
    };
}

/// Alert channels, policies and state.
mod alerts;
/// API keys of service accounts.
mod api_keys;
/// Backfills and their fires.
mod backfills;
/// User calendars.
mod calendars;
/// Freeze windows.
mod freezes;
/// A job write and its audit entries commit together.
mod job_audit;
/// The job and group repositories.
mod jobs;
/// The fire ledger's scenarios.
mod ledger;
/// The run log and the audit log.
mod logs;
/// What observability reads and writes.
mod monitor;
/// Settings, notification templates, inbox, outbox and purge.
mod notify;
/// Pauses with a reason and an end.
mod pause;
/// Run control: cancel requests.
mod run_control;
/// Run-once keys and callbacks (issue 10, part 5).
mod run_once;
/// The schema: migrations, every entity, seed markers.
mod schema;

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap()
}

/// A time with sub-millisecond digits, which storage must drop.
fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(1_764_000_000, 123_456_789)
        .single()
        .unwrap()
}

fn new_job(name: &str) -> NewJob {
    NewJob {
        time_rules: Default::default(),
        name: name.to_owned(),
        group: "default".to_owned(),
        handler: "demo.echo".to_owned(),
        params: json!({"message": "hello", "delayMs": 0}),
        cron: "0 0 * * * *".to_owned(),
        timezone: None,
        enabled: true,
        retry_count: 0,
        retry_interval_ms: 1000,
        retry_backoff: "fixed".into(),
        retry_max_interval_ms: 3_600_000,
        retry_jitter: false,
        overlap_policy: "skip".into(),
        timeout_ms: 60_000,
        allow_concurrent: false,
        misfire_policy: "skip".to_owned(),
        remark: String::new(),
        builtin_key: None,
        alert: Default::default(),
    }
}

fn assert_matches_input(rec: &JobRecord, job: &NewJob) {
    assert_eq!(rec.name, job.name);
    assert_eq!(rec.group, job.group);
    assert_eq!(rec.handler, job.handler);
    assert_eq!(rec.params, job.params);
    assert_eq!(rec.cron.as_str(), job.cron);
    assert_eq!(rec.timezone.map(|tz| tz.name()), job.timezone.as_deref());
    assert_eq!(rec.enabled, job.enabled);
    assert_eq!(rec.retry_count, job.retry_count);
    assert_eq!(rec.retry_interval_ms, job.retry_interval_ms);
    assert_eq!(rec.timeout_ms, job.timeout_ms);
    assert_eq!(rec.allow_concurrent, job.allow_concurrent);
    assert_eq!(rec.misfire_policy.as_str(), job.misfire_policy);
    assert_eq!(rec.remark, job.remark);
}

fn names(items: &[JobRecord]) -> Vec<&str> {
    items.iter().map(|j| j.name.as_str()).collect()
}

#[test]
fn url_helpers() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432", "x"),
        "postgres://postgres@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgres://p@h:5432/", "x"),
        "postgres://p@h:5432/x"
    );
    assert_eq!(
        with_database("postgres://p@h/old?sslmode=disable", "x"),
        "postgres://p@h/x?sslmode=disable"
    );
    assert_eq!(
        redact("mysql://root:secret@h:3306"),
        "mysql://root:***@h:3306"
    );
    assert_eq!(redact("mysql://root@h:3306"), "mysql://root@h:3306");
}
