//! Freeze windows (issue 11, part 4) on all three databases: create, read,
//! list, edits and deletions only before the start (decided by the write
//! itself), and the catch-up at a window's end claimed once.

use super::*;
use qiwu_domain::freeze::{FreezeScope, FreezeSpec};
use qiwu_storage::{ClaimContext, ClaimOutcome, FirstRun, FreezeRefusal, RunStatus, Trigger};

scenarios!(freezes_crud_and_start, freeze_catch_up_claimed_once);

fn spec(from: i64, to: i64, scope: FreezeScope) -> FreezeSpec {
    FreezeSpec {
        from: now() + chrono::TimeDelta::seconds(from),
        to: now() + chrono::TimeDelta::seconds(to),
        scope,
        reason: "发布 release".into(),
    }
}

async fn freezes_crud_and_start(store: Store) {
    let repo = store.freezes();
    let ahead = repo
        .create(
            &spec(3600, 7200, FreezeScope::JobIds(vec![3, 7])),
            "admin",
            now(),
        )
        .await
        .unwrap();
    assert_eq!(ahead.version, 1);
    assert_eq!(ahead.scope, FreezeScope::JobIds(vec![3, 7]));
    assert_eq!(
        ahead.from,
        truncate_to_millis(now()) + chrono::TimeDelta::seconds(3600)
    );
    let group = repo
        .create(
            &spec(60, 120, FreezeScope::Group("财务".into())),
            "admin",
            now(),
        )
        .await
        .unwrap();
    let all = repo
        .create(&spec(-60, 60, FreezeScope::All), "admin", now())
        .await
        .unwrap();
    assert_eq!(
        repo.get(group.id).await.unwrap().unwrap().scope,
        FreezeScope::Group("财务".into())
    );
    // Listed by start, the latest first; the engine's read by end.
    let ids: Vec<i64> = repo.list().await.unwrap().iter().map(|f| f.id).collect();
    assert_eq!(ids, [ahead.id, group.id, all.id]);
    let ending: Vec<i64> = repo
        .ending_after(now() + chrono::TimeDelta::seconds(90))
        .await
        .unwrap()
        .iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(ending, [group.id, ahead.id]);

    // An edit before the start, at the version read.
    let edit = spec(1800, 7200, FreezeScope::Handler("demo.echo".into()));
    let (before, after) = repo
        .update(ahead.id, 1, &edit, "editor", now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((before.version, after.version), (1, 2));
    assert_eq!(after.scope, FreezeScope::Handler("demo.echo".into()));
    assert_eq!(after.updated_by, "editor");
    assert_eq!(
        repo.update(ahead.id, 1, &edit, "editor", now())
            .await
            .unwrap(),
        Err(FreezeRefusal::StaleVersion { current: 2 })
    );
    // Started windows are kept: at their start, and after.
    let at_start = group.from;
    assert!(matches!(
        repo.update(group.id, 1, &edit, "editor", at_start)
            .await
            .unwrap(),
        Err(FreezeRefusal::Started(_))
    ));
    assert!(matches!(
        repo.delete(all.id, now()).await.unwrap(),
        Err(FreezeRefusal::Started(_))
    ));
    assert_eq!(
        repo.delete(9_999_999, now()).await.unwrap(),
        Err(FreezeRefusal::NotFound)
    );
    assert_eq!(
        repo.update(9_999_999, 1, &edit, "editor", now())
            .await
            .unwrap(),
        Err(FreezeRefusal::NotFound)
    );
    // Deleted before its start.
    let deleted = repo.delete(ahead.id, now()).await.unwrap().unwrap();
    assert_eq!(deleted.version, 2);
    assert!(repo.get(ahead.id).await.unwrap().is_none());
}

async fn freeze_catch_up_claimed_once(store: Store) {
    let job = store
        .jobs()
        .create(&new_job("frozen"), "admin", now())
        .await
        .unwrap();
    let ctx = |instance| ClaimContext {
        instance,
        now: now() + chrono::TimeDelta::seconds(100),
        running_elsewhere: None,
        job_deleted: "deleted",
    };
    let first = now() + chrono::TimeDelta::seconds(10);
    let end = now() + chrono::TimeDelta::seconds(20);
    let fires = store.fires();
    let won = fires
        .claim_freeze_catch_up(job.id, first, end, &FirstRun::running(), &ctx("w1"))
        .await
        .unwrap();
    let ClaimOutcome::Claimed(claimed) = won else {
        panic!("the first claim wins: {won:?}");
    };
    assert_eq!(
        (claimed.trigger, claimed.status, claimed.scheduled_at),
        (
            Trigger::Misfire,
            RunStatus::Running,
            truncate_to_millis(end)
        )
    );
    assert_eq!(claimed.job.map(|j| j.id), Some(job.id));
    // Another worker at the same window end: nothing more.
    let lost = fires
        .claim_freeze_catch_up(job.id, first, end, &FirstRun::running(), &ctx("w2"))
        .await
        .unwrap();
    assert!(matches!(lost, ClaimOutcome::Taken), "{lost:?}");
    assert_eq!(fires.runs_of_fire(claimed.fire_id).await.unwrap().len(), 1);
    // Another window's end is another catch-up; the schedule's chain and
    // run-once requests are untouched.
    let later = fires
        .claim_freeze_catch_up(
            job.id,
            first,
            end + chrono::TimeDelta::seconds(1),
            &FirstRun::running(),
            &ctx("w2"),
        )
        .await
        .unwrap();
    assert!(matches!(later, ClaimOutcome::Claimed(_)), "{later:?}");
    assert!(fires.tips(&[job.id]).await.unwrap().is_empty());
    assert!(fires.pending(10).await.unwrap().is_empty());
}
