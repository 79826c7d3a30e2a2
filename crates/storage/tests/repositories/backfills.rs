//! Backfills on all three databases: only times with no record, before the
//! schedule's own, are written, under the ledger's key; two backfills of
//! one range write each time once; fires are released one at a time,
//! oldest first, claimed like run-once requests; a cancel drops the rest
//! and asks the running run to stop.

use super::*;
use qiwu_storage::{
    ClaimContext, ClaimOutcome, FirstRun, ManualClaim, RunEnd, RunStatus, TimeClaim, Trigger,
};

scenarios!(
    backfills_write_missing_times_once_and_run_them_in_order,
    backfill_cancel_drops_the_rest_and_stops_the_running_run,
);

/// `n` seconds after 2025-11-24T16:00:00Z; jobs are created at [`now`],
/// 123 ms after `s(0)`.
fn s(n: i64) -> DateTime<Utc> {
    at(1_764_000_000_000 + n * 1000)
}

fn ctx(instance: &str, n: i64) -> ClaimContext<'_> {
    ClaimContext {
        instance,
        now: s(n),
        running_elsewhere: None,
        job_deleted: "deleted",
    }
}

/// Claims a pending backfill fire as `w1`.
async fn claim(store: &Store, fire: i64) -> (i64, Trigger, DateTime<Utc>) {
    let outcomes = store
        .fires()
        .claim_manual(
            &[ManualClaim {
                fire_id: fire,
                first: FirstRun::running(),
            }],
            &ctx("w1", 200),
        )
        .await
        .unwrap();
    let Some(ClaimOutcome::Claimed(claimed)) = outcomes.first() else {
        panic!("{outcomes:?}");
    };
    (claimed.run_id, claimed.trigger, claimed.scheduled_at)
}

async fn end(store: &Store, run: i64) {
    store
        .fires()
        .finish_run(
            run,
            &RunEnd {
                status: RunStatus::Success,
                finished_at: s(201),
                duration_ms: 1,
                output: String::new(),
                error: String::new(),
                trace_id: None,
                started_at: None,
            },
        )
        .await
        .unwrap();
}

async fn backfills_write_missing_times_once_and_run_them_in_order(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("backfilled"), "t", now())
        .await
        .unwrap();
    // Second 2 (the job's first fire time) and a catch-up of 3..=4 are
    // recorded; the schedule then starts again at second 6.
    for claim in [
        TimeClaim {
            job_id: job.id,
            trigger: Trigger::Schedule,
            first_at: s(2),
            scheduled_at: s(2),
            after: None,
            schedule_from: job.schedule_from,
            first: FirstRun::running(),
            expect_taken: false,
        },
        TimeClaim {
            job_id: job.id,
            trigger: Trigger::Misfire,
            first_at: s(3),
            scheduled_at: s(4),
            after: Some(s(2)),
            schedule_from: job.schedule_from,
            first: FirstRun::skipped("missed"),
            expect_taken: false,
        },
    ] {
        let out = store
            .fires()
            .claim_times(&[claim], &ctx("w1", 10))
            .await
            .unwrap();
        assert!(matches!(out[0], ClaimOutcome::Claimed(_)), "{out:?}");
    }
    store
        .connection()
        .execute_unprepared(&format!(
            "UPDATE jobs SET schedule_from = {} WHERE id = {}",
            s(6).timestamp_millis(),
            job.id
        ))
        .await
        .unwrap();
    let repo = store.backfills();
    assert_eq!(
        repo.covered(job.id, s(-5), s(10)).await.unwrap(),
        [(s(2), s(2)), (s(3), s(4))]
    );
    // Seconds -1..=8: -1, 0, 1, 5 and 6 are missing; 2, 3, 4 recorded;
    // 7 and 8 are the schedule's own (after its start, job enabled).
    let asked: Vec<DateTime<Utc>> = (-1..=8).map(s).collect();
    let created = repo
        .create(job.id, s(-1), s(8), &asked, "alice", s(100))
        .await
        .unwrap();
    assert_eq!(created.times, [s(-1), s(0), s(1), s(5), s(6)]);
    assert_eq!(created.record.total, 5);
    assert_eq!(created.record.status, "running");
    assert_eq!(created.record.requested_by, "alice");
    // A second backfill of the same range finds every time taken.
    let again = repo
        .create(job.id, s(-1), s(8), &asked, "bob", s(100))
        .await
        .unwrap();
    assert!(again.times.is_empty());
    assert_eq!(again.record.status, "done");
    // The backfilled times hold the ledger's key of the schedule's lane.
    let dup = store
        .fires()
        .claim_times(
            &[TimeClaim {
                job_id: job.id,
                trigger: Trigger::Schedule,
                first_at: s(1),
                scheduled_at: s(1),
                after: None,
                schedule_from: job.schedule_from,
                first: FirstRun::running(),
                expect_taken: false,
            }],
            &ctx("w2", 10),
        )
        .await
        .unwrap();
    assert!(!matches!(dup[0], ClaimOutcome::Claimed(_)), "{dup:?}");

    // One fire at a time, oldest first.
    let id = created.record.id;
    let live = |_: i64, _: &str| true;
    let gone = |_: i64, _: &str| false;
    let mut next = repo.advance(id, None, &live, s(100)).await.unwrap();
    // Released but not claimed yet: nothing more is released.
    assert_eq!(repo.advance(id, None, &live, s(100)).await.unwrap(), None);
    let mut order = Vec::new();
    while let Some(fire) = next {
        let (run, trigger, at) = claim(&store, fire).await;
        assert_eq!(trigger, Trigger::Backfill);
        assert_eq!(repo.advance(id, None, &live, s(100)).await.unwrap(), None);
        end(&store, run).await;
        // Ended, but its instance may still retry it: the backfill waits
        // for the instance's word, or for the instance to be gone.
        assert_eq!(repo.advance(id, None, &live, s(100)).await.unwrap(), None);
        order.push(at);
        next = if order.len() % 2 == 0 {
            repo.advance(id, None, &gone, s(100)).await.unwrap()
        } else {
            repo.advance(id, Some(fire), &live, s(100)).await.unwrap()
        };
    }
    assert_eq!(order, [s(-1), s(0), s(1), s(5), s(6)]);
    let record = repo.get(job.id, id).await.unwrap().unwrap();
    assert_eq!(record.status, "done");
    assert!(repo.running().await.unwrap().is_empty());
    let fires = repo.fires(id).await.unwrap();
    assert_eq!(fires.len(), 5);
    assert!(
        fires
            .iter()
            .all(|f| f.run_status.as_deref() == Some("success")),
        "{fires:?}"
    );
    // Another job's id does not find it.
    assert_eq!(repo.get(job.id + 1, id).await.unwrap(), None);

    // A disabled job's times after its schedule's start are backfilled too.
    store
        .jobs()
        .set_enabled(job.id, false, None, "t", s(7))
        .await
        .unwrap();
    let late = repo
        .create(job.id, s(7), s(8), &[s(7), s(8)], "alice", s(100))
        .await
        .unwrap();
    assert_eq!(late.times, [s(7), s(8)]);
}

async fn backfill_cancel_drops_the_rest_and_stops_the_running_run(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("cancelled"), "t", now())
        .await
        .unwrap();
    let repo = store.backfills();
    let times: Vec<DateTime<Utc>> = (-5..=-1).map(s).collect();
    let created = repo
        .create(job.id, s(-5), s(-1), &times, "alice", s(100))
        .await
        .unwrap();
    let id = created.record.id;
    let live = |_: i64, _: &str| true;
    let first = repo
        .advance(id, None, &live, s(100))
        .await
        .unwrap()
        .unwrap();
    let (run, _, at) = claim(&store, first).await;
    assert_eq!(at, s(-5));
    let cancelled = repo
        .cancel(job.id, id, "bob", s(150))
        .await
        .unwrap()
        .unwrap();
    assert!(cancelled.first);
    assert_eq!(cancelled.dropped, 4);
    assert_eq!(cancelled.runs, [run]);
    assert_eq!(cancelled.record.status, "cancelled");
    assert_eq!(cancelled.record.cancelled_by.as_deref(), Some("bob"));
    // The running run is asked to stop, like `POST /api/runs/{id}/cancel`.
    assert_eq!(
        store.fires().cancel_requests(&[run]).await.unwrap(),
        [(run, "bob".to_string())]
    );
    // Asked again: nothing changes.
    let again = repo
        .cancel(job.id, id, "carol", s(160))
        .await
        .unwrap()
        .unwrap();
    assert!(!again.first);
    assert_eq!(again.record.cancelled_by.as_deref(), Some("bob"));
    assert_eq!(
        repo.cancel(job.id + 1, id, "bob", s(160)).await.unwrap(),
        None
    );
    // Nothing more is released once it ends.
    assert_eq!(
        repo.advance(id, Some(first), &live, s(170)).await.unwrap(),
        None
    );
    let fires = repo.fires(id).await.unwrap();
    assert_eq!(fires.len(), 1);
    // The dropped times are missing again: a new backfill takes them.
    let retry = repo
        .create(job.id, s(-5), s(-1), &times, "alice", s(200))
        .await
        .unwrap();
    assert_eq!(retry.times, [s(-4), s(-3), s(-2), s(-1)]);
    // The purge of old fires leaves queued ones alone: they are to run.
    store.purge().fires_before(s(10_000), 0, 100).await.unwrap();
    assert_eq!(repo.fires(retry.record.id).await.unwrap().len(), 4);
}
