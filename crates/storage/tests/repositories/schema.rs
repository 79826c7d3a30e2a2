//! The schema on all three databases: migrating twice changes nothing and
//! seeds the groups once, every entity reads back what it wrote (so entity
//! and schema agree), and a seed marker is set once.

use super::*;

scenarios!(
    migrate_twice_is_idempotent_and_seeds_groups,
    every_entity_round_trips,
    seed_marked_once,
);

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
