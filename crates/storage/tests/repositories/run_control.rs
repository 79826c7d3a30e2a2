//! Run control on all three databases: a cancel request is stored once on
//! a running run, refused on an ended one, and found by the instance that
//! checks its running runs.

use super::*;
use qiwu_storage::RunStatus;
use qiwu_storage::{CancelRequest, ClaimContext, ClaimOutcome, FirstRun, ManualClaim, RunEnd};

scenarios!(cancel_requests_are_stored_once_and_found_by_their_instance);

/// A running run of a fresh job, claimed by `w1` through a run-once fire.
async fn running_run(store: &Store, name: &str) -> i64 {
    let job = store
        .jobs()
        .create(&new_job(name), "t", now())
        .await
        .unwrap();
    let fire = store.fires().create_manual(job.id, now()).await.unwrap();
    let ctx = ClaimContext {
        instance: "w1",
        now: now(),
        running_elsewhere: None,
        job_deleted: "deleted",
    };
    let outcomes = store
        .fires()
        .claim_manual(
            &[ManualClaim {
                fire_id: fire,
                first: FirstRun::running(),
            }],
            &ctx,
        )
        .await
        .unwrap();
    let Some(ClaimOutcome::Claimed(claimed)) = outcomes.first() else {
        panic!("{outcomes:?}");
    };
    assert_eq!(claimed.status, RunStatus::Running);
    claimed.run_id
}

async fn cancel_requests_are_stored_once_and_found_by_their_instance(store: Store) {
    let a = running_run(&store, "a").await;
    let b = running_run(&store, "b").await;
    let runs = store.runs();
    // Nothing asked yet: the instance's check finds nothing.
    assert!(
        store
            .fires()
            .cancel_requests(&[a, b])
            .await
            .unwrap()
            .is_empty()
    );
    // The first request is kept; a second one answers the same run.
    let first = runs.request_cancel(a, "alice", now()).await.unwrap();
    let CancelRequest::Requested { run, first: true } = first else {
        panic!("{first:?}");
    };
    assert_eq!(run.cancelled_by.as_deref(), Some("alice"));
    assert_eq!(run.status.as_str(), "running");
    let again = runs.request_cancel(a, "apikey:ci", now()).await.unwrap();
    let CancelRequest::Requested { run, first: false } = again else {
        panic!("{again:?}");
    };
    assert_eq!(run.cancelled_by.as_deref(), Some("alice"));
    // The instance running both finds only the cancelled one, with who.
    assert_eq!(
        store.fires().cancel_requests(&[a, b]).await.unwrap(),
        [(a, "alice".to_string())]
    );
    // Its end is written as `cancelled`; after that, cancelling is refused.
    let end = RunEnd {
        status: RunStatus::Cancelled,
        finished_at: now(),
        duration_ms: 5,
        output: String::new(),
        error: "Cancelled by alice".into(),
        trace_id: None,
        started_at: None,
    };
    store.fires().finish_run(a, &end).await.unwrap();
    let done = runs.request_cancel(a, "bob", now()).await.unwrap();
    let CancelRequest::Finished(run) = done else {
        panic!("{done:?}");
    };
    assert_eq!(run.status.as_str(), "cancelled");
    assert_eq!(run.cancelled_by.as_deref(), Some("alice"));
    assert_eq!(
        runs.request_cancel(i64::MAX, "bob", now()).await.unwrap(),
        CancelRequest::NotFound
    );
    // A deleted run is not found either; the filter reads the new status.
    runs.soft_delete(b, now()).await.unwrap();
    assert_eq!(
        runs.request_cancel(b, "bob", now()).await.unwrap(),
        CancelRequest::NotFound
    );
    let filter = qiwu_storage::RunFilter {
        status: Some("cancelled".into()),
        ..Default::default()
    };
    let (items, _) = runs.list(&filter, 10, None).await.unwrap();
    assert_eq!(items.iter().map(|r| r.id).collect::<Vec<_>>(), [a]);
}
