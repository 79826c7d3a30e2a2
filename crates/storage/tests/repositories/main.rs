//! Repository tests. Every scenario is written once, as an async fn taking a
//! migrated [`Store`], and run against SQLite (a fresh temp file), PostgreSQL
//! and MySQL/MariaDB (a fresh database each, dropped afterwards).
//!
//! Servers: `QIWU_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432`)
//! and `QIWU_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`). An
//! unreachable server fails the test; it is never skipped.

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

scenarios!(
    migrate_twice_is_idempotent_and_seeds_groups,
    every_entity_round_trips,
    job_create_get_round_trip,
    job_name_taken,
    job_list_filters_and_paging,
    job_update_bumps_version,
    job_update_stale_version,
    job_update_to_taken_name,
    job_update_missing,
    job_concurrent_updates_one_wins,
    job_concurrent_creates_one_wins,
    job_set_enabled,
    job_concurrent_set_enabled,
    job_delete_and_delete_many,
    job_corrupt_params,
    groups_create_duplicate_delete_list,
    calendars_create_update_delete,
    calendars_concurrent_updates_one_wins,
    job_time_rules_round_trip,
    calendar_edit_restarts_its_jobs_schedules,
    max_runs_disables_the_job_once,
    seed_marked_once,
);

/// Alert channels, policies and state.
mod alerts;
/// Backfills and their fires.
mod backfills;
/// Freeze windows.
mod freezes;
/// The fire ledger's scenarios.
mod ledger;
/// What observability reads and writes.
mod monitor;
/// Pauses with a reason and an end.
mod pause;
/// Run control: cancel requests.
mod run_control;
/// Run-once keys and callbacks (issue 10, part 5).
mod run_once;

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

// ---------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------

async fn migrate_twice_is_idempotent_and_seeds_groups(store: Store) {
    // The harness migrated once already.
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    store.ping().await.unwrap();

    let expected = vec![
        GroupRecord {
            code: "default".into(),
            label_zh: "默认".into(),
            label_en: "Default".into(),
            builtin: true,
        },
        GroupRecord {
            code: "system".into(),
            label_zh: "系统".into(),
            label_en: "System".into(),
            builtin: true,
        },
    ];
    assert_eq!(store.groups().list().await.unwrap(), expected);
    let (jobs, total) = store
        .jobs()
        .list(&JobFilter::default(), 1, 20)
        .await
        .unwrap();
    assert!(jobs.is_empty());
    assert_eq!(total, 0);

    let backend = store.backend();
    let expected_backend = match store.connection().get_database_backend() {
        sea_orm::DbBackend::Sqlite => Backend::Sqlite,
        sea_orm::DbBackend::Postgres => Backend::Postgres,
        _ => Backend::MySql,
    };
    assert_eq!(backend, expected_backend);
}

/// Every entity reads back what it wrote, so entity and schema agree on every
/// backend; the ledger's unique keys reject duplicates.
async fn every_entity_round_trips(store: Store) {
    let db = store.connection();
    let ms = 4_102_444_800_123; // 2100-01-01, past MySQL TIMESTAMP's 2038 limit

    let m = job_group::Model {
        code: "grp".into(),
        label_zh: "组".into(),
        label_en: "Group".into(),
        builtin: false,
        created_at: ms,
    };
    let got = m
        .clone()
        .into_active_model()
        .reset_all()
        .insert(db)
        .await
        .unwrap();
    assert_eq!(got, m);

    let m = job::Model {
        id: 0,
        name: "entity job".into(),
        group_code: "grp".into(),
        handler: "demo.echo".into(),
        params: "{}".into(),
        cron: "0 * * * * *".into(),
        timezone: Some("Europe/Paris".into()),
        enabled: true,
        retry_count: 10,
        retry_interval_ms: 3_600_000,
        timeout_ms: 86_400_000,
        allow_concurrent: true,
        misfire_policy: "run_once".into(),
        retry_backoff: "exponential".into(),
        retry_max_interval_ms: 86_400_000,
        retry_jitter: true,
        overlap_policy: "allow".into(),
        remark: "r".repeat(500),
        version: i64::MAX,
        schedule_from: ms,
        builtin_key: Some("k".repeat(160)),
        created_at: ms,
        created_by: "u".repeat(128),
        updated_at: -1,
        updated_by: "v".into(),
        alert_on_failure: true,
        alert_after_failures: 1000,
        alert_on_recovery: true,
        alert_channels: Some("[1,2]".into()),
        alert_streak: i32::MAX,
        alert_alerted: true,
        calendar_code: Some("c".repeat(64)),
        calendar_rule: Some("holidays".into()),
        active_from: Some(-ms),
        active_until: Some(ms),
        jitter_ms: 86_400_000,
        misfire_grace_ms: 2_592_000_000,
        max_runs: Some(1_000_000_000),
        scheduled_successes: i64::MAX,
        paused_reason: Some("停".repeat(500)),
        paused_by: Some("p".repeat(128)),
        paused_at: Some(ms),
        paused_until: Some(i64::MAX),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.insert(db).await.unwrap();
    assert_eq!(got, job::Model { id: got.id, ..m });

    let m = fire::Model {
        id: 0,
        job_id: got.id,
        trigger: "schedule".into(),
        lane: 0,
        prev_at: Some(ms - 1000),
        first_at: Some(ms),
        scheduled_at: ms,
        state: "pending".into(),
        claimed_by: None,
        claimed_at: None,
        created_at: ms,
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        started_by: Some("apikey:订单服务".into()),
        callback_url: Some(format!("https://cb.example.com/{}", "p".repeat(2000))),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let fire_row = am.clone().insert(db).await.unwrap();
    assert_eq!(
        fire_row,
        fire::Model {
            id: fire_row.id,
            ..m.clone()
        }
    );
    // Exactly-once ledger: the same (job, lane, time) cannot be recorded twice.
    let dup = am.clone().insert(db).await.unwrap_err();
    assert!(
        matches!(dup.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))),
        "{dup:?}"
    );
    // A run-once request at the same time lives in its own lane.
    let mut manual = am;
    manual.trigger = sea_orm::Set("manual".into());
    manual.lane = sea_orm::Set(1);
    manual.prev_at = sea_orm::Set(None);
    manual.insert(db).await.unwrap();

    let m = run::Model {
        id: 0,
        fire_id: fire_row.id,
        job_id: fire_row.job_id,
        job_name: "任".repeat(64),
        handler: "demo.echo".into(),
        trigger: "schedule".into(),
        scheduled_at: ms,
        attempt: 1,
        status: "success".into(),
        started_at: ms,
        finished_at: Some(ms + 5),
        duration_ms: Some(5),
        instance: "host-1".into(),
        output: "日志\n".repeat(4000),
        error: String::new(),
        swept_at: None,
        deleted_at: None,
        trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
        cancel_requested_at: Some(ms),
        cancelled_by: Some("apikey:".to_string() + &"k".repeat(120)),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.clone().insert(db).await.unwrap();
    assert_eq!(got, run::Model { id: got.id, ..m });
    let dup = am.insert(db).await.unwrap_err();
    assert!(
        matches!(dup.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))),
        "{dup:?}"
    );

    let m = audit_log::Model {
        id: 0,
        at: ms,
        actor: "admin".into(),
        action: "job.update".into(),
        target_type: "job".into(),
        target_id: Some("42".into()),
        summary: "改名".into(),
        before_json: Some(r#"{"name":"a"}"#.into()),
        after_json: None,
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.insert(db).await.unwrap();
    assert_eq!(got, audit_log::Model { id: got.id, ..m });

    let m = notification_template::Model {
        code: "scheduler.timeout_alert".into(),
        title_zh: "任务超时：{job}".into(),
        body_zh: "处理器 {handler}".into(),
        title_en: "Job timed out: {job}".into(),
        body_en: "Handler {handler}".into(),
        updated_at: ms,
        updated_by: "system".into(),
    };
    let got = m
        .clone()
        .into_active_model()
        .reset_all()
        .insert(db)
        .await
        .unwrap();
    assert_eq!(got, m);

    let m = notification::Model {
        id: 0,
        recipient: "admin".into(),
        template_code: "scheduler.timeout_alert".into(),
        title: "t".into(),
        body: "b".into(),
        created_at: ms,
        read_at: Some(ms),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.insert(db).await.unwrap();
    assert_eq!(got, notification::Model { id: got.id, ..m });

    let m = outbox::Model {
        id: 0,
        notification_id: got.id,
        payload: r#"{"a":1}"#.into(),
        status: "pending".into(),
        attempts: 0,
        next_attempt_at: ms,
        last_error: None,
        created_at: ms,
        sent_at: None,
        channel_id: Some(i64::MAX),
        url: Some("https://cb.example.com/done?t=1".into()),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.insert(db).await.unwrap();
    assert_eq!(got, outbox::Model { id: got.id, ..m });

    let m = setting::Model {
        key: "audit.retention_days".into(),
        value: "180".into(),
        updated_at: ms,
        updated_by: "admin".into(),
    };
    let got = m
        .clone()
        .into_active_model()
        .reset_all()
        .insert(db)
        .await
        .unwrap();
    assert_eq!(got, m);

    let m = api_key::Model {
        id: 0,
        name: "wf service".into(),
        prefix: "qk_abcdef".into(),
        secret_hash: "h".repeat(128),
        perms: r#"["scheduler.task.run"]"#.into(),
        created_at: ms,
        created_by: "admin".into(),
        revoked_at: None,
        last_used_at: Some(ms),
    };
    let mut am = m.clone().into_active_model().reset_all();
    am.id = NotSet;
    let got = am.clone().insert(db).await.unwrap();
    assert_eq!(got, api_key::Model { id: got.id, ..m });
    let dup = am.insert(db).await.unwrap_err();
    assert!(
        matches!(dup.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))),
        "{dup:?}"
    );

    let m = seed_marker::Model {
        key: "k".repeat(160),
        applied_at: ms,
    };
    let got = m
        .clone()
        .into_active_model()
        .reset_all()
        .insert(db)
        .await
        .unwrap();
    assert_eq!(got, m);

    let m = instance::Model {
        id: "host-1:4242".into(),
        role: "worker".into(),
        timezone: "Asia/Shanghai".into(),
        started_at: ms,
        heartbeat_at: ms,
    };
    let got = m
        .clone()
        .into_active_model()
        .reset_all()
        .insert(db)
        .await
        .unwrap();
    assert_eq!(got, m);
    assert_eq!(instance::Entity::find().all(db).await.unwrap(), vec![m]);
}

async fn job_create_get_round_trip(store: Store) {
    let jobs = store.jobs();
    let mut input = new_job("清理过期日志 — Ünïcødé ✓");
    input.group = "system".into();
    input.handler = "audit.purge".into();
    input.params = json!({
        "message": "héllo \"quoted\" \\ back",
        "delayMs": 600_000,
        "nested": {"list": [1, 2.5, null, true, "任务"], "empty": {}},
    });
    input.cron = "0 30 3 * * *".into();
    input.enabled = false;
    input.retry_count = 3;
    input.retry_interval_ms = 2500;
    input.timeout_ms = 600_000;
    input.allow_concurrent = true;
    input.misfire_policy = "run_once".into();
    input.remark = "line 1\nline 2 'single' \"double\" 备注".into();
    input.builtin_key = Some("audit.purge:清理过期日志".into());

    let created = jobs.create(&input, "alice", now()).await.unwrap();
    assert!(created.id > 0);
    assert_matches_input(&created, &input);
    assert_eq!(created.timezone, None);
    assert_eq!(created.version, 1);
    assert_eq!(created.builtin_key, input.builtin_key);
    assert_eq!(created.created_at, truncate_to_millis(now()));
    assert_eq!(created.updated_at, truncate_to_millis(now()));
    assert_eq!(created.created_by, "alice");
    assert_eq!(created.updated_by, "alice");

    let fetched = jobs.get(created.id).await.unwrap().unwrap();
    assert_eq!(fetched, created);
    assert_eq!(
        jobs.find_by_builtin_key("audit.purge:清理过期日志")
            .await
            .unwrap(),
        Some(created.clone())
    );
    assert_eq!(jobs.find_by_builtin_key("audit.purge").await.unwrap(), None);
    assert_eq!(jobs.get(created.id + 1000).await.unwrap(), None);

    // Maximum lengths: 64 CJK characters fit VARCHAR(64) everywhere; a zone;
    // a far-future instant; large params.
    let mut long = new_job(&"任".repeat(64));
    long.timezone = Some("America/Argentina/ComodRivadavia".into());
    long.params = json!({"message": "x".repeat(3900)});
    long.remark = "备".repeat(500);
    let later = at(4_102_444_800_999);
    let created = jobs.create(&long, "bob", later).await.unwrap();
    assert_matches_input(&created, &long);
    assert_eq!(created.created_at, later);
    assert_eq!(created.builtin_key, None);
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), created);

    assert_eq!(jobs.count_in_group("system").await.unwrap(), 1);
    assert_eq!(jobs.count_in_group("default").await.unwrap(), 1);
    assert_eq!(jobs.count_in_group("none").await.unwrap(), 0);
}

async fn job_name_taken(store: Store) {
    let jobs = store.jobs();
    jobs.create(&new_job("Abc"), "u", now()).await.unwrap();
    // Case and accents make different names on every backend.
    jobs.create(&new_job("abc"), "u", now()).await.unwrap();
    jobs.create(&new_job("ABC"), "u", now()).await.unwrap();
    jobs.create(&new_job("Ábc"), "u", now()).await.unwrap();
    let err = jobs.create(&new_job("Abc"), "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    let err = jobs.create(&new_job("abc"), "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");

    // A second job with the same built-in key is a different conflict.
    let mut a = new_job("builtin one");
    a.builtin_key = Some("demo.echo:示例".into());
    jobs.create(&a, "u", now()).await.unwrap();
    let mut b = new_job("builtin two");
    b.builtin_key = a.builtin_key.clone();
    let err = jobs.create(&b, "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");

    let (_, total) = jobs.list(&JobFilter::default(), 1, 100).await.unwrap();
    assert_eq!(total, 5);
}

async fn job_list_filters_and_paging(store: Store) {
    let jobs = store.jobs();
    let specs: [(&str, &str, &str, bool); 9] = [
        ("Alpha_1", "default", "demo.echo", true),
        ("alpha%2", "system", "audit.purge", false),
        ("Beta", "default", "demo.echo", false),
        ("ALPHAX", "system", "demo.echo", true),
        ("100% done", "default", "notify.dispatch", true),
        ("under_score", "default", "demo.echo", true),
        ("Ba-1", "system", "demo.echo", true),
        ("Bang!", "default", "audit.purge", true),
        ("任务一", "default", "demo.echo", true),
    ];
    let mut ids = Vec::new();
    for (name, group, handler, enabled) in specs {
        let mut j = new_job(name);
        j.group = group.into();
        j.handler = handler.into();
        j.enabled = enabled;
        ids.push(jobs.create(&j, "u", now()).await.unwrap().id);
    }

    let list = |filter: JobFilter| {
        let jobs = store.jobs();
        async move { jobs.list(&filter, 1, 100).await.unwrap() }
    };
    let by_name = |n: &str| JobFilter {
        name: Some(n.into()),
        ..JobFilter::default()
    };

    // No filter: everything, by id.
    let (all, total) = list(JobFilter::default()).await;
    assert_eq!(total, 9);
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), ids);

    // Name: case-insensitive substring.
    let (items, total) = list(by_name("alpha")).await;
    assert_eq!(names(&items), ["Alpha_1", "alpha%2", "ALPHAX"]);
    assert_eq!(total, 3);
    let (items, _) = list(by_name("ALPHA_")).await;
    assert_eq!(names(&items), ["Alpha_1"]);
    // `%` and `_` are literal, not wildcards.
    let (items, _) = list(by_name("%")).await;
    assert_eq!(names(&items), ["alpha%2", "100% done"]);
    let (items, _) = list(by_name("_")).await;
    assert_eq!(names(&items), ["Alpha_1", "under_score"]);
    let (items, _) = list(by_name("a_1")).await;
    assert_eq!(names(&items), ["Alpha_1"]);
    let (items, _) = list(by_name("!")).await;
    assert_eq!(names(&items), ["Bang!"]);
    let (items, _) = list(by_name("任务")).await;
    assert_eq!(names(&items), ["任务一"]);
    let (items, total) = list(by_name("zzz")).await;
    assert!(items.is_empty());
    assert_eq!(total, 0);

    // Group, handler, enabled: exact (and case-sensitive on every backend).
    let (items, _) = list(JobFilter {
        group: Some("system".into()),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "ALPHAX", "Ba-1"]);
    let (items, total) = list(JobFilter {
        group: Some("SYSTEM".into()),
        ..JobFilter::default()
    })
    .await;
    assert!(items.is_empty());
    assert_eq!(total, 0);
    let (items, _) = list(JobFilter {
        handler: Some("audit.purge".into()),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "Bang!"]);
    let (items, _) = list(JobFilter {
        handler: Some("audit".into()),
        ..JobFilter::default()
    })
    .await;
    assert!(items.is_empty());
    let (items, _) = list(JobFilter {
        enabled: Some(false),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "Beta"]);

    // Combined.
    let (items, total) = list(JobFilter {
        name: Some("A".into()),
        group: Some("default".into()),
        handler: Some("demo.echo".into()),
        enabled: Some(true),
    })
    .await;
    assert_eq!(names(&items), ["Alpha_1"]);
    assert_eq!(total, 1);

    // Paging: 1-based, total independent of the page.
    let all_names = names(&all);
    let mut seen = Vec::new();
    for page in 1..=5 {
        let (items, total) = jobs.list(&JobFilter::default(), page, 2).await.unwrap();
        assert_eq!(total, 9);
        assert_eq!(items.len(), if page < 5 { 2 } else { 1 }, "page {page}");
        seen.extend(items.into_iter().map(|j| j.name));
    }
    assert_eq!(seen, all_names);
    let (items, total) = jobs.list(&JobFilter::default(), 6, 2).await.unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 9);
    // Page 0 reads as page 1; a page far away is just empty.
    let (items, _) = jobs.list(&JobFilter::default(), 0, 2).await.unwrap();
    assert_eq!(names(&items), ["Alpha_1", "alpha%2"]);
    let (items, total) = jobs
        .list(&JobFilter::default(), u64::MAX, 50)
        .await
        .unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 9);
    let (items, total) = jobs.list(&by_name("a"), 2, 3).await.unwrap();
    assert_eq!(total, 6);
    assert_eq!(names(&items), ["ALPHAX", "Ba-1", "Bang!"]);
}

async fn job_update_bumps_version(store: Store) {
    let jobs = store.jobs();
    let mut input = new_job("before");
    input.builtin_key = Some("demo.echo:before".into());
    let created = jobs.create(&input, "alice", now()).await.unwrap();

    let mut changed = new_job("after");
    changed.group = "system".into();
    changed.handler = "audit.purge".into();
    changed.params = json!({"days": 30});
    changed.cron = "*/5 * * * *".into();
    changed.timezone = Some("Asia/Shanghai".into());
    changed.enabled = false;
    changed.retry_count = 2;
    changed.retry_interval_ms = 10;
    changed.timeout_ms = 0;
    changed.allow_concurrent = true;
    changed.misfire_policy = "run_once".into();
    changed.remark = "edited".into();
    // Ignored by update.
    changed.builtin_key = Some("something else".into());
    let later = at(1_800_000_000_000);

    let updated = jobs
        .update(created.id, 1, &changed, "bob", later)
        .await
        .unwrap();
    assert_matches_input(&updated, &changed);
    assert_eq!(updated.id, created.id);
    assert_eq!(updated.version, 2);
    assert_eq!(updated.builtin_key, created.builtin_key);
    assert_eq!(updated.created_at, created.created_at);
    assert_eq!(updated.created_by, "alice");
    assert_eq!(updated.updated_at, later);
    assert_eq!(updated.updated_by, "bob");
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), updated);

    // Saving the same values still counts as a change.
    let again = jobs
        .update(created.id, 2, &changed, "bob", later)
        .await
        .unwrap();
    assert_eq!(again.version, 3);
    // Keeping its own name is no clash.
    let renamed_back = jobs
        .update(created.id, 3, &input, "carol", later)
        .await
        .unwrap();
    assert_eq!(renamed_back.name, "before");
    assert_eq!(renamed_back.version, 4);
}

async fn job_update_stale_version(store: Store) {
    let jobs = store.jobs();
    let created = jobs.create(&new_job("j"), "u", now()).await.unwrap();
    jobs.update(created.id, 1, &new_job("j2"), "u", now())
        .await
        .unwrap();

    let err = jobs
        .update(created.id, 1, &new_job("j3"), "u", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let err = jobs
        .update(created.id, 7, &new_job("j3"), "u", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let current = jobs.get(created.id).await.unwrap().unwrap();
    assert_eq!(current.name, "j2");
    assert_eq!(current.version, 2);
}

async fn job_update_to_taken_name(store: Store) {
    let jobs = store.jobs();
    jobs.create(&new_job("taken"), "u", now()).await.unwrap();
    let other = jobs.create(&new_job("other"), "u", now()).await.unwrap();

    let err = jobs
        .update(other.id, 1, &new_job("taken"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    // Nothing changed, and the job is still usable afterwards.
    assert_eq!(jobs.get(other.id).await.unwrap().unwrap(), other);
    let updated = jobs
        .update(other.id, 1, &new_job("TAKEN"), "u", now())
        .await
        .unwrap();
    assert_eq!(updated.name, "TAKEN");
    assert_eq!(updated.version, 2);
}

async fn job_update_missing(store: Store) {
    let jobs = store.jobs();
    let err = jobs
        .update(424_242, 1, &new_job("ghost"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let created = jobs.create(&new_job("gone"), "u", now()).await.unwrap();
    jobs.delete(created.id).await.unwrap();
    let err = jobs
        .update(created.id, 1, &new_job("gone"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let err = jobs
        .set_enabled(created.id, false, None, "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
}

/// Two administrators saving the same version: exactly one wins.
async fn job_concurrent_updates_one_wins(store: Store) {
    let created = store
        .jobs()
        .create(&new_job("race"), "u", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut j = new_job("race");
            j.remark = format!("writer {i}");
            store.jobs().update(created.id, 1, &j, "u", now()).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => {
                assert_eq!(rec.version, 2);
                wins += 1;
            }
            Err(StorageError::StaleVersion { current: 2 }) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(
        store.jobs().get(created.id).await.unwrap().unwrap().version,
        2
    );
}

async fn job_concurrent_creates_one_wins(store: Store) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.jobs().create(&new_job("same"), "u", now()).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StorageError::NameTaken) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(wins, 1);
}

async fn job_set_enabled(store: Store) {
    let jobs = store.jobs();
    let created = jobs
        .create(&new_job("toggle"), "alice", now())
        .await
        .unwrap();
    assert!(created.enabled);
    let later = at(1_800_000_000_000);

    // Same value: nothing changes, not even the version.
    let same = jobs
        .set_enabled(created.id, true, None, "bob", later)
        .await
        .unwrap();
    assert_eq!(same, created);
    let same = jobs
        .set_enabled(created.id, true, Some(1), "bob", later)
        .await
        .unwrap();
    assert_eq!(same, created);

    // Change: version and updated_* move, the rest stays.
    let off = jobs
        .set_enabled(created.id, false, Some(1), "bob", later)
        .await
        .unwrap();
    assert!(!off.enabled);
    assert_eq!(off.version, 2);
    assert_eq!(off.updated_at, later);
    assert_eq!(off.updated_by, "bob");
    assert_eq!(off.created_at, created.created_at);
    assert_eq!(off.created_by, "alice");
    assert_eq!(off.name, created.name);
    assert_eq!(off.params, created.params);
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), off);

    // Stale version, whether or not the value would change.
    let err = jobs
        .set_enabled(created.id, true, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let err = jobs
        .set_enabled(created.id, false, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );

    let on = jobs
        .set_enabled(created.id, true, None, "carol", later)
        .await
        .unwrap();
    assert!(on.enabled);
    assert_eq!(on.version, 3);
    assert_eq!(on.updated_by, "carol");

    let err = jobs
        .set_enabled(999_999, true, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
}

/// Concurrent toggles: one change, one version bump; stale callers are told.
async fn job_concurrent_set_enabled(store: Store) {
    let created = store
        .jobs()
        .create(&new_job("flip"), "u", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        // Half check the version, half do not.
        let expected = (i % 2 == 0).then_some(1);
        tasks.push(tokio::spawn(async move {
            store
                .jobs()
                .set_enabled(created.id, false, expected, "u", now())
                .await
        }));
    }
    let mut stale = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => {
                assert!(!rec.enabled);
                assert_eq!(rec.version, 2);
            }
            Err(StorageError::StaleVersion { current: 2 }) => stale += 1,
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert!(stale <= 4, "{stale}");
    let rec = store.jobs().get(created.id).await.unwrap().unwrap();
    assert!(!rec.enabled);
    assert_eq!(rec.version, 2);
}

async fn job_delete_and_delete_many(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "u", now()).await.unwrap();
    let b = jobs.create(&new_job("b"), "u", now()).await.unwrap();
    let c = jobs.create(&new_job("c"), "u", now()).await.unwrap();
    let d = jobs.create(&new_job("d"), "u", now()).await.unwrap();

    assert_eq!(jobs.delete(a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(jobs.delete(a.id).await.unwrap(), None);
    assert_eq!(jobs.get(a.id).await.unwrap(), None);

    let deleted = jobs
        .delete_many(&[c.id, 987_654, b.id, c.id, a.id])
        .await
        .unwrap();
    assert_eq!(deleted, vec![b.clone(), c.clone()]);
    assert_eq!(jobs.delete_many(&[]).await.unwrap(), vec![]);
    assert_eq!(jobs.delete_many(&[b.id, c.id]).await.unwrap(), vec![]);

    let (left, total) = jobs.list(&JobFilter::default(), 1, 10).await.unwrap();
    assert_eq!(left, vec![d.clone()]);
    assert_eq!(total, 1);

    // The name is free again.
    let again = jobs.create(&new_job("a"), "u", now()).await.unwrap();
    assert!(again.id > d.id);

    // Many ids in one call (more than one IN chunk).
    let mut ids = Vec::new();
    for i in 0..120 {
        ids.push(
            jobs.create(&new_job(&format!("bulk {i}")), "u", now())
                .await
                .unwrap()
                .id,
        );
    }
    let mut wanted: Vec<i64> = ids.clone();
    wanted.extend(1_000_000..1_001_000);
    let deleted = jobs.delete_many(&wanted).await.unwrap();
    assert_eq!(deleted.iter().map(|j| j.id).collect::<Vec<_>>(), ids);
    let (_, total) = jobs.list(&JobFilter::default(), 1, 10).await.unwrap();
    assert_eq!(total, 2);
}

async fn job_corrupt_params(store: Store) {
    let jobs = store.jobs();
    let created = jobs.create(&new_job("broken"), "u", now()).await.unwrap();
    job::Entity::update_many()
        .col_expr(
            job::Column::Params,
            sea_orm::sea_query::Expr::val("{not json"),
        )
        .filter(job::Column::Id.eq(created.id))
        .exec(store.connection())
        .await
        .unwrap();
    let err = jobs.get(created.id).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    let err = jobs.list(&JobFilter::default(), 1, 10).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    // A failed batch deletes nothing.
    let err = jobs.delete_many(&[created.id]).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    let (_, total) = jobs
        .list(
            &JobFilter {
                name: Some("zzz".into()),
                ..Default::default()
            },
            1,
            10,
        )
        .await
        .unwrap();
    assert_eq!(total, 0);
    assert_eq!(jobs.count_in_group("default").await.unwrap(), 1);
}

async fn groups_create_duplicate_delete_list(store: Store) {
    let groups = store.groups();
    let ops = groups
        .create("ops", "运维", "Operations", now())
        .await
        .unwrap();
    assert_eq!(
        ops,
        GroupRecord {
            code: "ops".into(),
            label_zh: "运维".into(),
            label_en: "Operations".into(),
            builtin: false,
        }
    );
    assert_eq!(groups.get("ops").await.unwrap(), Some(ops.clone()));
    assert_eq!(groups.get("nope").await.unwrap(), None);

    let err = groups.create("ops", "x", "y", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");
    let err = groups.create("default", "x", "y", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");
    // Codes are case-sensitive on every backend.
    groups.create("OPS", "运维2", "Ops 2", now()).await.unwrap();
    groups.create("zeta", "z", "Zeta", now()).await.unwrap();
    groups.create("aa", "a", "AA", now()).await.unwrap();

    let codes: Vec<String> = groups
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.code)
        .collect();
    assert_eq!(codes, ["default", "system", "OPS", "aa", "ops", "zeta"]);
    let builtin: Vec<bool> = groups
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.builtin)
        .collect();
    assert_eq!(builtin, [true, true, false, false, false, false]);

    assert!(groups.delete("ops").await.unwrap());
    assert!(!groups.delete("ops").await.unwrap());
    assert_eq!(groups.get("ops").await.unwrap(), None);
    assert!(groups.get("OPS").await.unwrap().is_some());
    // Re-creating after delete works.
    groups
        .create("ops", "运维", "Operations", now())
        .await
        .unwrap();
}

async fn seed_marked_once(store: Store) {
    let t = now();
    assert!(store.mark_seed_once("builtin-jobs:v1", t).await.unwrap());
    assert!(!store.mark_seed_once("builtin-jobs:v1", t).await.unwrap());
    assert!(store.mark_seed_once("builtin-jobs:V1", t).await.unwrap());
    assert!(store.mark_seed_once("templates:v1", t).await.unwrap());

    // Concurrent starters: exactly one applies the seed.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.mark_seed_once("race", now()).await.unwrap()
        }));
    }
    let mut applied = 0;
    for t in tasks {
        if t.await.unwrap() {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    let markers = seed_marker::Entity::find()
        .all(store.connection())
        .await
        .unwrap();
    assert_eq!(markers.len(), 4);
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

// ---------------------------------------------------------------------------
// Run log and audit log
// ---------------------------------------------------------------------------

/// The run-log and audit-log scenarios, run on all three backends by the
/// same macro (in their own module so the macro's `sqlite`/`postgres`/`mysql`
/// modules do not clash with the ones above).
mod run_and_audit_logs {
    use super::*;
    use qiwu_storage::{
        AuditCursor, AuditFilter, EXPORT_ERROR_CHARS, NewAudit, RunCursor, RunFilter, RunRecord,
    };
    use sea_orm::ActiveValue::Set;

    scenarios!(
        runs_page_newest_first_with_a_cursor,
        runs_filters,
        runs_job_name_filter_seeks_named_jobs,
        runs_soft_delete_hides_everywhere,
        runs_export_rows,
        audit_record_filter_and_page,
    );

    /// 2025-11-25T00:00:00Z, the base of the fixtures' start times.
    const T0: i64 = 1_764_028_800_000;

    /// A run row to insert; `started_at` is what paging orders by.
    fn run_row(job_id: i64, job_name: &str, started_at: i64, status: &str) -> run::ActiveModel {
        run::ActiveModel {
            id: NotSet,
            fire_id: Set(rand::random::<i64>().abs()),
            job_id: Set(job_id),
            job_name: Set(job_name.to_owned()),
            handler: Set("demo.echo".into()),
            trigger: Set("schedule".into()),
            scheduled_at: Set(started_at - 3),
            attempt: Set(1),
            status: Set(status.to_owned()),
            started_at: Set(started_at),
            finished_at: Set(Some(started_at + 10)),
            duration_ms: Set(Some(10)),
            instance: Set("host-1".into()),
            output: Set(format!("output of {job_name}")),
            error: Set(String::new()),
            swept_at: Set(None),
            deleted_at: Set(None),
            trace_id: Set(None),
            cancel_requested_at: Set(None),
            cancelled_by: Set(None),
        }
    }

    async fn insert_runs(store: &Store, rows: Vec<run::ActiveModel>) {
        for chunk in rows.chunks(100) {
            run::Entity::insert_many(chunk.to_vec())
                .exec(store.connection())
                .await
                .unwrap();
        }
    }

    /// Every visible run through pages of `limit`, checking each page's size.
    async fn all_pages(store: &Store, filter: &RunFilter, limit: u64) -> Vec<RunRecord> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let (items, next) = store.runs().list(filter, limit, cursor).await.unwrap();
            assert!(items.len() as u64 <= limit);
            out.extend(items.iter().cloned());
            match next {
                Some(c) => {
                    assert_eq!(items.len() as u64, limit, "only the last page is short");
                    // The cursor survives its trip through a URL.
                    cursor = Some(RunCursor::decode(&c.encode()).unwrap());
                }
                None => break,
            }
        }
        out
    }

    fn keys(items: &[RunRecord]) -> Vec<(i64, i64)> {
        items
            .iter()
            .map(|r| (r.started_at.timestamp_millis(), r.id))
            .collect()
    }

    async fn runs_page_newest_first_with_a_cursor(store: Store) {
        // 250 runs; groups of five share a start time so ids break the ties,
        // and they are inserted out of time order.
        let rows: Vec<_> = (0..250i64)
            .map(|i| run_row(1, "paged", T0 + ((i * 37) % 250) / 5 * 1000, "success"))
            .collect();
        insert_runs(&store, rows).await;
        let all = all_pages(&store, &RunFilter::default(), 20).await;
        assert_eq!(all.len(), 250);
        let mut expected = keys(&all);
        expected.sort_unstable_by(|a, b| b.cmp(a));
        expected.dedup();
        assert_eq!(keys(&all), expected, "newest first, every row once");
        // Other page sizes see the same sequence.
        for limit in [1, 7, 100, 249, 250, 1000] {
            let again = all_pages(&store, &RunFilter::default(), limit).await;
            assert_eq!(keys(&again), expected, "limit {limit}");
        }
        // The last page says so; an empty result has no cursor.
        let (items, next) = store
            .runs()
            .list(&RunFilter::default(), 250, None)
            .await
            .unwrap();
        assert_eq!(items.len(), 250);
        assert_eq!(next, None);
        let past_end = RunCursor {
            started_at_ms: T0 - 1,
            id: i64::MAX,
        };
        let (items, next) = store
            .runs()
            .list(&RunFilter::default(), 20, Some(past_end))
            .await
            .unwrap();
        assert!(items.is_empty());
        assert_eq!(next, None);
        // Records carry every column.
        let first = &all[0];
        let got = store.runs().get(first.id).await.unwrap().unwrap();
        assert_eq!(&got, first);
        assert_eq!(got.output, "output of paged");
        assert_eq!(got.scheduled_at, at(got.started_at.timestamp_millis() - 3));
        assert_eq!(
            got.finished_at,
            Some(at(got.started_at.timestamp_millis() + 10))
        );
        assert_eq!(got.deleted_at, None);
        assert_eq!(store.runs().get(i64::MAX).await.unwrap(), None);
        // Recent runs of a job: the newest n.
        let recent = store.runs().recent_for_job(1, 10).await.unwrap();
        assert_eq!(keys(&recent), expected[..10].to_vec());
        assert!(store.runs().recent_for_job(2, 10).await.unwrap().is_empty());
    }

    /// The `jobName` filter finds the jobs it names and seeks their runs by
    /// job id, or walks the log in time order (a name thousands of jobs
    /// share); both give exactly the runs whose own copy of the name
    /// matches, renamed and deleted jobs included.
    async fn runs_job_name_filter_seeks_named_jobs(store: Store) {
        // 120 jobs with 3 runs each, interleaved in time; job 7 was renamed
        // (its older runs carry the old name); job 900 was deleted long ago
        // (no job row, its runs stay); one run of job 3 is hidden.
        let mut rows = Vec::new();
        let mut t = T0;
        for round in 0..3 {
            for job in 1..=120i64 {
                t += 1000;
                let name = if job == 7 && round < 2 {
                    "Old Seven".to_owned()
                } else {
                    format!("Job-{job:03}")
                };
                let status = if job % 10 == 0 { "failed" } else { "success" };
                let mut row = run_row(job, &name, t, status);
                if job == 3 && round == 1 {
                    row.deleted_at = Set(Some(t + 1));
                }
                rows.push(row);
            }
        }
        for i in 0..4 {
            rows.push(run_row(900, "gone for good", T0 - 10_000 + i, "success"));
        }
        // More jobs than a filter hands over as ids (5 000): `bulk` walks
        // the log by time, `bulk-1` names 1 111 of them.
        for job in 0..5_001i64 {
            rows.push(run_row(
                10_000 + job,
                &format!("bulk-{job}"),
                T0 - 20_000_000 + job,
                "success",
            ));
        }
        // Two rows share a start time, so ids break the tie across jobs.
        rows.push(run_row(11, "Job-011", T0 + 500_000, "success"));
        rows.push(run_row(12, "Job-012", T0 + 500_000, "success"));
        insert_runs(&store, rows).await;

        // The same rows straight from the table, filtered here.
        let everything = run::Entity::find().all(store.connection()).await.unwrap();
        let expected = |f: &RunFilter| -> Vec<(i64, i64)> {
            let mut out: Vec<(i64, i64)> = everything
                .iter()
                .filter(|r| r.deleted_at.is_none())
                .filter(|r| f.job_id.is_none_or(|j| r.job_id == j))
                .filter(|r| f.status.as_ref().is_none_or(|s| &r.status == s))
                .filter(|r| {
                    f.job_name
                        .as_ref()
                        .is_none_or(|n| r.job_name.to_lowercase().contains(&n.to_lowercase()))
                })
                .filter(|r| {
                    f.started_from
                        .is_none_or(|t| r.started_at >= t.timestamp_millis())
                })
                .map(|r| (r.started_at, r.id))
                .collect();
            out.sort_unstable_by(|a, b| b.cmp(a));
            out
        };
        let by_name = |name: &str| RunFilter {
            job_name: Some(name.into()),
            ..RunFilter::default()
        };
        let filters = [
            // One job, a few, many, more than are handed over as ids.
            by_name("job-042"),
            by_name("JOB-01"),
            by_name("job-0"),
            by_name("job"),
            by_name("bulk-1"),
            by_name("bulk"),
            by_name("-"),
            // Old names of renamed jobs, and deleted jobs, still match.
            by_name("old seven"),
            by_name("seven"),
            by_name("GONE"),
            by_name("e"),
            by_name("no such job"),
            RunFilter {
                job_id: Some(7),
                ..by_name("job-007")
            },
            RunFilter {
                job_id: Some(8),
                ..by_name("job-007")
            },
            RunFilter {
                status: Some("failed".into()),
                ..by_name("job-1")
            },
            RunFilter {
                status: Some("failed".into()),
                ..by_name("job-")
            },
            RunFilter {
                started_from: Some(at(T0 + 200_000)),
                ..by_name("job-00")
            },
        ];
        for f in &filters {
            let want = expected(f);
            // Paging one by one through thousands of rows takes long.
            let limits: &[u64] = if want.len() > 1000 {
                &[100]
            } else {
                &[1, 7, 100]
            };
            for &limit in limits {
                let got = all_pages(&store, f, limit).await;
                assert_eq!(keys(&got), want, "{f:?}, limit {limit}");
            }
        }
        assert_eq!(expected(&by_name("old seven")).len(), 2);
        assert_eq!(expected(&by_name("gone")).len(), 4);
        // Jobs 1–99, less job 7's two old runs and job 3's hidden one,
        // plus the two tied runs.
        assert_eq!(expected(&by_name("job-0")).len(), 99 * 3 - 2 - 1 + 2);
        assert_eq!(expected(&by_name("bulk-1")).len(), 1_111);

        // Runs inserted later, under a new name, are found at once.
        insert_runs(
            &store,
            vec![run_row(7, "Seven Reborn", T0 + 900_000, "success")],
        )
        .await;
        let got = all_pages(&store, &by_name("reborn"), 20).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].job_name, "Seven Reborn");
        assert_eq!(all_pages(&store, &by_name("seven"), 20).await.len(), 3);
    }

    async fn runs_filters(store: Store) {
        let mut rows = vec![
            run_row(1, "Nightly Report", T0, "success"),
            run_row(1, "Nightly Report", T0 + 1000, "failed"),
            run_row(2, "100% done_ok", T0 + 2000, "success"),
            run_row(3, "1000 doneXok", T0 + 3000, "timeout"),
            run_row(4, "清理过期日志", T0 + 4000, "skipped"),
        ];
        let mut other = run_row(5, "other handler", T0 + 5000, "running");
        other.handler = Set("demo.echo.v2".into());
        other.finished_at = Set(None);
        other.duration_ms = Set(None);
        rows.push(other);
        let mut hidden = run_row(1, "Nightly Report", T0 + 6000, "success");
        hidden.deleted_at = Set(Some(T0 + 7000));
        rows.push(hidden);
        insert_runs(&store, rows).await;

        let names = |items: Vec<RunRecord>| -> Vec<String> {
            items.into_iter().map(|r| r.job_name).collect()
        };
        let list = |filter: RunFilter| {
            let store = store.clone();
            async move { store.runs().list(&filter, 100, None).await.unwrap().0 }
        };
        assert_eq!(
            list(RunFilter::default()).await.len(),
            6,
            "deleted rows are invisible"
        );
        let by_job = list(RunFilter {
            job_id: Some(1),
            ..RunFilter::default()
        })
        .await;
        assert_eq!(by_job.len(), 2);
        assert_eq!(by_job[0].status.as_str(), "failed");
        // Job name: case-insensitive substring; `%` and `_` are literal.
        assert_eq!(
            names(
                list(RunFilter {
                    job_name: Some("nIGHTLY".into()),
                    ..RunFilter::default()
                })
                .await
            ),
            ["Nightly Report", "Nightly Report"]
        );
        assert_eq!(
            names(
                list(RunFilter {
                    job_name: Some("0% done_".into()),
                    ..RunFilter::default()
                })
                .await
            ),
            ["100% done_ok"]
        );
        assert_eq!(
            names(
                list(RunFilter {
                    job_name: Some("过期".into()),
                    ..RunFilter::default()
                })
                .await
            ),
            ["清理过期日志"]
        );
        // Handler: exact, so `demo.echo` does not match `demo.echo.v2`.
        assert_eq!(
            list(RunFilter {
                handler: Some("demo.echo".into()),
                ..RunFilter::default()
            })
            .await
            .len(),
            5
        );
        assert_eq!(
            names(
                list(RunFilter {
                    handler: Some("demo.echo.v2".into()),
                    ..RunFilter::default()
                })
                .await
            ),
            ["other handler"]
        );
        assert!(
            list(RunFilter {
                handler: Some("demo".into()),
                ..RunFilter::default()
            })
            .await
            .is_empty()
        );
        assert_eq!(
            names(
                list(RunFilter {
                    status: Some("timeout".into()),
                    ..RunFilter::default()
                })
                .await
            ),
            ["1000 doneXok"]
        );
        // Start range: both ends inclusive.
        let ranged = list(RunFilter {
            started_from: Some(at(T0 + 1000)),
            started_to: Some(at(T0 + 3000)),
            ..RunFilter::default()
        })
        .await;
        assert_eq!(
            names(ranged),
            ["1000 doneXok", "100% done_ok", "Nightly Report"]
        );
        let combined = list(RunFilter {
            job_id: Some(1),
            status: Some("success".into()),
            started_to: Some(at(T0)),
            ..RunFilter::default()
        })
        .await;
        assert_eq!(combined.len(), 1);
        assert_eq!(combined[0].started_at, at(T0));
        // Paging honours the filter.
        let filter = RunFilter {
            handler: Some("demo.echo".into()),
            ..RunFilter::default()
        };
        let paged = all_pages(&store, &filter, 2).await;
        assert_eq!(paged.len(), 5);
    }

    async fn runs_soft_delete_hides_everywhere(store: Store) {
        let rows: Vec<_> = (0..10i64)
            .map(|i| run_row(1 + i % 2, "del", T0 + i * 1000, "success"))
            .collect();
        insert_runs(&store, rows).await;
        let all = all_pages(&store, &RunFilter::default(), 100).await;
        let ids: Vec<i64> = all.iter().map(|r| r.id).collect();
        let deleted_at = now();

        // One.
        assert!(store.runs().soft_delete(ids[0], deleted_at).await.unwrap());
        assert!(!store.runs().soft_delete(ids[0], deleted_at).await.unwrap());
        assert!(
            !store
                .runs()
                .soft_delete(i64::MAX, deleted_at)
                .await
                .unwrap()
        );
        assert_eq!(store.runs().get(ids[0]).await.unwrap(), None);
        let row = run::Entity::find_by_id(ids[0])
            .one(store.connection())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            row.deleted_at,
            Some(truncate_to_millis(deleted_at).timestamp_millis()),
            "kept for audit.purge"
        );

        // Many: duplicates, unknown and already hidden ids count nothing.
        let many = vec![ids[1], ids[2], ids[2], ids[0], -5, i64::MAX];
        assert_eq!(
            store
                .runs()
                .soft_delete_many(&many, deleted_at)
                .await
                .unwrap(),
            2
        );
        assert_eq!(
            store
                .runs()
                .soft_delete_many(&[], deleted_at)
                .await
                .unwrap(),
            0
        );
        let left = all_pages(&store, &RunFilter::default(), 3).await;
        assert_eq!(
            left.iter().map(|r| r.id).collect::<Vec<_>>(),
            ids[3..].to_vec()
        );
        let recent = store
            .runs()
            .recent_for_job(ids_job(&all, ids[1]), 10)
            .await
            .unwrap();
        assert!(recent.iter().all(|r| r.id != ids[1]));
        // More ids than one IN list holds.
        let big: Vec<i64> = (1..=1200).map(|i| -i).chain([ids[3]]).collect();
        assert_eq!(
            store
                .runs()
                .soft_delete_many(&big, deleted_at)
                .await
                .unwrap(),
            1
        );

        // Clear: every visible row, once.
        assert_eq!(store.runs().clear(deleted_at).await.unwrap(), 6);
        assert_eq!(store.runs().clear(deleted_at).await.unwrap(), 0);
        let (items, next) = store
            .runs()
            .list(&RunFilter::default(), 20, None)
            .await
            .unwrap();
        assert!(items.is_empty());
        assert_eq!(next, None);
        assert!(store.runs().recent_for_job(1, 10).await.unwrap().is_empty());
        assert!(
            store
                .runs()
                .export(&RunFilter::default(), 100)
                .await
                .unwrap()
                .is_empty()
        );
        // The rows are still there for audit.purge.
        assert_eq!(
            run::Entity::find()
                .all(store.connection())
                .await
                .unwrap()
                .len(),
            10
        );
    }

    fn ids_job(all: &[RunRecord], id: i64) -> i64 {
        all.iter().find(|r| r.id == id).map(|r| r.job_id).unwrap()
    }

    async fn runs_export_rows(store: Store) {
        let mut rows: Vec<_> = (0..30i64)
            .map(|i| run_row(1 + i % 3, "export", T0 + i * 1000, "success"))
            .collect();
        let mut failed = run_row(9, "失败的任务", T0 + 100_000, "failed");
        // Longer than an export keeps, in multi-byte characters.
        failed.error = Set("错".repeat(4000));
        failed.output = Set("o".repeat(16_000));
        rows.push(failed);
        insert_runs(&store, rows).await;

        let exported = store
            .runs()
            .export(&RunFilter::default(), 100)
            .await
            .unwrap();
        assert_eq!(exported.len(), 31);
        let listed = all_pages(&store, &RunFilter::default(), 100).await;
        assert_eq!(
            exported.iter().map(|r| r.id).collect::<Vec<_>>(),
            listed.iter().map(|r| r.id).collect::<Vec<_>>(),
            "same order as the list"
        );
        let top = &exported[0];
        assert_eq!(top.job_name, "失败的任务");
        assert_eq!(top.status, "failed");
        assert_eq!(top.error.chars().count(), EXPORT_ERROR_CHARS as usize);
        assert!(top.error.chars().all(|c| c == '错'));
        assert_eq!(top.started_at, at(T0 + 100_000));
        assert_eq!(top.finished_at, Some(at(T0 + 100_010)));
        assert_eq!(top.duration_ms, Some(10));
        // The cap and the filter.
        assert_eq!(
            store
                .runs()
                .export(&RunFilter::default(), 5)
                .await
                .unwrap()
                .len(),
            5
        );
        assert!(
            store
                .runs()
                .export(&RunFilter::default(), 0)
                .await
                .unwrap()
                .is_empty()
        );
        let job2 = store
            .runs()
            .export(
                &RunFilter {
                    job_id: Some(2),
                    ..RunFilter::default()
                },
                100,
            )
            .await
            .unwrap();
        assert_eq!(job2.len(), 10);
        assert!(job2.iter().all(|r| r.job_id == 2));
        assert_eq!(job2[0].error, "");
    }

    async fn audit_record_filter_and_page(store: Store) {
        let audit = store.audit();
        let before = json!({"id": 7, "name": "旧名", "enabled": true});
        let after = json!({"id": 7, "name": "新名", "enabled": true});
        let first = audit
            .record(
                &NewAudit {
                    actor: "alice".into(),
                    action: "job.modify".into(),
                    target_type: "job".into(),
                    target_id: Some("7".into()),
                    summary: "修改任务「新名」".into(),
                    before: Some(before.clone()),
                    after: Some(after.clone()),
                },
                now(),
            )
            .await
            .unwrap();
        assert_eq!(first.at, truncate_to_millis(now()));
        assert_eq!(first.before, Some(before.clone()));
        assert_eq!(first.after, Some(after.clone()));

        // 30 more, some at the same instant so ids break the ties.
        for i in 0..30i64 {
            let entry = NewAudit {
                actor: if i % 2 == 0 { "bob" } else { "carol" }.into(),
                action: if i % 3 == 0 {
                    "run.clear"
                } else {
                    "job.delete"
                }
                .into(),
                target_type: if i % 3 == 0 { "run" } else { "job" }.into(),
                target_id: (i % 3 != 0).then(|| i.to_string()),
                summary: format!("entry {i}"),
                before: (i % 3 != 0).then(|| json!({"id": i})),
                after: None,
            };
            audit.record(&entry, at(T0 + (i / 3) * 1000)).await.unwrap();
        }

        // Paging: every entry once, newest first by (at, id).
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (items, next) = audit
                .list(&AuditFilter::default(), 4, cursor)
                .await
                .unwrap();
            seen.extend(items.iter().map(|a| (a.at, a.id)));
            match next {
                Some(c) => cursor = Some(AuditCursor::decode(&c.encode()).unwrap()),
                None => break,
            }
        }
        assert_eq!(seen.len(), 31);
        let mut sorted = seen.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        assert_eq!(seen, sorted);
        assert_eq!(seen[30].1, first.id, "the oldest entry comes last");

        let list = |filter: AuditFilter| {
            let store = store.clone();
            async move { store.audit().list(&filter, 100, None).await.unwrap().0 }
        };
        let mine = list(AuditFilter {
            actor: Some("alice".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(mine, vec![first.clone()]);
        assert_eq!(
            list(AuditFilter {
                action: Some("run.clear".into()),
                ..AuditFilter::default()
            })
            .await
            .len(),
            10
        );
        let bob_deletes = list(AuditFilter {
            actor: Some("bob".into()),
            action: Some("job.delete".into()),
            target_type: Some("job".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(bob_deletes.len(), 10);
        let one = list(AuditFilter {
            target_type: Some("job".into()),
            target_id: Some("4".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].before, Some(json!({"id": 4})));
        assert_eq!(one[0].after, None);
        // Time range, both ends inclusive: entries 3..=8 are at T0+1s and T0+2s.
        let ranged = list(AuditFilter {
            from: Some(at(T0 + 1000)),
            to: Some(at(T0 + 2000)),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(ranged.len(), 6);
        assert!(
            list(AuditFilter {
                actor: Some("ALICE".into()),
                ..AuditFilter::default()
            })
            .await
            .is_empty(),
            "exact match"
        );

        // A batch lands in one go, each entry as `record` would write it.
        let batch: Vec<NewAudit> = (0..250)
            .map(|i| NewAudit {
                actor: "dave".into(),
                action: "job.delete".into(),
                target_type: "job".into(),
                target_id: Some(format!("b{i}")),
                summary: format!("删除任务「b{i}」"),
                before: Some(json!({"id": i, "name": format!("b{i}")})),
                after: None,
            })
            .collect();
        audit.record_many(&batch, now()).await.unwrap();
        audit.record_many(&[], now()).await.unwrap();
        let daves = list(AuditFilter {
            actor: Some("dave".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(daves.len(), 100, "a page holds at most the limit");
        assert!(daves.iter().all(|a| a.at == truncate_to_millis(now())));
        let b7 = list(AuditFilter {
            target_id: Some("b7".into()),
            ..AuditFilter::default()
        })
        .await;
        assert_eq!(b7.len(), 1);
        assert_eq!(b7[0].before, Some(json!({"id": 7, "name": "b7"})));
        assert_eq!(b7[0].summary, "删除任务「b7」");

        // Column limits never lose an entry.
        let huge = audit
            .record(
                &NewAudit {
                    actor: "a".repeat(300),
                    action: "job.export".into(),
                    target_type: "job".into(),
                    target_id: None,
                    summary: "导出".repeat(5000),
                    before: None,
                    after: Some(json!({"blob": "x".repeat(70_000)})),
                },
                now(),
            )
            .await
            .unwrap();
        assert_eq!(huge.actor, "a".repeat(128));
        assert_eq!(huge.summary.chars().count(), 2000);
        let note = huge.after.unwrap();
        assert!(note["omitted"].is_string(), "{note}");
    }
}

// ---------------------------------------------------------------------------
// Settings, notification templates, inbox, outbox and purge. Kept in their
// own module with their own `scenarios!` list so that additions above and
// here never touch the same lines.
// ---------------------------------------------------------------------------

mod notify_scenarios {
    use super::*;
    use chrono::Duration;
    use qiwu_domain::notify::{SUPER_ADMINS, TEMPLATES, TIMEOUT_ALERT};
    use qiwu_storage::{
        NewNotification, NotificationCursor, NotificationRecord, OutboxStatus, TemplateTexts,
    };
    use sea_orm::{PaginatorTrait, Set};

    scenarios!(
        settings_set_get_list_audited,
        templates_seeded_once_and_never_overwritten,
        inbox_keyset_paging_and_read_state,
        outbox_claim_lease_expiry_and_three_attempts,
        outbox_concurrent_claims_take_each_row_once,
        purge_deletes_expired_rows_in_batches,
    );

    fn note(recipient: &str, title: &str) -> NewNotification {
        NewNotification {
            recipient: recipient.to_owned(),
            template_code: TIMEOUT_ALERT.to_owned(),
            title: title.to_owned(),
            body: format!("body of {title}"),
        }
    }

    fn payload(n: &NotificationRecord) -> String {
        json!({"notificationId": n.id, "title": n.title}).to_string()
    }

    async fn setting_audits(store: &Store) -> Vec<audit_log::Model> {
        let mut rows = audit_log::Entity::find()
            .filter(audit_log::Column::Action.eq("setting.modify"))
            .all(store.connection())
            .await
            .unwrap();
        rows.sort_by_key(|r| r.id);
        rows
    }

    async fn settings_set_get_list_audited(store: Store) {
        let settings = store.settings();
        assert_eq!(settings.get("audit.retention_days").await.unwrap(), None);
        assert!(settings.list().await.unwrap().is_empty());

        let first = settings
            .set("audit.retention_days", "30", "alice", now())
            .await
            .unwrap();
        assert!(first.changed);
        assert_eq!(first.before, None);
        let got = settings.get("audit.retention_days").await.unwrap().unwrap();
        assert_eq!(got, first.record);
        assert_eq!(got.value, "30");
        assert_eq!(got.updated_by, "alice");
        assert_eq!(got.updated_at, truncate_to_millis(now()));

        // The same value again: nothing written, nothing audited.
        let same = settings
            .set(
                "audit.retention_days",
                "30",
                "bob",
                now() + Duration::hours(1),
            )
            .await
            .unwrap();
        assert!(!same.changed);
        assert_eq!(same.record.updated_by, "alice");

        let second = settings
            .set(
                "audit.retention_days",
                "60",
                "bob",
                now() + Duration::hours(2),
            )
            .await
            .unwrap();
        assert!(second.changed);
        assert_eq!(second.before.as_deref(), Some("30"));
        settings
            .set(
                "notify.webhook_url",
                "https://hooks.example.com/x",
                "bob",
                now(),
            )
            .await
            .unwrap();
        let keys: Vec<String> = settings
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.key)
            .collect();
        assert_eq!(keys, ["audit.retention_days", "notify.webhook_url"]);
        assert_eq!(
            settings
                .get("audit.retention_days")
                .await
                .unwrap()
                .unwrap()
                .value,
            "60"
        );

        let audits = setting_audits(&store).await;
        assert_eq!(audits.len(), 3);
        assert_eq!(audits[0].actor, "alice");
        assert_eq!(audits[0].target_type, "setting");
        assert_eq!(audits[0].target_id.as_deref(), Some("audit.retention_days"));
        assert_eq!(audits[0].before_json, None);
        let before: serde_json::Value =
            serde_json::from_str(audits[1].before_json.as_deref().unwrap()).unwrap();
        let after: serde_json::Value =
            serde_json::from_str(audits[1].after_json.as_deref().unwrap()).unwrap();
        assert_eq!(
            before,
            json!({"key": "audit.retention_days", "value": "30"})
        );
        assert_eq!(after, json!({"key": "audit.retention_days", "value": "60"}));
        assert_eq!(
            audits[1].at,
            truncate_to_millis(now() + Duration::hours(2)).timestamp_millis()
        );

        // First writes of one key racing each other all succeed (upsert).
        let mut tasks = Vec::new();
        for i in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .settings()
                    .set("race.key", &format!("v{i}"), "racer", now())
                    .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let raced = settings.get("race.key").await.unwrap().unwrap();
        assert!(raced.value.starts_with('v'));
    }

    async fn templates_seeded_once_and_never_overwritten(store: Store) {
        let templates = store.templates();
        assert!(templates.list().await.unwrap().is_empty());
        assert_eq!(
            templates.seed_defaults(now()).await.unwrap(),
            TEMPLATES
                .iter()
                .map(|t| t.code.to_owned())
                .collect::<Vec<_>>()
        );
        assert!(templates.seed_defaults(now()).await.unwrap().is_empty());
        let seeded = templates.get(TIMEOUT_ALERT).await.unwrap().unwrap();
        let def = &TEMPLATES[0];
        assert_eq!(seeded.title_zh, "任务超时：{jobName}");
        assert_eq!(seeded.body_en, def.body_en);
        assert_eq!(seeded.updated_by, "system");

        let edited = TemplateTexts {
            title_zh: "超时了：{jobName}".into(),
            body_zh: "处理器 {handler}".into(),
            title_en: "Timeout: {jobName}".into(),
            body_en: "Handler {handler}".into(),
        };
        let later = now() + Duration::days(1);
        let updated = templates
            .update(TIMEOUT_ALERT, &edited, "alice", later)
            .await
            .unwrap();
        assert_eq!(updated.title_zh, edited.title_zh);
        assert_eq!(updated.updated_by, "alice");
        assert_eq!(updated.updated_at, truncate_to_millis(later));
        let listed = templates.list().await.unwrap();
        assert_eq!(listed.len(), TEMPLATES.len());
        assert!(listed.contains(&updated));
        let audit = audit_log::Entity::find()
            .filter(audit_log::Column::Action.eq("template.modify"))
            .one(store.connection())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(audit.target_id.as_deref(), Some(TIMEOUT_ALERT));
        assert!(audit.after_json.unwrap().contains("超时了"));
        assert!(audit.before_json.unwrap().contains("任务超时"));

        // Seeding again, even with its marker gone, never overwrites an edit.
        assert!(templates.seed_defaults(now()).await.unwrap().is_empty());
        seed_marker::Entity::delete_by_id(format!("template:{TIMEOUT_ALERT}"))
            .exec(store.connection())
            .await
            .unwrap();
        assert!(templates.seed_defaults(now()).await.unwrap().is_empty());
        assert_eq!(templates.get(TIMEOUT_ALERT).await.unwrap(), Some(updated));

        let missing = templates.update("no.such", &edited, "alice", now()).await;
        assert!(
            matches!(missing, Err(StorageError::NotFound)),
            "{missing:?}"
        );
    }

    async fn inbox_keyset_paging_and_read_state(store: Store) {
        let inbox = store.notifications();
        let base = now();
        // Two pairs share a created_at, so the id breaks the tie.
        let offsets = [0, 0, 1, 2, 2, 3];
        let mut ids = Vec::new();
        for (i, off) in offsets.iter().enumerate() {
            let n = inbox
                .create(
                    &note(SUPER_ADMINS, &format!("n{i}")),
                    base + Duration::seconds(*off),
                )
                .await
                .unwrap();
            assert_eq!(n.read_at, None);
            ids.push(n.id);
        }
        let other = inbox
            .create(&note("someone", "private"), base)
            .await
            .unwrap();

        // Newest first: created_at desc, then id desc.
        let mut expected = ids.clone();
        expected.sort_by_key(|id| {
            let i = ids.iter().position(|x| x == id).unwrap();
            (std::cmp::Reverse(offsets[i]), std::cmp::Reverse(*id))
        });
        let mut seen = Vec::new();
        let mut cursor: Option<NotificationCursor> = None;
        let mut pages = 0;
        loop {
            let page = inbox.list(SUPER_ADMINS, false, 4, cursor).await.unwrap();
            pages += 1;
            seen.extend(page.items.iter().map(|n| n.id));
            match page.next_cursor {
                Some(c) => {
                    // Cursors survive the trip through text.
                    cursor = Some(NotificationCursor::parse(&c.to_string()).unwrap());
                }
                None => break,
            }
        }
        assert_eq!(pages, 2);
        assert_eq!(seen, expected);
        let exact = inbox.list(SUPER_ADMINS, false, 6, None).await.unwrap();
        assert_eq!(exact.items.len(), 6);
        assert_eq!(exact.next_cursor, None, "no cursor when nothing follows");
        assert!(
            inbox
                .list(SUPER_ADMINS, false, 0, None)
                .await
                .unwrap()
                .items
                .is_empty()
        );

        // Read state.
        assert_eq!(inbox.count_unread(SUPER_ADMINS).await.unwrap(), 6);
        let read = inbox
            .mark_read(SUPER_ADMINS, ids[2], base)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.read_at, Some(truncate_to_millis(base)));
        let again = inbox
            .mark_read(SUPER_ADMINS, ids[2], base + Duration::hours(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            again.read_at,
            Some(truncate_to_millis(base)),
            "first read time kept"
        );
        assert_eq!(
            inbox.mark_read(SUPER_ADMINS, other.id, base).await.unwrap(),
            None
        );
        assert_eq!(
            inbox.mark_read(SUPER_ADMINS, 999_999, base).await.unwrap(),
            None
        );
        let unread = inbox.list(SUPER_ADMINS, true, 50, None).await.unwrap();
        assert_eq!(unread.items.len(), 5);
        assert!(unread.items.iter().all(|n| n.id != ids[2]));
        // Unread-only paging walks the same way.
        let first = inbox.list(SUPER_ADMINS, true, 3, None).await.unwrap();
        let rest = inbox
            .list(SUPER_ADMINS, true, 3, first.next_cursor)
            .await
            .unwrap();
        assert_eq!(first.items.len() + rest.items.len(), 5);
        assert_eq!(rest.next_cursor, None);

        assert_eq!(inbox.mark_all_read(SUPER_ADMINS, base).await.unwrap(), 5);
        assert_eq!(inbox.count_unread(SUPER_ADMINS).await.unwrap(), 0);
        assert_eq!(inbox.mark_all_read(SUPER_ADMINS, base).await.unwrap(), 0);
        assert_eq!(inbox.count_unread("someone").await.unwrap(), 1);
    }

    async fn outbox_claim_lease_expiry_and_three_attempts(store: Store) {
        let t0 = now();
        let lease = Duration::minutes(2);
        let (n, row) = store
            .notifications()
            .create_with_delivery(&note(SUPER_ADMINS, "alert"), payload, t0)
            .await
            .unwrap();
        assert_eq!(row.notification_id, n.id);
        assert_eq!(row.status, OutboxStatus::Pending);
        assert_eq!(row.attempts, 0);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&row.payload).unwrap(),
            json!({"notificationId": n.id, "title": "alert"})
        );
        let outbox = store.outbox();
        assert_eq!(outbox.count_unfinished().await.unwrap(), 1);

        // Claim, then "crash": never finish. Nobody else gets it while leased.
        let first = outbox.claim_due(t0, lease, 10).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].status, OutboxStatus::Sending);
        assert_eq!(first[0].next_attempt_at, truncate_to_millis(t0 + lease));
        assert!(
            outbox
                .claim_due(t0 + Duration::seconds(119), lease, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Past the lease it is due again; the crashed attempt did not count.
        let t1 = t0 + lease + Duration::milliseconds(1);
        let second = outbox.claim_due(t1, lease, 10).await.unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].id, row.id);
        assert_eq!(second[0].attempts, 0);
        // The old holder lost its lease: its outcome is not recorded.
        assert!(!outbox.mark_sent(&first[0], t1).await.unwrap());
        assert_eq!(
            outbox.mark_failed(&first[0], "late", t1).await.unwrap(),
            None
        );

        // Attempt 1 fails: due again one minute later.
        assert_eq!(
            outbox
                .mark_failed(&second[0], "HTTP 500", t1)
                .await
                .unwrap(),
            Some(OutboxStatus::Pending)
        );
        let stored = outbox.get(row.id).await.unwrap().unwrap();
        assert_eq!(stored.attempts, 1);
        assert_eq!(stored.last_error.as_deref(), Some("HTTP 500"));
        assert_eq!(
            stored.next_attempt_at,
            truncate_to_millis(t1 + Duration::minutes(1))
        );
        assert!(
            outbox
                .claim_due(t1 + Duration::seconds(59), lease, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Attempt 2 fails: five minutes.
        let t2 = t1 + Duration::minutes(1);
        let third = outbox.claim_due(t2, lease, 10).await.unwrap();
        assert_eq!(third.len(), 1);
        assert_eq!(
            outbox.mark_failed(&third[0], "HTTP 500", t2).await.unwrap(),
            Some(OutboxStatus::Pending)
        );
        assert!(
            outbox
                .claim_due(t2 + Duration::minutes(4), lease, 10)
                .await
                .unwrap()
                .is_empty()
        );
        // Attempt 3 fails: given up for good.
        let t3 = t2 + Duration::minutes(5);
        let fourth = outbox.claim_due(t3, lease, 10).await.unwrap();
        assert_eq!(fourth.len(), 1);
        assert_eq!(fourth[0].attempts, 2);
        assert_eq!(
            outbox
                .mark_failed(&fourth[0], &"x".repeat(5000), t3)
                .await
                .unwrap(),
            Some(OutboxStatus::Failed)
        );
        let failed = outbox.get(row.id).await.unwrap().unwrap();
        assert_eq!(failed.status, OutboxStatus::Failed);
        assert_eq!(failed.attempts, 3);
        assert_eq!(failed.last_error.map(|e| e.chars().count()), Some(2000));
        assert!(
            outbox
                .claim_due(t3 + Duration::days(1), lease, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(outbox.count_unfinished().await.unwrap(), 0);

        // A delivery that succeeds; and one given back unsent when stopping.
        let (_, ok_row) = store
            .notifications()
            .create_with_delivery(&note(SUPER_ADMINS, "ok"), payload, t3)
            .await
            .unwrap();
        let (_, back_row) = store
            .notifications()
            .create_with_delivery(&note(SUPER_ADMINS, "back"), payload, t3)
            .await
            .unwrap();
        let claimed = outbox.claim_due(t3, lease, 10).await.unwrap();
        assert_eq!(
            claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
            [ok_row.id, back_row.id]
        );
        assert!(outbox.mark_sent(&claimed[0], t3).await.unwrap());
        assert!(
            !outbox.mark_sent(&claimed[0], t3).await.unwrap(),
            "only once"
        );
        let sent = outbox.get(ok_row.id).await.unwrap().unwrap();
        assert_eq!(sent.status, OutboxStatus::Sent);
        assert_eq!(sent.attempts, 1);
        assert_eq!(sent.sent_at, Some(truncate_to_millis(t3)));
        assert!(outbox.release(&claimed[1], t3).await.unwrap());
        let back = outbox.get(back_row.id).await.unwrap().unwrap();
        assert_eq!(back.status, OutboxStatus::Pending);
        assert_eq!(back.attempts, 0);
        assert_eq!(outbox.count_unfinished().await.unwrap(), 1);
        assert_eq!(outbox.claim_due(t3, lease, 10).await.unwrap().len(), 1);
    }

    async fn outbox_concurrent_claims_take_each_row_once(store: Store) {
        let t0 = now();
        let mut ids = Vec::new();
        for i in 0..12 {
            let (_, row) = store
                .notifications()
                .create_with_delivery(&note(SUPER_ADMINS, &format!("n{i}")), payload, t0)
                .await
                .unwrap();
            ids.push(row.id);
        }
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .outbox()
                    .claim_due(t0, Duration::minutes(2), 12)
                    .await
                    .unwrap()
            }));
        }
        let mut claimed = Vec::new();
        for t in tasks {
            claimed.extend(t.await.unwrap().into_iter().map(|r| r.id));
        }
        claimed.sort_unstable();
        assert_eq!(claimed, ids, "every row claimed exactly once");
    }

    fn old_run(fire_id: i64, started_at: i64, status: &str, deleted: bool) -> run::ActiveModel {
        run::ActiveModel {
            id: NotSet,
            fire_id: Set(fire_id),
            job_id: Set(1),
            job_name: Set("job".into()),
            handler: Set("demo.echo".into()),
            trigger: Set("schedule".into()),
            scheduled_at: Set(started_at),
            attempt: Set(1),
            status: Set(status.into()),
            started_at: Set(started_at),
            finished_at: Set(None),
            duration_ms: Set(None),
            instance: Set("host".into()),
            output: Set(String::new()),
            error: Set(String::new()),
            swept_at: Set(None),
            deleted_at: Set(deleted.then_some(started_at)),
            trace_id: Set(None),
            cancel_requested_at: Set(None),
            cancelled_by: Set(None),
        }
    }

    fn audit_at(at: i64) -> audit_log::ActiveModel {
        audit_log::ActiveModel {
            id: NotSet,
            at: Set(at),
            actor: Set("a".into()),
            action: Set("job.create".into()),
            target_type: Set("job".into()),
            target_id: Set(None),
            summary: Set(String::new()),
            before_json: Set(None),
            after_json: Set(None),
        }
    }

    async fn purge_deletes_expired_rows_in_batches(store: Store) {
        let db = store.connection();
        let cutoff = now();
        let old = cutoff.timestamp_millis() - 1;
        let fresh = cutoff.timestamp_millis();
        // Five expired runs (two soft-deleted), one expired but still
        // running, two fresh ones.
        for (i, (ts, status, deleted)) in [
            (old, "success", false),
            (old - 10, "failed", true),
            (old - 20, "timeout", false),
            (old - 30, "skipped", true),
            (old, "success", false),
            (old - 40, "running", false),
            (fresh, "success", false),
            (fresh + 5, "success", true),
        ]
        .into_iter()
        .enumerate()
        {
            old_run(i as i64 + 1, ts, status, deleted)
                .insert(db)
                .await
                .unwrap();
        }
        for ts in [old, old - 1, old - 2, fresh] {
            audit_at(ts).insert(db).await.unwrap();
        }
        let inbox = store.notifications();
        let old_time = at(old);
        inbox
            .create(&note(SUPER_ADMINS, "old plain"), old_time)
            .await
            .unwrap();
        inbox
            .create_with_delivery(&note(SUPER_ADMINS, "old sent"), payload, old_time)
            .await
            .unwrap();
        inbox
            .create_with_delivery(&note(SUPER_ADMINS, "old pending"), payload, at(old - 5))
            .await
            .unwrap();
        let (keep, keep_row) = inbox
            .create_with_delivery(&note(SUPER_ADMINS, "fresh"), payload, at(fresh))
            .await
            .unwrap();

        let purge = store.purge();
        let mut batches = Vec::new();
        loop {
            let n = purge.runs_before(cutoff, 2).await.unwrap();
            batches.push(n);
            if n < 2 {
                break;
            }
        }
        assert_eq!(batches, [2, 2, 1]);
        let left: Vec<(String, i64)> = run::Entity::find()
            .all(db)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.status, r.started_at))
            .collect();
        assert_eq!(left.len(), 3);
        assert!(left.contains(&("running".to_string(), old - 40)));
        assert_eq!(left.iter().filter(|(_, ts)| *ts >= fresh).count(), 2);

        assert_eq!(purge.audit_logs_before(cutoff, 2).await.unwrap(), 2);
        assert_eq!(purge.audit_logs_before(cutoff, 2).await.unwrap(), 1);
        assert_eq!(purge.audit_logs_before(cutoff, 2).await.unwrap(), 0);
        assert_eq!(audit_log::Entity::find().count(db).await.unwrap(), 1);

        let first = purge.notifications_before(cutoff, 2).await.unwrap();
        let second = purge.notifications_before(cutoff, 2).await.unwrap();
        let third = purge.notifications_before(cutoff, 2).await.unwrap();
        assert_eq!(first.notifications + second.notifications, 3);
        assert_eq!(first.outbox + second.outbox, 2);
        assert_eq!(third.notifications + third.outbox, 0);
        let notes = notification::Entity::find().all(db).await.unwrap();
        assert_eq!(notes.iter().map(|n| n.id).collect::<Vec<_>>(), [keep.id]);
        let rows = outbox::Entity::find().all(db).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [keep_row.id]);
    }
}

/// API keys of service accounts, on all three backends.
mod api_key_scenarios {
    use super::*;
    use qiwu_storage::{API_KEY_MARK, ApiKeyRecord};

    scenarios!(
        api_key_create_authenticate_list_revoke,
        api_key_wrong_secret_or_prefix_fails,
        api_key_last_used_is_written_at_most_once_a_minute,
        api_key_concurrent_authentications,
    );

    /// 2025-11-25T00:00:00Z.
    const T0: i64 = 1_764_028_800_000;

    fn perms(codes: &[&str]) -> Vec<String> {
        codes.iter().map(|c| c.to_string()).collect()
    }

    /// The stored row, hash included.
    async fn row(store: &Store, id: i64) -> api_key::Model {
        api_key::Entity::find_by_id(id)
            .one(store.connection())
            .await
            .unwrap()
            .unwrap()
    }

    async fn api_key_create_authenticate_list_revoke(store: Store) {
        let keys = store.api_keys();
        let (wf, wf_key) = keys
            .create(
                "wf service",
                &perms(&["scheduler.task.run", "scheduler.task.view"]),
                "admin",
                at(T0),
            )
            .await
            .unwrap();
        assert_eq!(wf.name, "wf service");
        assert_eq!(
            wf.perms,
            perms(&["scheduler.task.run", "scheduler.task.view"])
        );
        assert_eq!(wf.created_at, at(T0));
        assert_eq!(wf.created_by, "admin");
        assert_eq!(wf.revoked_at, None);
        assert_eq!(wf.last_used_at, None);
        assert!(!wf.is_revoked());
        // qk_<prefix>_<secret>, the prefix being the stored one.
        assert_eq!(wf.prefix.len(), 8);
        assert!(wf.prefix.chars().all(|c| c.is_ascii_alphanumeric()));
        let secret = wf_key
            .strip_prefix(&format!("{API_KEY_MARK}{}_", wf.prefix))
            .unwrap_or_else(|| panic!("{wf_key} starts with qk_ and the prefix"));
        assert!(secret.len() >= 43, "32 random bytes or more: {secret}");
        // Only a SHA-256 hash of the secret is stored.
        let stored = row(&store, wf.id).await;
        assert_eq!(stored.secret_hash.len(), 64);
        assert!(!stored.secret_hash.contains(secret));
        assert!(!format!("{stored:?}").contains(secret));

        // A second key with a long actor; names need not be unique.
        let (other, other_key) = keys
            .create(
                "wf service",
                &perms(&["scheduler.run.browse"]),
                &"a".repeat(300),
                at(T0 + 1),
            )
            .await
            .unwrap();
        assert_eq!(other.created_by, "a".repeat(128));
        assert_ne!(other.prefix, wf.prefix);
        assert_ne!(other_key, wf_key);

        // Newest first, revoked ones included.
        let listed: Vec<i64> = keys.list().await.unwrap().iter().map(|k| k.id).collect();
        assert_eq!(listed, vec![other.id, wf.id]);
        assert_eq!(keys.get(wf.id).await.unwrap(), Some(wf.clone()));
        assert_eq!(keys.get(wf.id + 1000).await.unwrap(), None);

        let used = keys
            .authenticate(&wf_key, at(T0 + 5))
            .await
            .unwrap()
            .expect("the key authenticates");
        assert_eq!(
            used,
            ApiKeyRecord {
                last_used_at: Some(at(T0 + 5)),
                ..wf.clone()
            }
        );

        // Revoke: once for real, then idempotently, keeping the first time.
        let (revoked, newly) = keys.revoke(wf.id, at(T0 + 10)).await.unwrap();
        assert!(newly);
        assert_eq!(revoked.revoked_at, Some(at(T0 + 10)));
        let (again, newly) = keys.revoke(wf.id, at(T0 + 20)).await.unwrap();
        assert!(!newly);
        assert_eq!(again.revoked_at, Some(at(T0 + 10)));
        assert!(matches!(
            keys.revoke(wf.id + 1000, at(T0)).await,
            Err(StorageError::NotFound)
        ));
        assert_eq!(keys.authenticate(&wf_key, at(T0 + 30)).await.unwrap(), None);
        // The other key is untouched.
        assert!(
            keys.authenticate(&other_key, at(T0 + 30))
                .await
                .unwrap()
                .is_some()
        );
        let listed = keys.list().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[1].revoked_at, Some(at(T0 + 10)));
        assert_eq!(listed[0].revoked_at, None);
    }

    async fn api_key_wrong_secret_or_prefix_fails(store: Store) {
        let keys = store.api_keys();
        let (k, key) = keys
            .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
            .await
            .unwrap();
        let head = format!("{API_KEY_MARK}{}_", k.prefix);
        let secret = &key[head.len()..];
        // Flip the secret's last character.
        let last = secret.chars().last().unwrap();
        let flipped = if last == 'A' { 'B' } else { 'A' };
        let wrong_secret = format!("{head}{}{flipped}", &secret[..secret.len() - 1]);
        let wrong_prefix = format!("{API_KEY_MARK}ZZZZZZZZ_{secret}");
        for bad in [
            wrong_secret.as_str(),
            wrong_prefix.as_str(),
            &format!("{head}{secret}x"),
            &head,
            &key[..key.len() - 1],
            &key[API_KEY_MARK.len()..],
            "qk_",
            "",
            "not a key",
        ] {
            assert_eq!(
                keys.authenticate(bad, at(T0 + 1)).await.unwrap(),
                None,
                "{bad}"
            );
        }
        // Failed attempts record no use.
        assert_eq!(row(&store, k.id).await.last_used_at, None);
        assert!(keys.authenticate(&key, at(T0 + 1)).await.unwrap().is_some());
    }

    async fn api_key_last_used_is_written_at_most_once_a_minute(store: Store) {
        let keys = store.api_keys();
        let (k, key) = keys
            .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
            .await
            .unwrap();
        let use_at = |ms: i64| {
            let keys = store.api_keys();
            let key = key.clone();
            async move { keys.authenticate(&key, at(ms)).await.unwrap().unwrap() }
        };
        let stored = || async { row(&store, k.id).await.last_used_at };

        assert_eq!(use_at(T0 + 1000).await.last_used_at, Some(at(T0 + 1000)));
        assert_eq!(stored().await, Some(T0 + 1000));
        // Within the minute: no write, and the record says so.
        for ms in [T0 + 1001, T0 + 31_000, T0 + 60_999] {
            assert_eq!(use_at(ms).await.last_used_at, Some(at(T0 + 1000)), "{ms}");
            assert_eq!(stored().await, Some(T0 + 1000));
        }
        // A minute later: written again.
        assert_eq!(
            use_at(T0 + 61_000).await.last_used_at,
            Some(at(T0 + 61_000))
        );
        assert_eq!(stored().await, Some(T0 + 61_000));
        // A clock behind the stored time writes nothing.
        assert_eq!(use_at(T0).await.last_used_at, Some(at(T0 + 61_000)));
        assert_eq!(stored().await, Some(T0 + 61_000));
        assert_eq!(
            use_at(T0 + 200_000).await.last_used_at,
            Some(at(T0 + 200_000))
        );
    }

    async fn api_key_concurrent_authentications(store: Store) {
        let (k, key) = store
            .api_keys()
            .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
            .await
            .unwrap();
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                let key = key.clone();
                tokio::spawn(
                    async move { store.api_keys().authenticate(&key, at(T0 + 1000 + i)).await },
                )
            })
            .collect();
        for task in tasks {
            let got = task.await.unwrap().unwrap().expect("authenticates");
            assert_eq!(got.id, k.id);
        }
        let last = row(&store, k.id).await.last_used_at.unwrap();
        assert!((T0 + 1000..T0 + 1016).contains(&last), "{last}");
    }
}

fn calendar_spec(
    code: &str,
    body: serde_json::Value,
) -> qiwu_domain::calendar::user::UserCalendarSpec {
    let serde_json::Value::Object(mut map) = body else {
        panic!("an object");
    };
    map.insert("code".into(), json!(code));
    qiwu_domain::calendar::user::validate(&map, None).expect("a valid calendar")
}

async fn calendars_create_update_delete(store: Store) {
    use qiwu_domain::calendar::{DayKind, Years};
    let calendars = store.calendars();
    let spec = calendar_spec(
        "acme",
        json!({"name": "ACME", "description": "office days", "dates": [
            {"date": "2026-12-26", "kind": "workday", "name": "盘点"},
            {"date": "2026-12-24", "kind": "holiday", "name": "Christmas Eve"},
        ]}),
    );
    let created = calendars.create(&spec, "admin", now()).await.unwrap();
    assert_eq!(created.code, "acme");
    assert_eq!(created.name, "ACME");
    assert_eq!(created.description, "office days");
    assert_eq!(
        (created.first_year, created.last_year),
        (Some(2026), Some(2026))
    );
    assert_eq!(created.version, 1);
    assert_eq!(created.created_by, "admin");
    assert_eq!(created.created_at, truncate_to_millis(now()));
    let dates: Vec<(String, DayKind, &str)> = created
        .dates
        .iter()
        .map(|d| (d.date.to_string(), d.kind, d.name.as_str()))
        .collect();
    assert_eq!(
        dates,
        [
            ("2026-12-24".to_string(), DayKind::Holiday, "Christmas Eve"),
            ("2026-12-26".to_string(), DayKind::Workday, "盘点"),
        ]
    );
    assert_eq!(calendars.get("acme").await.unwrap(), Some(created.clone()));
    assert_eq!(calendars.get("nope").await.unwrap(), None);
    let cal = created.to_calendar().unwrap();
    assert_eq!(cal.years(), Years::new(2026, 2026));
    assert!(cal.is_working_day(chrono::NaiveDate::from_ymd_opt(2026, 12, 26).unwrap()));

    let err = calendars.create(&spec, "admin", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");

    // More dates than one insert carries, and a calendar with none.
    let many: Vec<serde_json::Value> = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .iter_days()
        .take(1200)
        .map(|d| json!({"date": d.to_string(), "kind": "holiday"}))
        .collect();
    calendars
        .create(
            &calendar_spec("big", json!({"name": "big", "dates": many})),
            "admin",
            now(),
        )
        .await
        .unwrap();
    calendars
        .create(
            &calendar_spec("empty", json!({"name": "empty"})),
            "admin",
            now(),
        )
        .await
        .unwrap();
    let listed: Vec<(String, u64, Option<i32>, Option<i32>)> = calendars
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.code, c.date_count, c.first_year, c.last_year))
        .collect();
    assert_eq!(
        listed,
        [
            ("acme".to_string(), 2, Some(2026), Some(2026)),
            ("big".to_string(), 1200, Some(2026), Some(2029)),
            ("empty".to_string(), 0, None, None),
        ]
    );
    assert_eq!(calendars.codes().await.unwrap(), ["acme", "big", "empty"]);
    assert_eq!(
        calendars.get("big").await.unwrap().unwrap().dates.len(),
        1200
    );

    // Update: stale, missing, then the real one replacing every date.
    let new_spec = calendar_spec(
        "acme",
        json!({"name": "ACME 2027", "firstYear": 2026, "lastYear": 2027, "dates": [
            {"date": "2027-01-02", "kind": "workday"},
        ]}),
    );
    let err = calendars
        .update(2, &new_spec, "bob", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 1 }),
        "{err:?}"
    );
    let err = calendars
        .update(
            1,
            &calendar_spec("ghost", json!({"name": "g"})),
            "bob",
            now(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let later = now() + chrono::TimeDelta::seconds(5);
    let (before, after, jobs) = calendars.update(1, &new_spec, "bob", later).await.unwrap();
    assert!(jobs.is_empty(), "no job names it");
    assert_eq!(before, created);
    assert_eq!(after.version, 2);
    assert_eq!(after.name, "ACME 2027");
    assert_eq!(after.description, "");
    assert_eq!(
        (after.first_year, after.last_year),
        (Some(2026), Some(2027))
    );
    assert_eq!(after.dates.len(), 1);
    assert_eq!(after.dates[0].date.to_string(), "2027-01-02");
    assert_eq!(after.created_by, "admin");
    assert_eq!(after.updated_by, "bob");
    assert_eq!(after.updated_at, truncate_to_millis(later));
    assert_eq!(calendars.get("acme").await.unwrap(), Some(after.clone()));

    // Delete returns what went; the dates go with it.
    assert_eq!(calendars.delete("acme").await.unwrap(), Some(after));
    assert_eq!(calendars.delete("acme").await.unwrap(), None);
    assert_eq!(calendars.get("acme").await.unwrap(), None);
    let left = qiwu_storage::entity::calendar_date::Entity::find()
        .filter(qiwu_storage::entity::calendar_date::Column::CalendarCode.eq("acme"))
        .all(store.connection())
        .await
        .unwrap();
    assert!(left.is_empty());
    // Recreating the code starts again at version 1.
    let again = calendars.create(&spec, "admin", now()).await.unwrap();
    assert_eq!(again.version, 1);
}

async fn calendars_concurrent_updates_one_wins(store: Store) {
    let spec = calendar_spec("race", json!({"name": "race"}));
    store
        .calendars()
        .create(&spec, "admin", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let spec = calendar_spec(
                "race",
                json!({"name": format!("writer {i}"), "dates": [
                    {"date": format!("2026-01-0{}", i + 1), "kind": "holiday"},
                ]}),
            );
            store.calendars().update(1, &spec, "w", now()).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(StorageError::StaleVersion { current: 2 }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(won, 1);
    let stored = store.calendars().get("race").await.unwrap().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.dates.len(), 1, "one writer's dates, not a mix");
}

/// Time rules are stored, read back with the job and with its schedule,
/// and a change of those deciding the fire times starts a new schedule.
async fn job_time_rules_round_trip(store: Store) {
    use qiwu_domain::{CalendarRule, TimeRules};
    let rules = TimeRules {
        calendar: Some("cn-workdays".into()),
        calendar_rule: Some(CalendarRule::Workdays),
        misfire_grace_ms: 0,
        active_from: Some(at(1_767_225_600_000)),
        active_until: Some(at(1_798_761_599_999)),
        max_runs: None,
        jitter_ms: 0,
    };
    let job = NewJob {
        time_rules: rules.clone(),
        ..new_job("payroll")
    };
    let created = store.jobs().create(&job, "alice", now()).await.unwrap();
    assert_eq!(created.time_rules, rules);
    assert_eq!(created.scheduled_successes, 0);
    let read = store.jobs().get(created.id).await.unwrap().unwrap();
    assert_eq!(read.time_rules, rules);
    let schedule = store.jobs().schedule(created.id).await.unwrap().unwrap();
    assert_eq!(schedule.time_rules, rules);
    let listed = store.jobs().schedules(0, 10).await.unwrap();
    assert_eq!(listed[0].time_rules, rules);

    // An edit that leaves the time rules alone keeps the schedule.
    let later = now() + chrono::TimeDelta::seconds(1);
    let renamed = NewJob {
        remark: "same times".into(),
        ..job.clone()
    };
    let kept = store
        .jobs()
        .update(created.id, 1, &renamed, "bob", later)
        .await
        .unwrap();
    assert_eq!(kept.schedule_from, created.schedule_from);
    // Each rule deciding the fire times starts a new one.
    let changes = [
        TimeRules {
            calendar_rule: Some(CalendarRule::Holidays),
            ..rules.clone()
        },
        TimeRules {
            calendar: None,
            calendar_rule: None,
            ..rules.clone()
        },
        TimeRules {
            active_until: None,
            ..rules.clone()
        },
        TimeRules {
            active_from: None,
            ..rules.clone()
        },
    ];
    let mut current = kept;
    for (i, changed) in changes.into_iter().enumerate() {
        let at_edit = later + chrono::TimeDelta::seconds(i as i64 + 1);
        let edit = NewJob {
            time_rules: changed.clone(),
            ..renamed.clone()
        };
        let updated = store
            .jobs()
            .update(created.id, current.version, &edit, "bob", at_edit)
            .await
            .unwrap();
        assert_eq!(updated.time_rules, changed);
        assert_eq!(
            updated.schedule_from,
            truncate_to_millis(at_edit),
            "change {i}"
        );
        current = updated;
    }
}

/// Editing a calendar starts a new schedule for the jobs naming it (and
/// only them), without a new version; deleting it is refused while a job
/// names it.
async fn calendar_edit_restarts_its_jobs_schedules(store: Store) {
    use qiwu_domain::{CalendarRule, TimeRules};
    let spec = calendar_spec(
        "plant",
        json!({"name": "Plant", "dates": [{"date": "2026-12-24", "kind": "holiday"}]}),
    );
    store
        .calendars()
        .create(&spec, "admin", now())
        .await
        .unwrap();
    let rules = TimeRules {
        calendar: Some("plant".into()),
        calendar_rule: Some(CalendarRule::Exclude),
        ..TimeRules::default()
    };
    let mut ids = Vec::new();
    for name in ["uses a", "uses b"] {
        let job = NewJob {
            time_rules: rules.clone(),
            ..new_job(name)
        };
        ids.push(store.jobs().create(&job, "alice", now()).await.unwrap().id);
    }
    let other = store
        .jobs()
        .create(&new_job("plain"), "alice", now())
        .await
        .unwrap();

    let later = now() + chrono::TimeDelta::minutes(1);
    let (_, _, touched) = store
        .calendars()
        .update(1, &spec, "admin", later)
        .await
        .unwrap();
    assert_eq!(touched, ids);
    for id in &ids {
        let job = store.jobs().get(*id).await.unwrap().unwrap();
        assert_eq!(job.schedule_from, truncate_to_millis(later));
        assert_eq!(job.updated_at, truncate_to_millis(later));
        assert_eq!(job.version, 1, "the job's own fields did not change");
        assert_eq!(job.updated_by, "alice");
    }
    let untouched = store.jobs().get(other.id).await.unwrap().unwrap();
    assert_eq!(untouched.schedule_from, other.schedule_from);
    // Reconciliation finds them by their change time.
    let changed: Vec<i64> = store
        .jobs()
        .schedules_changed_since(later)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(changed, ids);

    let err = store.calendars().delete("plant").await.unwrap_err();
    assert!(
        matches!(&err, StorageError::InUse(jobs) if *jobs == ids),
        "{err:?}"
    );
    assert!(store.calendars().get("plant").await.unwrap().is_some());
    store.jobs().delete_many(&ids).await.unwrap();
    assert!(store.calendars().delete("plant").await.unwrap().is_some());
}

/// `maxRuns`: each success counts; the one reaching the limit disables the
/// job as the system, with one audit entry; a new limit counts from zero.
async fn max_runs_disables_the_job_once(store: Store) {
    use qiwu_domain::TimeRules;
    let job = NewJob {
        time_rules: TimeRules {
            max_runs: Some(2),
            ..TimeRules::default()
        },
        ..new_job("twice")
    };
    let created = store.jobs().create(&job, "alice", now()).await.unwrap();
    let later = now() + chrono::TimeDelta::seconds(10);
    let count = |at| {
        let store = store.clone();
        async move {
            store
                .jobs()
                .count_scheduled_success(created.id, "system", "limit reached", at)
                .await
                .unwrap()
        }
    };
    assert!(count(later).await.is_none());
    let disabled = count(later).await.expect("disabled at the second");
    assert!(!disabled.enabled);
    assert_eq!(disabled.scheduled_successes, 2);
    assert_eq!(disabled.version, 2);
    assert_eq!(disabled.updated_by, "system");
    assert_eq!(disabled.schedule_from, truncate_to_millis(later));
    // A fire that was already running when the limit was reached still
    // counts, and disables nothing more.
    assert!(count(later).await.is_none());
    let entries: Vec<audit_log::Model> = audit_log::Entity::find()
        .filter(audit_log::Column::Action.eq("job.disable"))
        .all(store.connection())
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].actor, "system");
    assert_eq!(
        entries[0].target_id.as_deref(),
        Some(created.id.to_string().as_str())
    );
    assert_eq!(entries[0].summary, "limit reached");

    // Raised to 5 and enabled again: the count starts over.
    let raised = NewJob {
        time_rules: TimeRules {
            max_runs: Some(5),
            ..TimeRules::default()
        },
        ..job.clone()
    };
    let again = store
        .jobs()
        .update(created.id, 2, &raised, "alice", later)
        .await
        .unwrap();
    assert!(again.enabled);
    assert_eq!(again.scheduled_successes, 0);
    // Other edits keep it.
    assert!(count(later).await.is_none());
    let renamed = NewJob {
        remark: "same limit".into(),
        ..raised.clone()
    };
    let kept = store
        .jobs()
        .update(created.id, again.version, &renamed, "alice", later)
        .await
        .unwrap();
    assert_eq!(kept.scheduled_successes, 1);
    // A job that is gone counts nothing.
    store.jobs().delete(created.id).await.unwrap();
    assert!(count(later).await.is_none());
}
