//! Settings, notification templates, the inbox, the outbox and purging on
//! all three databases.

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
