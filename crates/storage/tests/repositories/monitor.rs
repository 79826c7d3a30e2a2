//! What observability reads and writes, on all three databases: the
//! per-job reads of a scrape, the backlogs, stuck runs, trace ids kept with
//! run ends, and a run-once fire's `traceparent`.

use super::*;
use qiwu_storage::{
    ClaimContext, ClaimOutcome, EndWritten, FirstRun, RunEnd, RunStatus, TimeClaim, Trigger,
};

scenarios!(monitor_reads_and_trace_ids);

fn s(n: i64) -> DateTime<Utc> {
    at(1_764_000_000_000 + n * 1000)
}

/// Claims the job's fire time `s(n)` (following `s(n - 1)`) at `s(100)`.
async fn claim(store: &Store, job: &JobRecord, n: i64) -> i64 {
    let claim = TimeClaim {
        job_id: job.id,
        trigger: Trigger::Schedule,
        first_at: s(n),
        scheduled_at: s(n),
        after: Some(s(n - 1)),
        schedule_from: job.schedule_from,
        first: FirstRun::running(),
        expect_taken: false,
    };
    let ctx = ClaimContext {
        instance: "mon",
        now: s(100),
        running_elsewhere: None,
        job_deleted: "deleted",
    };
    match store
        .fires()
        .claim_times(&[claim], &ctx)
        .await
        .unwrap()
        .pop()
    {
        Some(ClaimOutcome::Claimed(c)) => c.run_id,
        other => panic!("not claimed: {other:?}"),
    }
}

fn end(status: RunStatus, at: DateTime<Utc>, trace_id: Option<&str>) -> RunEnd {
    RunEnd {
        status,
        finished_at: at,
        duration_ms: 5,
        output: String::new(),
        error: String::new(),
        trace_id: trace_id.map(str::to_string),
        started_at: None,
    }
}

async fn monitor_reads_and_trace_ids(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("mon-a"), "t", now())
        .await
        .unwrap();
    let mut off = new_job("mon-off");
    off.enabled = false;
    store.jobs().create(&off, "t", now()).await.unwrap();
    let monitor = store.monitor();
    let health = monitor.job_health().await.unwrap();
    assert_eq!(
        health.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
        ["mon-a"],
        "enabled jobs only"
    );
    assert_eq!(
        (health[0].last_success, health[0].last_status.as_deref()),
        (None, None)
    );
    assert_eq!(health[0].cron, "0 0 * * * *");
    assert_eq!(health[0].schedule_from, job.schedule_from);

    // A success with a trace id, then a failure without one, in one batch.
    let first = claim(&store, &job, 1).await;
    let second = claim(&store, &job, 2).await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let written = store
        .fires()
        .finish_runs(&[
            (first, end(RunStatus::Success, s(101), Some(trace))),
            (second, end(RunStatus::Failed, s(102), None)),
        ])
        .await
        .unwrap();
    assert_eq!(written, [EndWritten::Recorded; 2]);
    let trace_of = |id: i64| {
        let store = store.clone();
        async move {
            run::Entity::find_by_id(id)
                .one(store.connection())
                .await
                .unwrap()
                .unwrap()
                .trace_id
        }
    };
    assert_eq!(trace_of(first).await.as_deref(), Some(trace));
    assert_eq!(trace_of(second).await, None);
    assert_eq!(
        store
            .runs()
            .get(first)
            .await
            .unwrap()
            .unwrap()
            .trace_id
            .as_deref(),
        Some(trace)
    );
    let health = monitor.job_health().await.unwrap();
    assert_eq!(health[0].last_success, Some(s(101)));
    assert_eq!(health[0].last_status.as_deref(), Some("failed"));

    // A run still running: stuck once 60 s past its job's 60 s timeout.
    let third = claim(&store, &job, 3).await;
    let grace = chrono::Duration::seconds(60);
    assert_eq!(monitor.overdue_runs(s(219), grace).await.unwrap(), 0);
    assert_eq!(monitor.overdue_runs(s(221), grace).await.unwrap(), 1);
    let health = monitor.job_health().await.unwrap();
    assert_eq!(health[0].last_status.as_deref(), Some("running"));
    assert!(third > second);

    // A run-once request keeps the caller's trace context.
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let fire = store
        .fires()
        .create_manual_traced(job.id, now(), Some(parent))
        .await
        .unwrap();
    assert_eq!(
        store.fires().traceparent(fire).await.unwrap().as_deref(),
        Some(parent)
    );
    let plain = store.fires().create_manual(job.id, now()).await.unwrap();
    assert_eq!(store.fires().traceparent(plain).await.unwrap(), None);
    assert_eq!(monitor.pending_run_once().await.unwrap(), 2);
    assert_eq!(monitor.outbox_backlog().await.unwrap(), (0, None));

    let pool = store.pool_stats();
    assert!(pool.max >= 1 && pool.idle <= pool.size, "{pool:?}");
}
