//! A job write and its audit entries commit together, on all three
//! databases: a refused write (name taken, stale version, not found)
//! leaves no entry, a committed one exactly the entries it was given, and
//! an entry that cannot be stored undoes the write.

use qiwu_domain::pause::PauseRequest;
use qiwu_storage::{AuditFilter, AuditRecord, EnabledOutcome, JobSelection, NewAudit};

use super::*;

scenarios!(
    create_and_update_commit_with_their_audit,
    pause_writes_commit_with_their_audit,
    deletes_commit_with_their_audit,
    an_audit_that_cannot_be_stored_undoes_the_write,
);

/// The entry a test write leaves for `job`.
fn entry(action: &str, job: &JobRecord) -> Vec<NewAudit> {
    vec![NewAudit {
        actor: "alice".into(),
        action: action.into(),
        target_type: "job".into(),
        target_id: Some(job.id.to_string()),
        summary: format!("{action} {}", job.name),
        before: None,
        after: Some(json!({"version": job.version})),
    }]
}

/// Every stored entry, oldest first.
async fn entries(store: &Store) -> Vec<AuditRecord> {
    let (mut items, _) = store
        .audit()
        .list(&AuditFilter::default(), 1000, None)
        .await
        .unwrap();
    items.reverse();
    items
}

/// Asserts the entries are exactly (action, target id), in order.
async fn assert_entries(store: &Store, expected: &[(&str, i64)]) {
    let got: Vec<(String, Option<String>)> = entries(store)
        .await
        .into_iter()
        .map(|e| {
            assert_eq!(e.actor, "alice");
            assert_eq!(e.target_type, "job");
            (e.action, e.target_id)
        })
        .collect();
    let expected: Vec<(String, Option<String>)> = expected
        .iter()
        .map(|(action, id)| (action.to_string(), Some(id.to_string())))
        .collect();
    assert_eq!(got, expected);
}

fn request(enabled: bool) -> PauseRequest {
    PauseRequest {
        enabled,
        reason: None,
        until: None,
    }
}

async fn create_and_update_commit_with_their_audit(store: Store) {
    let jobs = store.jobs();
    let a = jobs
        .create_audited(&new_job("a"), "alice", now(), |j| entry("job.create", j))
        .await
        .unwrap();
    assert_entries(&store, &[("job.create", a.id)]).await;
    let stored = entries(&store).await;
    assert_eq!(stored[0].summary, "job.create a");
    assert_eq!(stored[0].after, Some(json!({"version": 1})));
    assert_eq!(stored[0].at, truncate_to_millis(now()));

    // A taken name: no job, no entry.
    let err = jobs
        .create_audited(&new_job("a"), "alice", now(), |j| entry("job.create", j))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    let b = jobs.create(&new_job("b"), "alice", now()).await.unwrap();
    assert_entries(&store, &[("job.create", a.id)]).await;

    // Stale version, taken name, missing job: refused, nothing audited.
    let modify = |before: &JobRecord, after: &JobRecord| {
        assert_eq!(before.version + 1, after.version);
        entry("job.modify", after)
    };
    let err = jobs
        .update_audited(a.id, 7, &new_job("a2"), "alice", now(), modify)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 1 }),
        "{err:?}"
    );
    let err = jobs
        .update_audited(a.id, 1, &new_job("b"), "alice", now(), modify)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    let err = jobs
        .update_audited(b.id + 1000, 1, &new_job("c"), "alice", now(), modify)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    assert_entries(&store, &[("job.create", a.id)]).await;
    assert_eq!(jobs.get(a.id).await.unwrap().unwrap(), a);

    // Committed: exactly one entry, built from the rows written.
    let updated = jobs
        .update_audited(a.id, 1, &new_job("a2"), "alice", now(), modify)
        .await
        .unwrap();
    assert_eq!(updated.version, 2);
    assert_entries(&store, &[("job.create", a.id), ("job.modify", a.id)]).await;
    assert_eq!(entries(&store).await[1].after, Some(json!({"version": 2})));
}

async fn pause_writes_commit_with_their_audit(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "alice", now()).await.unwrap();
    let b = jobs.create(&new_job("b"), "alice", now()).await.unwrap();
    let disable = |o: &EnabledOutcome| entry("job.disable", &o.after);

    // Stale or missing: refused, nothing audited.
    let err = jobs
        .pause_audited(a.id, &request(false), Some(9), "alice", now(), disable)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 1 }),
        "{err:?}"
    );
    let err = jobs
        .pause_audited(b.id + 1000, &request(false), None, "alice", now(), disable)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    // The state it already has: nothing written, nothing audited.
    let same = jobs
        .pause_audited(a.id, &request(true), Some(1), "alice", now(), disable)
        .await
        .unwrap();
    assert!(!same.changed());
    assert_entries(&store, &[]).await;

    let off = jobs
        .pause_audited(a.id, &request(false), Some(1), "alice", now(), disable)
        .await
        .unwrap();
    assert!(off.changed());
    assert_entries(&store, &[("job.disable", a.id)]).await;

    // A batch audits each job it changed, and only those.
    let missing = b.id + 1000;
    let batch = jobs
        .pause_many_audited(
            JobSelection::Ids(&[a.id, b.id, missing]),
            &request(true),
            "alice",
            now(),
            |o| entry("job.enable", &o.after),
        )
        .await
        .unwrap();
    assert_eq!(batch.changed.len(), 1);
    assert_eq!(batch.unchanged, vec![b.id]);
    assert_eq!(batch.not_found, vec![missing]);
    assert_entries(&store, &[("job.disable", a.id), ("job.enable", a.id)]).await;
}

async fn deletes_commit_with_their_audit(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "alice", now()).await.unwrap();
    let b = jobs.create(&new_job("b"), "alice", now()).await.unwrap();
    let c = jobs.create(&new_job("c"), "alice", now()).await.unwrap();
    let delete = |j: &JobRecord| entry("job.delete", j);

    // Missing: nothing deleted, nothing audited.
    let gone = jobs
        .delete_audited(c.id + 1000, now(), delete)
        .await
        .unwrap();
    assert_eq!(gone, None);
    assert_entries(&store, &[]).await;

    let gone = jobs.delete_audited(a.id, now(), delete).await.unwrap();
    assert_eq!(gone.map(|j| j.id), Some(a.id));
    assert_entries(&store, &[("job.delete", a.id)]).await;

    // A batch: one entry per job deleted; unknown ids leave none.
    let gone = jobs
        .delete_many_audited(&[c.id, b.id, a.id, c.id + 1000], now(), delete)
        .await
        .unwrap();
    assert_eq!(gone.iter().map(|j| j.id).collect::<Vec<_>>(), [b.id, c.id]);
    assert_entries(
        &store,
        &[
            ("job.delete", a.id),
            ("job.delete", b.id),
            ("job.delete", c.id),
        ],
    )
    .await;

    // A batch refused as a whole (a row that does not read) audits
    // nothing and deletes nothing.
    let d = jobs.create(&new_job("d"), "alice", now()).await.unwrap();
    job::Entity::update_many()
        .col_expr(
            job::Column::Params,
            sea_orm::sea_query::Expr::val("{not json"),
        )
        .filter(job::Column::Id.eq(d.id))
        .exec(store.connection())
        .await
        .unwrap();
    let err = jobs
        .delete_many_audited(&[d.id], now(), delete)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    assert_eq!(entries(&store).await.len(), 3);
    assert_eq!(jobs.count_in_group("default").await.unwrap(), 1);
}

async fn an_audit_that_cannot_be_stored_undoes_the_write(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "alice", now()).await.unwrap();
    // Without its table, every audit insert fails.
    store
        .connection()
        .execute_unprepared("DROP TABLE audit_logs")
        .await
        .unwrap();
    jobs.create_audited(&new_job("b"), "alice", now(), |j| entry("job.create", j))
        .await
        .unwrap_err();
    jobs.update_audited(a.id, 1, &new_job("a2"), "alice", now(), |_, after| {
        entry("job.modify", after)
    })
    .await
    .unwrap_err();
    jobs.pause_audited(a.id, &request(false), Some(1), "alice", now(), |o| {
        entry("job.disable", &o.after)
    })
    .await
    .unwrap_err();
    jobs.pause_many_audited(
        JobSelection::Group("default"),
        &request(false),
        "alice",
        now(),
        |o| entry("job.disable", &o.after),
    )
    .await
    .unwrap_err();
    jobs.delete_audited(a.id, now(), |j| entry("job.delete", j))
        .await
        .unwrap_err();
    jobs.delete_many_audited(&[a.id], now(), |j| entry("job.delete", j))
        .await
        .unwrap_err();
    // Every write was rolled back with its entry.
    let (all, total) = jobs.list(&JobFilter::default(), 1, 10).await.unwrap();
    assert_eq!(total, 1);
    assert_eq!(all, vec![a]);
}
