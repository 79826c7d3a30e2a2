//! Alerts (issue 10) on all three databases: channels (names, versions,
//! write-only URL and secret kept across edits), which channels an alert
//! goes to, the jobs naming a channel, the alert policy stored with a job,
//! the engine's alert state (one locked read-decide-write, never touched
//! by an edit), and a notification stored with one outbox row per target.

use super::*;
use qiwu_domain::alert::{
    self, AlertKind, AlertPolicy, AlertState, ChannelKind, ChannelSpec, FireEnd,
};
use qiwu_storage::{NewNotification, OutboxStatus};

scenarios!(alert_channels_crud_and_resolution, alert_policy_and_state);

fn spec(name: &str, kind: ChannelKind, url: Option<&str>, secret: Option<&str>) -> ChannelSpec {
    ChannelSpec {
        name: name.to_owned(),
        kind,
        enabled: true,
        is_default: false,
        url: url.map(str::to_owned),
        secret: Some(secret.map(str::to_owned)),
    }
}

async fn alert_channels_crud_and_resolution(store: Store) {
    let repo = store.alert_channels();
    let ding_url = "https://oapi.dingtalk.com/robot/send?access_token=长token";
    let ding = repo
        .create(
            &spec("钉钉", ChannelKind::Dingtalk, Some(ding_url), Some("SECa")),
            "admin",
            now(),
        )
        .await
        .unwrap();
    assert_eq!((ding.version, ding.kind), (1, ChannelKind::Dingtalk));
    assert_eq!(ding.url.as_deref(), Some(ding_url));
    assert_eq!(ding.secret.as_deref(), Some("SECa"));
    assert_eq!(ding.created_at, truncate_to_millis(now()));
    let inbox = repo
        .create(
            &ChannelSpec {
                is_default: true,
                ..spec("管理员", ChannelKind::Inbox, None, None)
            },
            "admin",
            now(),
        )
        .await
        .unwrap();
    let wecom = repo
        .create(
            &spec(
                "企业微信",
                ChannelKind::Wecom,
                Some("https://q/send?key=k"),
                None,
            ),
            "admin",
            now(),
        )
        .await
        .unwrap();
    // Names are unique, byte for byte.
    assert!(matches!(
        repo.create(&spec("钉钉", ChannelKind::Inbox, None, None), "a", now())
            .await,
        Err(StorageError::NameTaken)
    ));
    let listed: Vec<i64> = repo.list().await.unwrap().iter().map(|c| c.id).collect();
    assert_eq!(listed, [ding.id, inbox.id, wecom.id]);
    let mut ids = repo.ids().await.unwrap();
    ids.sort_unstable();
    assert_eq!(ids, [ding.id, inbox.id, wecom.id]);

    // An edit without url and secret keeps them; a stale one is refused.
    let edit = ChannelSpec {
        url: None,
        secret: None,
        is_default: true,
        ..spec("钉钉值班群", ChannelKind::Dingtalk, None, None)
    };
    let (before, after) = repo.update(ding.id, 1, &edit, "bob", now()).await.unwrap();
    assert_eq!(before.name, "钉钉");
    assert_eq!((after.name.as_str(), after.version), ("钉钉值班群", 2));
    assert_eq!(after.url.as_deref(), Some(ding_url));
    assert_eq!(after.secret.as_deref(), Some("SECa"));
    assert_eq!(after.updated_by, "bob");
    assert!(matches!(
        repo.update(ding.id, 1, &edit, "bob", now()).await,
        Err(StorageError::StaleVersion { current: 2 })
    ));
    assert!(matches!(
        repo.update(
            ding.id,
            2,
            &ChannelSpec {
                name: "企业微信".into(),
                ..edit.clone()
            },
            "b",
            now()
        )
        .await,
        Err(StorageError::NameTaken)
    ));
    assert!(matches!(
        repo.update(9_999, 1, &edit, "b", now()).await,
        Err(StorageError::NotFound)
    ));
    // `Some(None)` clears the secret.
    let cleared = ChannelSpec {
        secret: Some(None),
        ..edit.clone()
    };
    let (_, after) = repo.update(ding.id, 2, &cleared, "b", now()).await.unwrap();
    assert_eq!(after.secret, None);
    assert_eq!(after.url.as_deref(), Some(ding_url));

    // Resolution: named ones (enabled), else the default ones.
    let ids_of =
        |v: Vec<qiwu_storage::ChannelRecord>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        ids_of(repo.resolve(&[]).await.unwrap()),
        [ding.id, inbox.id]
    );
    assert_eq!(
        ids_of(repo.resolve(&[wecom.id, 777]).await.unwrap()),
        [wecom.id]
    );
    let off = ChannelSpec {
        enabled: false,
        url: None,
        secret: None,
        ..spec("企业微信", ChannelKind::Wecom, None, None)
    };
    repo.update(wecom.id, 1, &off, "b", now()).await.unwrap();
    assert!(repo.resolve(&[wecom.id]).await.unwrap().is_empty());

    // Jobs naming a channel.
    let mut a = new_job("alerts-a");
    a.alert.channels = vec![inbox.id, wecom.id];
    let a = store.jobs().create(&a, "t", now()).await.unwrap();
    let mut b = new_job("alerts-b");
    b.alert.channels = vec![wecom.id * 10 + 1];
    store.jobs().create(&b, "t", now()).await.unwrap();
    store
        .jobs()
        .create(&new_job("alerts-c"), "t", now())
        .await
        .unwrap();
    assert_eq!(repo.jobs_naming(wecom.id).await.unwrap(), [a.id]);
    assert_eq!(repo.jobs_naming(ding.id).await.unwrap(), Vec::<i64>::new());

    let deleted = repo.delete(ding.id).await.unwrap().expect("deleted");
    assert_eq!(deleted.id, ding.id);
    assert!(repo.delete(ding.id).await.unwrap().is_none());
    assert!(repo.get(ding.id).await.unwrap().is_none());

    // A notification with one outbox row per target, in one transaction.
    let new = NewNotification {
        recipient: "alert_archive".into(),
        template_code: "scheduler.failure_alert".into(),
        title: "t".into(),
        body: "b".into(),
    };
    let (n, rows) = store
        .notifications()
        .create_with_deliveries(
            &new,
            &[None, Some(wecom.id), Some(inbox.id)],
            |target, n| format!("{target:?}/{}", n.id),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].channel_id, None);
    assert_eq!(rows[1].channel_id, Some(wecom.id));
    assert_eq!(rows[1].payload, format!("Some({})/{}", wecom.id, n.id));
    assert!(
        rows.iter()
            .all(|r| r.notification_id == n.id && r.status == OutboxStatus::Pending)
    );
    // Without the webhook URL, only the channels' rows are claimed.
    let claimed = store
        .outbox()
        .claim_due_for(now(), chrono::Duration::minutes(1), 10, false)
        .await
        .unwrap();
    let mut claimed_ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
    claimed_ids.sort_unstable();
    assert_eq!(claimed_ids, [rows[1].id, rows[2].id]);
    // Giving up is final, and only for the lease holder.
    assert!(
        store
            .outbox()
            .give_up(&claimed[0], "channel deleted")
            .await
            .unwrap()
    );
    assert!(!store.outbox().give_up(&claimed[0], "again").await.unwrap());
    let row = store.outbox().get(claimed[0].id).await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Failed);
    assert_eq!(row.last_error.as_deref(), Some("channel deleted"));
    let rest = store
        .outbox()
        .claim_due(now(), chrono::Duration::minutes(1), 10)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|r| r.id).collect::<Vec<_>>(), [rows[0].id]);
}

async fn alert_policy_and_state(store: Store) {
    let jobs = store.jobs();
    let mut input = new_job("policy");
    input.alert = AlertPolicy {
        on_failure: true,
        after_consecutive_failures: 3,
        on_recovery: true,
        channels: vec![4, 2],
    };
    let job = jobs.create(&input, "t", now()).await.unwrap();
    assert_eq!(job.alert, input.alert);
    assert_eq!(job.alert_state, AlertState::default());

    let step = |end: FireEnd| {
        let jobs = store.jobs();
        async move {
            let (before, d) = jobs
                .alert_transition(job.id, |p, s| alert::decide(p, s, end))
                .await
                .unwrap()
                .expect("job");
            (before.alert_state, d.alert)
        }
    };
    assert_eq!(
        step(FireEnd::Failed).await,
        (AlertState::default(), Some(AlertKind::Failure))
    );
    assert_eq!(step(FireEnd::Timeout).await.1, Some(AlertKind::Failure));
    assert_eq!(
        step(FireEnd::Failed).await.1,
        Some(AlertKind::ConsecutiveFailures)
    );
    let stored = jobs.get(job.id).await.unwrap().unwrap();
    assert_eq!(
        stored.alert_state,
        AlertState {
            failed_in_a_row: 3,
            alerted: true
        }
    );
    // An edit changes the policy, never the state, and the version only.
    let mut edited = input.clone();
    edited.alert.channels = vec![];
    edited.alert.on_failure = false;
    let updated = jobs.update(job.id, 1, &edited, "t", now()).await.unwrap();
    assert_eq!(updated.alert.channels, Vec::<i64>::new());
    assert_eq!(updated.alert_state.failed_in_a_row, 3);
    assert_eq!(updated.version, 2);
    // The transition reads the policy as it now is.
    assert_eq!(step(FireEnd::Skipped).await.1, None);
    let (before, alert) = step(FireEnd::Success).await;
    assert_eq!(before.failed_in_a_row, 3);
    assert_eq!(alert, Some(AlertKind::Recovery));
    let stored = jobs.get(job.id).await.unwrap().unwrap();
    assert!(stored.alert_state.is_clear());
    assert_eq!(
        stored.version, 2,
        "the alert state is not part of the version"
    );

    // Concurrent failures of one job on many tasks: none is lost.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .jobs()
                .alert_transition(job.id, |p, s| alert::decide(p, s, FireEnd::Failed))
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stored = jobs.get(job.id).await.unwrap().unwrap();
    assert_eq!(stored.alert_state.failed_in_a_row, 8);
    assert!(
        jobs.alert_transition(424_242, |p, s| alert::decide(p, s, FireEnd::Failed))
            .await
            .unwrap()
            .is_none()
    );
}
