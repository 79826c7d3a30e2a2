//! The fire ledger on all three databases: one record per fire time
//! whoever writes it, the chain that makes a hole visible, batches whose
//! claims end differently, and run ends.

use super::*;
use qiwu_storage::{
    ClaimContext, ClaimOutcome, EndWritten, FirstRun, ManualClaim, RunEnd, RunStatus, TimeClaim,
    Trigger,
};
use sea_orm::Statement;

scenarios!(
    ledger_one_instance_wins_each_time,
    ledger_claims_follow_the_schedule_not_every_edit,
    ledger_a_late_resume_leaves_every_time_after_the_pause,
    ledger_an_edit_does_not_hide_a_missed_time,
    ledger_a_gap_is_caught_up_before_the_next_time,
    ledger_a_catch_up_and_a_timer_collide_on_one_record,
    ledger_batch_corner_cases,
    ledger_a_backup_batch_claims_only_what_has_no_record,
    ledger_a_failed_batch_writes_nothing,
    ledger_ends_in_batches_and_the_real_end_beats_a_sweep,
    ledger_run_once_requests,
    ledger_a_job_running_elsewhere_is_skipped,
    ledger_text_with_nul_is_stored,
    ledger_old_records_are_purged_but_each_tip_stays,
    ledger_a_fire_claimed_ahead_starts_at_its_time_or_is_taken_back,
);

/// `n` seconds after 2025-11-24T16:00:00Z; jobs are created at
/// [`now`], 123 ms after `s(0)`.
fn s(n: i64) -> DateTime<Utc> {
    at(1_764_000_000_000 + n * 1000)
}

fn ctx(instance: &str) -> ClaimContext<'_> {
    ClaimContext {
        instance,
        now: s(100),
        running_elsewhere: None,
        job_deleted: "deleted",
    }
}

/// The timer fire of second `n` (following second `n - 1`).
fn timer(job: &JobRecord, n: i64) -> TimeClaim {
    TimeClaim {
        job_id: job.id,
        trigger: Trigger::Schedule,
        first_at: s(n),
        scheduled_at: s(n),
        after: Some(s(n - 1)),
        schedule_from: job.schedule_from,
        first: FirstRun::running(),
        expect_taken: false,
    }
}

/// A catch-up of seconds `first..=last` following `after`.
fn catch_up(job: &JobRecord, after: i64, first: i64, last: i64) -> TimeClaim {
    TimeClaim {
        job_id: job.id,
        trigger: Trigger::Misfire,
        first_at: s(first),
        scheduled_at: s(last),
        after: Some(s(after)),
        schedule_from: job.schedule_from,
        first: FirstRun::skipped("missed"),
        expect_taken: false,
    }
}

async fn claim_one(store: &Store, claim: TimeClaim, instance: &str) -> ClaimOutcome {
    let mut outcomes = store
        .fires()
        .claim_times(&[claim], &ctx(instance))
        .await
        .unwrap();
    outcomes.pop().unwrap()
}

fn kind(outcome: &ClaimOutcome) -> &'static str {
    match outcome {
        ClaimOutcome::Claimed(_) => "claimed",
        ClaimOutcome::Taken => "taken",
        ClaimOutcome::Stale => "stale",
        ClaimOutcome::Gap { .. } => "gap",
    }
}

async fn job(store: &Store, name: &str) -> JobRecord {
    store
        .jobs()
        .create(&new_job(name), "t", now())
        .await
        .unwrap()
}

async fn schedule_rows(store: &Store, job_id: i64) -> Vec<fire::Model> {
    use sea_orm::QueryOrder;
    fire::Entity::find()
        .filter(fire::Column::JobId.eq(job_id))
        .filter(fire::Column::Lane.eq(0))
        .order_by_asc(fire::Column::ScheduledAt)
        .all(store.connection())
        .await
        .unwrap()
}

async fn run_count(store: &Store) -> usize {
    run::Entity::find()
        .all(store.connection())
        .await
        .unwrap()
        .len()
}

async fn ledger_one_instance_wins_each_time(store: Store) {
    let job = job(&store, "every second").await;
    // Eight instances race for the same fire time: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, claim) = (store.clone(), timer(&job, 1));
        tasks.push(tokio::spawn(async move {
            let instance = format!("w{i}");
            claim_one(&store, claim, &instance).await
        }));
    }
    let mut kinds = Vec::new();
    for task in tasks {
        kinds.push(kind(&task.await.unwrap()));
    }
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "claimed", "taken", "taken", "taken", "taken", "taken", "taken", "taken"
        ]
    );
    assert_eq!(run_count(&store).await, 1);
    // The next second is the next record of the chain.
    let ClaimOutcome::Claimed(next) = claim_one(&store, timer(&job, 2), "w0").await else {
        panic!("second 2 was not claimed");
    };
    assert_eq!(next.status, RunStatus::Running);
    assert_eq!(next.job.as_ref().map(|j| j.id), Some(job.id));
    let rows = schedule_rows(&store, job.id).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].prev_at, Some(to_ms(s(1))));
    let tips = store.fires().tips(&[job.id]).await.unwrap();
    assert_eq!(tips.get(&job.id), Some(&s(2)));
}

fn to_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

async fn ledger_claims_follow_the_schedule_not_every_edit(store: Store) {
    let armed = job(&store, "edited").await;
    // A remark edit bumps the version but not the schedule: the timer armed
    // before it still claims, and the fire runs with the edited settings.
    let mut remark = new_job("edited");
    remark.remark = "new remark".into();
    let edited = store
        .jobs()
        .update(armed.id, armed.version, &remark, "t", now())
        .await
        .unwrap();
    assert_eq!(edited.schedule_from, armed.schedule_from);
    let ClaimOutcome::Claimed(claimed) = claim_one(&store, timer(&armed, 1), "w").await else {
        panic!("a remark edit dropped the fire");
    };
    assert_eq!(
        claimed.job.map(|j| j.remark),
        Some("new remark".to_string())
    );
    // A cron edit starts a new schedule: the old timer claims nothing.
    let mut cron = remark.clone();
    cron.cron = "*/5 * * * * *".into();
    let rescheduled = store
        .jobs()
        .update(armed.id, edited.version, &cron, "t", now())
        .await
        .unwrap();
    assert!(rescheduled.schedule_from > armed.schedule_from);
    assert_eq!(
        kind(&claim_one(&store, timer(&armed, 2), "w").await),
        "stale"
    );
    // Disabled: nothing, whatever the schedule.
    let disabled = store
        .jobs()
        .set_enabled(armed.id, false, None, "t", now())
        .await
        .unwrap();
    assert_eq!(
        kind(&claim_one(&store, timer(&disabled, 2), "w").await),
        "stale"
    );
    // Re-enabled: a new schedule again, and nothing at or before its start.
    let enabled = store
        .jobs()
        .set_enabled(armed.id, true, None, "t", s(5))
        .await
        .unwrap();
    assert_eq!(enabled.schedule_from, s(5));
    assert_eq!(
        kind(&claim_one(&store, timer(&enabled, 5), "w").await),
        "stale"
    );
    assert_eq!(
        kind(&claim_one(&store, timer(&enabled, 6), "w").await),
        "claimed"
    );
    // A deleted job: stale.
    store.jobs().delete(armed.id).await.unwrap();
    assert_eq!(
        kind(&claim_one(&store, timer(&enabled, 7), "w").await),
        "stale"
    );
}

/// The system's resume of a pause commits after the first time past the
/// pause's end (a busy database): the new schedule starts at the end, so
/// that time and the next are both claimed, one after the other, and a
/// catch-up of the times since the end starts from the end too.
async fn ledger_a_late_resume_leaves_every_time_after_the_pause(store: Store) {
    for catch_up_first in [false, true] {
        let job = job(&store, &format!("paused {catch_up_first}")).await;
        for n in 1..=2 {
            assert_eq!(
                kind(&claim_one(&store, timer(&job, n), "w").await),
                "claimed"
            );
        }
        let until = s(4) + chrono::Duration::milliseconds(200);
        let request = qiwu_domain::pause::PauseRequest {
            enabled: false,
            reason: Some("maintenance".into()),
            until: Some(until),
        };
        let paused_at = s(2) + chrono::Duration::milliseconds(500);
        store
            .jobs()
            .pause(job.id, &request, None, "alice", paused_at)
            .await
            .unwrap();
        // Committed 1.1 s after second 5, the first time past the end.
        let resumed = store
            .jobs()
            .resume(
                job.id,
                until,
                "system",
                |n| n.to_owned(),
                s(6) + chrono::Duration::milliseconds(100),
            )
            .await
            .unwrap()
            .expect("resumed");
        assert_eq!(resumed.schedule_from, until);
        assert!(resumed.updated_at > s(5));
        if catch_up_first {
            // A worker that arms it 2 s back records seconds 5 and 6 as
            // one catch-up from the end, then claims second 7.
            let mut missed = catch_up(&resumed, 4, 5, 6);
            missed.after = Some(until);
            assert_eq!(kind(&claim_one(&store, missed, "w").await), "claimed");
        } else {
            for n in 5..=6 {
                assert_eq!(
                    kind(&claim_one(&store, timer(&resumed, n), "w").await),
                    "claimed",
                    "second {n}"
                );
            }
        }
        assert_eq!(
            kind(&claim_one(&store, timer(&resumed, 7), "w").await),
            "claimed"
        );
        let rows = schedule_rows(&store, job.id).await;
        let chain: Vec<(Option<i64>, i64)> =
            rows.iter().map(|r| (r.prev_at, r.scheduled_at)).collect();
        let mut expected = vec![
            (Some(to_ms(job.schedule_from)), to_ms(s(1))),
            (Some(to_ms(s(1))), to_ms(s(2))),
            (Some(to_ms(until)), to_ms(s(5))),
        ];
        if catch_up_first {
            expected[2].1 = to_ms(s(6));
        } else {
            expected.push((Some(to_ms(s(5))), to_ms(s(6))));
        }
        expected.push((Some(to_ms(s(6))), to_ms(s(7))));
        assert_eq!(chain, expected, "catch-up first: {catch_up_first}");
    }
}

/// An edit that leaves the schedule alone (a remark) does not restart the
/// chain: a time missed before it is still a hole the next claim reports.
async fn ledger_an_edit_does_not_hide_a_missed_time(store: Store) {
    let job = job(&store, "remarked").await;
    assert_eq!(
        kind(&claim_one(&store, timer(&job, 1), "w").await),
        "claimed"
    );
    // Second 2 is missed (say, the database was down); the remark is
    // edited during second 3.
    let mut remark = new_job("remarked");
    remark.remark = "edited".into();
    let edited = store
        .jobs()
        .update(
            job.id,
            job.version,
            &remark,
            "t",
            s(2) + chrono::Duration::milliseconds(500),
        )
        .await
        .unwrap();
    assert_eq!(edited.schedule_from, job.schedule_from);
    assert_eq!(
        kind(&claim_one(&store, timer(&edited, 3), "w").await),
        "gap"
    );
    assert_eq!(
        kind(&claim_one(&store, catch_up(&edited, 1, 2, 2), "w").await),
        "claimed"
    );
    assert_eq!(
        kind(&claim_one(&store, timer(&edited, 3), "w").await),
        "claimed"
    );
}

async fn ledger_a_gap_is_caught_up_before_the_next_time(store: Store) {
    let job = job(&store, "gap").await;
    assert_eq!(
        kind(&claim_one(&store, timer(&job, 1), "w").await),
        "claimed"
    );
    // Second 2 was never recorded: second 3 cannot be claimed as if it
    // were. The gap says how far the job's records reach.
    let ClaimOutcome::Gap { tip } = claim_one(&store, timer(&job, 3), "w").await else {
        panic!("second 3 was claimed over a hole");
    };
    assert_eq!(tip, Some(s(1)));
    let ClaimOutcome::Claimed(skip) = claim_one(&store, catch_up(&job, 1, 2, 2), "w").await else {
        panic!("the catch-up was not claimed");
    };
    assert_eq!(
        (skip.status, skip.trigger),
        (RunStatus::Skipped, Trigger::Misfire)
    );
    assert_eq!(
        kind(&claim_one(&store, timer(&job, 3), "w").await),
        "claimed"
    );
    let rows = schedule_rows(&store, job.id).await;
    let covered: Vec<(Option<i64>, Option<i64>, i64)> = rows
        .iter()
        .map(|r| (r.prev_at, r.first_at, r.scheduled_at))
        .collect();
    assert_eq!(
        covered,
        [
            (
                Some(to_ms(job.schedule_from)),
                Some(to_ms(s(1))),
                to_ms(s(1))
            ),
            (Some(to_ms(s(1))), Some(to_ms(s(2))), to_ms(s(2))),
            (Some(to_ms(s(2))), Some(to_ms(s(3))), to_ms(s(3))),
        ]
    );
    let runs = store.fires().runs_of_fire(rows[1].id).await.unwrap();
    assert_eq!(runs, [(1, "skipped".to_string())]);
}

async fn ledger_a_catch_up_and_a_timer_collide_on_one_record(store: Store) {
    for round in 0..6 {
        let job = job(&store, &format!("race {round}")).await;
        assert_eq!(
            kind(&claim_one(&store, timer(&job, 1), "w").await),
            "claimed"
        );
        // A late peer claims second 2 while another instance records
        // seconds 2–4 as missed: both follow second 1, one record wins.
        let (a, b) = tokio::join!(
            claim_one(&store, timer(&job, 2), "timer"),
            claim_one(&store, catch_up(&job, 1, 2, 4), "catch-up"),
        );
        let mut kinds = [kind(&a), kind(&b)];
        kinds.sort_unstable();
        assert!(
            kinds == ["claimed", "taken"] || kinds == ["claimed", "gap"],
            "round {round}: {kinds:?}"
        );
        assert_eq!(
            schedule_rows(&store, job.id).await.len(),
            2,
            "round {round}"
        );
    }
}

async fn ledger_batch_corner_cases(store: Store) {
    let fine = job(&store, "fine").await;
    let disabled = job(&store, "disabled").await;
    let changed = job(&store, "changed").await;
    let holed = job(&store, "holed").await;
    let raced = job(&store, "raced").await;
    assert_eq!(
        kind(&claim_one(&store, timer(&fine, 1), "me").await),
        "claimed"
    );
    assert_eq!(
        kind(&claim_one(&store, timer(&raced, 1), "other").await),
        "claimed"
    );
    store
        .jobs()
        .set_enabled(disabled.id, false, None, "t", now())
        .await
        .unwrap();
    let mut edit = new_job("changed");
    edit.cron = "*/2 * * * * *".into();
    store
        .jobs()
        .update(changed.id, changed.version, &edit, "t", now())
        .await
        .unwrap();
    let batch = [
        timer(&fine, 2),
        timer(&disabled, 1),
        timer(&changed, 1),
        timer(&holed, 2),
        timer(&raced, 1),
    ];
    let outcomes = store.fires().claim_times(&batch, &ctx("me")).await.unwrap();
    let kinds: Vec<&str> = outcomes.iter().map(kind).collect();
    assert_eq!(kinds, ["claimed", "stale", "stale", "gap", "taken"]);
    // Only the claimed one wrote a run; the others wrote nothing.
    assert_eq!(run_count(&store).await, 3);
}

/// A backup's claims (`expect_taken`) are looked up first: a recorded time
/// is `Taken` without an attempt, the rest is claimed as any claim, in one
/// batch mixed with ordinary claims, the outcomes in claim order.
async fn ledger_a_backup_batch_claims_only_what_has_no_record(store: Store) {
    let recorded = job(&store, "recorded").await;
    let later = job(&store, "recorded later").await;
    let missed = job(&store, "missed by the primary").await;
    let disabled = job(&store, "disabled").await;
    let holed = job(&store, "holed").await;
    let primary = job(&store, "primary's own").await;
    for j in [&recorded, &later] {
        assert_eq!(
            kind(&claim_one(&store, timer(j, 1), "primary").await),
            "claimed"
        );
    }
    assert_eq!(
        kind(&claim_one(&store, timer(&later, 2), "primary").await),
        "claimed"
    );
    store
        .jobs()
        .set_enabled(disabled.id, false, None, "t", now())
        .await
        .unwrap();
    let backup = |claim: TimeClaim| TimeClaim {
        expect_taken: true,
        ..claim
    };
    let batch = [
        backup(timer(&recorded, 1)),
        backup(timer(&later, 1)),
        backup(timer(&missed, 1)),
        backup(timer(&disabled, 1)),
        backup(timer(&holed, 2)),
        timer(&primary, 1),
    ];
    let runs_before = run_count(&store).await;
    let outcomes = store
        .fires()
        .claim_times(&batch, &ctx("backup"))
        .await
        .unwrap();
    let kinds: Vec<&str> = outcomes.iter().map(kind).collect();
    assert_eq!(
        kinds,
        ["taken", "taken", "claimed", "stale", "gap", "claimed"]
    );
    let ClaimOutcome::Claimed(claimed) = &outcomes[2] else {
        panic!("the missed time was not claimed");
    };
    assert_eq!(claimed.scheduled_at, s(1));
    assert_eq!(run_count(&store).await, runs_before + 2);
    // The recorded times kept their one record each.
    assert_eq!(schedule_rows(&store, recorded.id).await.len(), 1);
    assert_eq!(schedule_rows(&store, later.id).await.len(), 2);
}

async fn ledger_a_failed_batch_writes_nothing(store: Store) {
    let a = job(&store, "a").await;
    let b = job(&store, "b").await;
    let db = store.connection();
    let rename = |from: &str, to: &str| {
        Statement::from_string(
            db.get_database_backend(),
            format!("ALTER TABLE {from} RENAME TO {to}"),
        )
    };
    db.execute_raw(rename("runs", "runs_away")).await.unwrap();
    let failed = store
        .fires()
        .claim_times(&[timer(&a, 1), timer(&b, 1)], &ctx("w"))
        .await;
    db.execute_raw(rename("runs_away", "runs")).await.unwrap();
    assert!(failed.is_err(), "{failed:?}");
    // The fires rows went with the failed transaction: nothing is claimed,
    // so the same claims succeed now.
    assert!(schedule_rows(&store, a.id).await.is_empty());
    let outcomes = store
        .fires()
        .claim_times(&[timer(&a, 1), timer(&b, 1)], &ctx("w"))
        .await
        .unwrap();
    assert_eq!(
        outcomes.iter().map(kind).collect::<Vec<_>>(),
        ["claimed", "claimed"]
    );
}

fn end(status: RunStatus, output: &str) -> RunEnd {
    RunEnd {
        status,
        finished_at: s(3),
        duration_ms: 1500,
        output: output.to_string(),
        error: String::new(),
        trace_id: None,
        started_at: None,
    }
}

async fn ledger_ends_in_batches_and_the_real_end_beats_a_sweep(store: Store) {
    let mut runs = Vec::new();
    for name in ["e1", "e2", "e3", "e4"] {
        let job = job(&store, name).await;
        let ClaimOutcome::Claimed(c) = claim_one(&store, timer(&job, 1), name).await else {
            panic!("not claimed");
        };
        runs.push(c.run_id);
    }
    let ends = vec![
        (runs[0], end(RunStatus::Success, "one")),
        (runs[1], end(RunStatus::Failed, &"日志".repeat(8000))),
        (runs[2], end(RunStatus::Timeout, "")),
    ];
    let written = store.fires().finish_runs(&ends).await.unwrap();
    assert_eq!(written, [EndWritten::Recorded; 3]);
    // A finished run is never rewritten.
    assert_eq!(
        store.fires().finish_runs(&ends).await.unwrap(),
        [EndWritten::NoRow; 3]
    );
    // Another instance closed run 4 as lost; its real end still wins.
    let closed = store
        .fires()
        .close_running(Some(&["e4".to_string()]), "lost", s(2), true)
        .await
        .unwrap();
    assert_eq!(closed, 1);
    assert_eq!(
        store
            .fires()
            .finish_run(runs[3], &end(RunStatus::Success, "real"))
            .await
            .unwrap(),
        EndWritten::Recorded
    );
    let row = run::Entity::find_by_id(runs[3])
        .one(store.connection())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.status.as_str(), row.output.as_str()),
        ("success", "real")
    );
    assert!(row.swept_at.is_some());
    let row = run::Entity::find_by_id(runs[1])
        .one(store.connection())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.status.as_str(), row.duration_ms),
        ("failed", Some(1500))
    );
    assert_eq!(row.output.chars().count(), 16_000);
}

async fn ledger_run_once_requests(store: Store) {
    let job = job(&store, "manual").await;
    let a = store.fires().create_manual(job.id, now()).await.unwrap();
    let b = store.fires().create_manual(job.id, now()).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(store.fires().pending_count(job.id).await.unwrap(), 2);
    let pending = store.fires().pending(10).await.unwrap();
    assert_eq!(pending.iter().map(|p| p.id).collect::<Vec<_>>(), [a, b]);
    // Two instances take the same requests: each request runs once.
    let claims: Vec<ManualClaim> = [a, b]
        .iter()
        .map(|&fire_id| ManualClaim {
            fire_id,
            first: FirstRun::running(),
        })
        .collect();
    let (fires, ctx1, ctx2) = (store.fires(), ctx("w1"), ctx("w2"));
    let (one, two) = tokio::join!(
        fires.claim_manual(&claims, &ctx1),
        fires.claim_manual(&claims, &ctx2),
    );
    let claimed = one
        .unwrap()
        .iter()
        .chain(two.unwrap().iter())
        .filter(|o| matches!(o, ClaimOutcome::Claimed(_)))
        .count();
    assert_eq!(claimed, 2);
    assert_eq!(store.fires().pending_count(job.id).await.unwrap(), 0);
    // A request whose job was deleted meanwhile is recorded failed.
    let c = store.fires().create_manual(job.id, now()).await.unwrap();
    store.jobs().delete(job.id).await.unwrap();
    let outcome = store
        .fires()
        .claim_manual(
            &[ManualClaim {
                fire_id: c,
                first: FirstRun::running(),
            }],
            &ctx("w1"),
        )
        .await
        .unwrap();
    let Some(ClaimOutcome::Claimed(orphan)) = outcome.first() else {
        panic!("{outcome:?}");
    };
    assert!(orphan.job.is_none());
    assert_eq!(orphan.status, RunStatus::Failed);
    assert_eq!(
        store.fires().runs_of_fire(c).await.unwrap(),
        [(1, "failed".to_string())]
    );
    // Run-once requests never count as the schedule's records.
    assert!(store.fires().tips(&[job.id]).await.unwrap().is_empty());
}

async fn ledger_a_job_running_elsewhere_is_skipped(store: Store) {
    let serial = job(&store, "serial").await;
    let mut parallel_job = new_job("parallel");
    parallel_job.allow_concurrent = true;
    let parallel = store
        .jobs()
        .create(&parallel_job, "t", now())
        .await
        .unwrap();
    for job in [&serial, &parallel] {
        assert_eq!(
            kind(&claim_one(&store, timer(job, 1), "w1").await),
            "claimed"
        );
    }
    let guarded = ClaimContext {
        running_elsewhere: Some("busy elsewhere"),
        ..ctx("w2")
    };
    let outcomes = store
        .fires()
        .claim_times(&[timer(&serial, 2), timer(&parallel, 2)], &guarded)
        .await
        .unwrap();
    let statuses: Vec<RunStatus> = outcomes
        .iter()
        .map(|o| match o {
            ClaimOutcome::Claimed(c) => c.status,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(statuses, [RunStatus::Skipped, RunStatus::Running]);
    // w1's own run is its slot's business (its end may still be on its
    // way): not a run elsewhere.
    let own = ClaimContext {
        running_elsewhere: Some("busy elsewhere"),
        ..ctx("w1")
    };
    let ClaimOutcome::Claimed(c) = store
        .fires()
        .claim_times(&[timer(&serial, 3)], &own)
        .await
        .unwrap()
        .remove(0)
    else {
        panic!("second 3 was not claimed");
    };
    assert_eq!((c.status, c.busy), (RunStatus::Running, false));
}

async fn ledger_text_with_nul_is_stored(store: Store) {
    let job = job(&store, "nul").await;
    let ClaimOutcome::Claimed(c) = claim_one(&store, timer(&job, 1), "w").await else {
        panic!("not claimed");
    };
    let mut with_nul = end(RunStatus::Failed, "a\0b");
    with_nul.error = "boom\0".into();
    assert_eq!(
        store.fires().finish_run(c.run_id, &with_nul).await.unwrap(),
        EndWritten::Recorded
    );
    let row = run::Entity::find_by_id(c.run_id)
        .one(store.connection())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.output.as_str(), row.error.as_str()),
        ("a\u{FFFD}b", "boom\u{FFFD}")
    );
}

async fn ledger_old_records_are_purged_but_each_tip_stays(store: Store) {
    let a = job(&store, "a").await;
    let b = job(&store, "b").await;
    for n in 1..=3 {
        assert_eq!(kind(&claim_one(&store, timer(&a, n), "w").await), "claimed");
    }
    assert_eq!(kind(&claim_one(&store, timer(&b, 1), "w").await), "claimed");
    let pending = store.fires().create_manual(b.id, s(50)).await.unwrap();
    // Batches of two, continuing after the last row looked at.
    let mut after = 0;
    let mut deleted = 0;
    while let (n, Some(last)) = store.purge().fires_before(s(200), after, 2).await.unwrap() {
        deleted += n;
        after = last;
    }
    assert_eq!(deleted, 2);
    let left: Vec<i64> = schedule_rows(&store, a.id)
        .await
        .iter()
        .map(|r| r.scheduled_at)
        .collect();
    assert_eq!(left, [to_ms(s(3))]);
    assert_eq!(schedule_rows(&store, b.id).await.len(), 1);
    assert!(
        store
            .fires()
            .pending_by_id(pending)
            .await
            .unwrap()
            .is_some()
    );
    // The chain goes on from the kept tip.
    assert_eq!(kind(&claim_one(&store, timer(&a, 4), "w").await), "claimed");
}

async fn run_row(store: &Store, id: i64) -> Option<run::Model> {
    run::Entity::find_by_id(id)
        .one(store.connection())
        .await
        .unwrap()
}

/// A fire claimed ahead of its time: its run is written `running` with the
/// planned start (a skip decided at the claim keeps the claim's time), the
/// "running elsewhere" check waits for its time (the claim reports a run
/// going on, for that check), its end writes the real
/// start, and a fire not yet started can be taken back — only by the
/// instance holding it, only while its first run is open — leaving the
/// time unclaimed for the next claim.
async fn ledger_a_fire_claimed_ahead_starts_at_its_time_or_is_taken_back(store: Store) {
    let serial = job(&store, "ahead").await;
    let other = job(&store, "ahead-2").await;
    assert_eq!(
        kind(&claim_one(&store, timer(&serial, 1), "w2").await),
        "claimed"
    );
    // Claimed at s(100) for s(100.4), while second 1 still runs on w2: running
    // (the overlap rule is met at the time), started as planned.
    let planned = s(100) + chrono::Duration::milliseconds(400);
    let ahead = |job: &JobRecord, n: i64| TimeClaim {
        first: FirstRun::running().starting_at(planned),
        ..timer(job, n)
    };
    let guarded = ClaimContext {
        running_elsewhere: Some("busy elsewhere"),
        ..ctx("w1")
    };
    let skipped_ahead = TimeClaim {
        first: FirstRun::skipped("decided now").starting_at(planned),
        ..timer(&other, 1)
    };
    let outcomes = store
        .fires()
        .claim_times(&[ahead(&serial, 2), skipped_ahead], &guarded)
        .await
        .unwrap();
    let claimed: Vec<(i64, i64, RunStatus, bool)> = outcomes
        .iter()
        .map(|o| match o {
            ClaimOutcome::Claimed(c) => (c.fire_id, c.run_id, c.status, c.busy),
            other => panic!("{other:?}"),
        })
        .collect();
    // The run still going on is reported, for the check at the time.
    assert_eq!((claimed[0].2, claimed[0].3), (RunStatus::Running, true));
    assert_eq!((claimed[1].2, claimed[1].3), (RunStatus::Skipped, false));
    let (fire_id, run_id, _, _) = claimed[0];
    let row = run_row(&store, run_id).await.unwrap();
    assert_eq!((row.started_at, row.finished_at), (to_ms(planned), None));
    let skip = run_row(&store, claimed[1].1).await.unwrap();
    assert_eq!(
        (skip.started_at, skip.finished_at),
        (to_ms(s(100)), Some(to_ms(s(100))))
    );

    // Only the holder takes it back, and only once.
    assert!(!store.fires().withdraw(fire_id, run_id, "w2").await.unwrap());
    assert!(store.fires().withdraw(fire_id, run_id, "w1").await.unwrap());
    assert!(!store.fires().withdraw(fire_id, run_id, "w1").await.unwrap());
    assert!(run_row(&store, run_id).await.is_none());
    assert_eq!(schedule_rows(&store, serial.id).await.len(), 1);
    // The time is free again: claimed afresh, this time to its end, which
    // writes when it really started.
    let ClaimOutcome::Claimed(again) = store
        .fires()
        .claim_times(&[ahead(&serial, 2)], &ctx("w1"))
        .await
        .unwrap()
        .remove(0)
    else {
        panic!("second 2 was not claimed again");
    };
    let real = planned + chrono::Duration::milliseconds(7);
    let written = store
        .fires()
        .finish_run(
            again.run_id,
            &RunEnd {
                started_at: Some(real),
                ..end(RunStatus::Success, "ran")
            },
        )
        .await
        .unwrap();
    assert_eq!(written, EndWritten::Recorded);
    let row = run_row(&store, again.run_id).await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.started_at),
        ("success", to_ms(real))
    );
    // A closed run is not taken back.
    assert!(
        !store
            .fires()
            .withdraw(again.fire_id, again.run_id, "w1")
            .await
            .unwrap()
    );
    // An end without a real start keeps the one written at the claim.
    let ClaimOutcome::Claimed(third) = claim_one(&store, timer(&serial, 3), "w1").await else {
        panic!("second 3 was not claimed");
    };
    store
        .fires()
        .finish_run(third.run_id, &end(RunStatus::Success, "ran"))
        .await
        .unwrap();
    let row = run_row(&store, third.run_id).await.unwrap();
    assert_eq!(row.started_at, to_ms(s(100)));
}
