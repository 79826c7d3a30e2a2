//! Run-once requests on all three databases: an `Idempotency-Key` gives
//! one fire however many requests race with it, per caller, for its TTL;
//! who asked and the callback URL are kept on the fire; the callback reads
//! the fire's last attempt; callback deliveries are claimed only when they
//! can be signed; expired keys are purged.

use super::*;
use chrono::Duration;
use qiwu_storage::{
    ClaimContext, ClaimOutcome, FirstRun, IdempotencyKey, ManualClaim, ManualQueued, ManualRequest,
    NewNotification, OutboxStatus, RunEnd, RunStart, RunStatus, Trigger,
};

scenarios!(
    run_once_keys_start_one_fire_per_caller_under_a_race,
    run_once_callbacks_read_the_last_attempt_and_wait_for_a_secret,
    a_sweep_finds_the_callbacks_of_the_runs_it_closed,
);

fn request(job_id: i64, at: DateTime<Utc>) -> ManualRequest<'static> {
    ManualRequest {
        job_id,
        now: at,
        traceparent: None,
        started_by: Some("alice"),
        callback_url: Some("https://cb.example.com/done"),
    }
}

fn key<'a>(caller: &'a str, key: &'a str) -> IdempotencyKey<'a> {
    IdempotencyKey {
        caller,
        key,
        ttl: Duration::hours(24),
    }
}

async fn run_once_keys_start_one_fire_per_caller_under_a_race(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("keyed"), "t", now())
        .await
        .unwrap();
    let other = store
        .jobs()
        .create(&new_job("other"), "t", now())
        .await
        .unwrap();
    // Eight requests with one key at once: one fire, every answer names it.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .fires()
                    .create_manual_keyed(&request(job.id, now()), &key("alice", "order-1"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut created = Vec::new();
    let mut existing = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            ManualQueued::Created(id) => created.push(id),
            ManualQueued::Existing(found) => {
                assert_eq!(found.job_id, job.id);
                existing.push(found.fire_id);
            }
        }
    }
    assert_eq!(created.len(), 1, "{created:?} {existing:?}");
    let fire = created[0];
    assert!(existing.iter().all(|&id| id == fire), "{existing:?}");
    assert_eq!(store.fires().pending_count(job.id).await.unwrap(), 1);
    assert_eq!(
        store
            .fires()
            .keyed(&key("alice", "order-1"), now())
            .await
            .unwrap()
            .map(|k| (k.job_id, k.fire_id)),
        Some((job.id, fire))
    );
    // The same key for another job answers the first job's fire (the API
    // makes that a 422); nothing is queued for the other job.
    let again = store
        .fires()
        .create_manual_keyed(&request(other.id, now()), &key("alice", "order-1"))
        .await
        .unwrap();
    assert!(
        matches!(again, ManualQueued::Existing(f) if f.job_id == job.id && f.fire_id == fire),
        "{again:?}"
    );
    assert_eq!(store.fires().pending_count(other.id).await.unwrap(), 0);
    // Another caller's key of the same text is its own.
    let bob = store
        .fires()
        .create_manual_keyed(&request(job.id, now()), &key("apikey:ci", "order-1"))
        .await
        .unwrap();
    assert!(
        matches!(bob, ManualQueued::Created(id) if id != fire),
        "{bob:?}"
    );
    // Keys are compared exactly (byte-wise on MySQL too).
    let upper = store
        .fires()
        .create_manual_keyed(&request(job.id, now()), &key("alice", "ORDER-1"))
        .await
        .unwrap();
    assert!(matches!(upper, ManualQueued::Created(_)), "{upper:?}");
    // After 24 hours the key is ignored: it starts a new fire, and is now
    // that fire's.
    let later = now() + Duration::hours(24) + Duration::seconds(1);
    assert_eq!(
        store
            .fires()
            .keyed(&key("alice", "order-1"), later)
            .await
            .unwrap(),
        None
    );
    let renewed = store
        .fires()
        .create_manual_keyed(&request(job.id, later), &key("alice", "order-1"))
        .await
        .unwrap();
    let ManualQueued::Created(renewed) = renewed else {
        panic!("{renewed:?}");
    };
    assert_ne!(renewed, fire);
    assert_eq!(
        store
            .fires()
            .keyed(&key("alice", "order-1"), later)
            .await
            .unwrap()
            .map(|k| k.fire_id),
        Some(renewed)
    );
    // The purge removes the expired keys only (batches of 1).
    let purge = store.purge();
    let cutoff = later - Duration::hours(24);
    let mut purged = 0;
    loop {
        let n = purge.run_once_keys_before(cutoff, 1).await.unwrap();
        purged += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(purged, 2, "apikey:ci/order-1 and alice/ORDER-1");
    assert!(
        store
            .fires()
            .keyed(&key("alice", "order-1"), later)
            .await
            .unwrap()
            .is_some()
    );
    // Who asked is on the fire; unkeyed requests work as before.
    assert_eq!(
        store.fires().started_by(fire).await.unwrap().as_deref(),
        Some("alice")
    );
    let plain = store.fires().create_manual(job.id, now()).await.unwrap();
    assert_eq!(store.fires().started_by(plain).await.unwrap(), None);
}

async fn run_once_callbacks_read_the_last_attempt_and_wait_for_a_secret(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("called back"), "t", now())
        .await
        .unwrap();
    let fire = store
        .fires()
        .create_manual_request(&request(job.id, now()))
        .await
        .unwrap();
    let plain = store.fires().create_manual(job.id, now()).await.unwrap();
    assert_eq!(store.fires().callback(plain).await.unwrap(), None);
    // Not run yet: the URL is known, the end is not.
    let cb = store
        .fires()
        .callback(fire)
        .await
        .unwrap()
        .expect("callback");
    assert_eq!(cb.url, "https://cb.example.com/done");
    assert_eq!(cb.job_id, job.id);
    assert_eq!((cb.started_at, cb.last.clone()), (None, None));

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
    let end = |status, error: &str, at: DateTime<Utc>| RunEnd {
        status,
        finished_at: at,
        duration_ms: 5,
        output: String::new(),
        error: error.into(),
        trace_id: None,
        started_at: None,
    };
    store
        .fires()
        .finish_run(
            claimed.run_id,
            &end(RunStatus::Failed, "first", now() + Duration::seconds(1)),
        )
        .await
        .unwrap();
    let retry = store
        .fires()
        .start_run(
            fire,
            &RunStart {
                job_id: job.id,
                job_name: "called back",
                handler: "demo.echo",
                trigger: Trigger::Manual,
                scheduled_at: claimed.scheduled_at,
                attempt: 2,
                instance: "w1",
                started_at: now() + Duration::seconds(2),
            },
        )
        .await
        .unwrap();
    // The retry still runs: no end to report yet.
    let cb = store
        .fires()
        .callback(fire)
        .await
        .unwrap()
        .expect("callback");
    assert_eq!(cb.started_at, Some(truncate_to_millis(now())));
    assert_eq!(cb.last, None);
    let finished = now() + Duration::seconds(3);
    store
        .fires()
        .finish_run(retry, &end(RunStatus::Timeout, "too slow", finished))
        .await
        .unwrap();
    let last = store
        .fires()
        .callback(fire)
        .await
        .unwrap()
        .expect("callback")
        .last
        .expect("ended");
    assert_eq!(
        (last.attempt, last.status.as_str(), last.error.as_str()),
        (2, "timeout", "too slow")
    );
    assert_eq!(last.finished_at, truncate_to_millis(finished));

    // The delivery is claimed only by a sender that can sign it.
    let (_, row) = store
        .notifications()
        .create_with_callback(
            &NewNotification {
                recipient: "run_callback".into(),
                template_code: "scheduler.run_callback".into(),
                title: "t".into(),
                body: "{}".into(),
            },
            "https://cb.example.com/done",
            "{}",
            now(),
        )
        .await
        .unwrap();
    assert_eq!(row.url.as_deref(), Some("https://cb.example.com/done"));
    assert_eq!(row.channel_id, None);
    let lease = Duration::minutes(3);
    let outbox = store.outbox();
    assert!(
        outbox
            .claim_due_where(now(), lease, 10, true, false)
            .await
            .unwrap()
            .is_empty(),
        "not with the webhook rows"
    );
    assert!(
        outbox
            .claim_due_for(now(), lease, 10, false)
            .await
            .unwrap()
            .is_empty()
    );
    let claimed = outbox
        .claim_due_where(now(), lease, 10, false, true)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, row.id);
    assert_eq!(claimed[0].status, OutboxStatus::Sending);
}

/// A sweep that closed runs finds the run-once fires among them that named
/// a callback (no process of theirs will report them): by the sweep's
/// instances, reason and time, never a fire without a callback.
async fn a_sweep_finds_the_callbacks_of_the_runs_it_closed(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("swept"), "t", now())
        .await
        .unwrap();
    let called = store
        .fires()
        .create_manual_request(&request(job.id, now()))
        .await
        .unwrap();
    let plain = store.fires().create_manual(job.id, now()).await.unwrap();
    let ctx = ClaimContext {
        instance: "w1",
        now: now(),
        running_elsewhere: None,
        job_deleted: "deleted",
    };
    let claims: Vec<ManualClaim> = [called, plain]
        .into_iter()
        .map(|fire_id| ManualClaim {
            fire_id,
            first: FirstRun::running(),
        })
        .collect();
    let outcomes = store.fires().claim_manual(&claims, &ctx).await.unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ClaimOutcome::Claimed(_))),
        "{outcomes:?}"
    );
    let fires = store.fires();
    let w1 = ["w1".to_string()];
    let w2 = ["w2".to_string()];
    let swept_at = now() + Duration::seconds(30);
    // Nothing closed yet: nothing to report.
    assert!(
        fires
            .callbacks_of_swept(Some(&w1), "lost", swept_at)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        fires
            .close_running(Some(&w1), "lost", swept_at, true)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        fires
            .callbacks_of_swept(Some(&w1), "lost", swept_at)
            .await
            .unwrap(),
        vec![called]
    );
    assert_eq!(
        fires
            .callbacks_of_swept(None, "lost", swept_at)
            .await
            .unwrap(),
        vec![called]
    );
    // Another instance's, another reason's or another time's sweep.
    for (instances, reason, at) in [
        (Some(&w2[..]), "lost", swept_at),
        (Some(&w1[..]), "orphan", swept_at),
        (Some(&w1[..]), "lost", swept_at + Duration::seconds(1)),
    ] {
        assert!(
            fires
                .callbacks_of_swept(instances, reason, at)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
