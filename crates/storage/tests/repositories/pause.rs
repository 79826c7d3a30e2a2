//! Pauses (issue 10 part 3) on all three databases: a pause keeps its
//! reason, end, author and time; enabling clears it; a batch reports what
//! it wrote; and of many instances racing to end one pause exactly one
//! enables the job and writes one audit entry.

use super::*;
use qiwu_domain::pause::PauseRequest;
use qiwu_storage::JobSelection;

scenarios!(
    pause_keeps_its_note_and_enabling_clears_it,
    pause_many_by_ids_and_by_group,
    resume_race_has_one_winner,
);

fn pause(reason: Option<&str>, until: Option<i64>) -> PauseRequest {
    PauseRequest {
        enabled: false,
        reason: reason.map(str::to_owned),
        until: until.map(at),
    }
}

fn enable() -> PauseRequest {
    PauseRequest {
        enabled: true,
        reason: None,
        until: None,
    }
}

const T: i64 = 1_800_000_000_000;

async fn pause_keeps_its_note_and_enabling_clears_it(store: Store) {
    let jobs = store.jobs();
    let job = jobs.create(&new_job("p"), "alice", now()).await.unwrap();
    let paused = jobs
        .pause(
            job.id,
            &pause(Some("维护"), Some(T + 60_000)),
            Some(1),
            "bob",
            at(T),
        )
        .await
        .unwrap();
    assert!(paused.changed());
    let after = &paused.after;
    assert!(!after.enabled);
    assert_eq!(after.pause.reason.as_deref(), Some("维护"));
    assert_eq!(after.pause.by.as_deref(), Some("bob"));
    assert_eq!(after.pause.at, Some(at(T)));
    assert_eq!(after.pause.until, Some(at(T + 60_000)));
    assert_eq!(jobs.next_resume().await.unwrap(), Some(at(T + 60_000)));
    assert!(
        jobs.due_resumes(at(T + 59_999), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        jobs.due_resumes(at(T + 60_000), 10).await.unwrap(),
        [(job.id, at(T + 60_000))]
    );

    // A bare disable of a disabled job changes nothing; a new note
    // replaces the pause (and its end).
    let same = jobs
        .pause(job.id, &pause(None, None), None, "carol", at(T + 1))
        .await
        .unwrap();
    assert!(!same.changed());
    assert_eq!(same.after, paused.after);
    let moved = jobs
        .pause(
            job.id,
            &pause(None, Some(T + 120_000)),
            None,
            "carol",
            at(T + 2),
        )
        .await
        .unwrap();
    assert!(moved.changed());
    assert_eq!(moved.after.pause.reason, None);
    assert_eq!(moved.after.pause.by.as_deref(), Some("carol"));
    assert_eq!(moved.after.pause.until, Some(at(T + 120_000)));
    assert_eq!(moved.after.schedule_from, paused.after.schedule_from);

    // Enabling clears every pause field; nothing is left to resume.
    let on = jobs
        .pause(job.id, &enable(), None, "dave", at(T + 3))
        .await
        .unwrap();
    assert!(on.after.enabled);
    assert_eq!(on.after.pause, qiwu_storage::Pause::default());
    assert_eq!(jobs.next_resume().await.unwrap(), None);

    // A plain disable notes who and when; an edit enabling the job clears it.
    let off = jobs
        .set_enabled(job.id, false, None, "erin", at(T + 4))
        .await
        .unwrap();
    assert_eq!(off.pause.by.as_deref(), Some("erin"));
    assert_eq!(off.pause.at, Some(at(T + 4)));
    assert_eq!(off.pause.until, None);
    let edited = jobs
        .update(job.id, off.version, &new_job("p"), "frank", at(T + 5))
        .await
        .unwrap();
    assert!(edited.enabled);
    assert_eq!(edited.pause, qiwu_storage::Pause::default());
}

async fn pause_many_by_ids_and_by_group(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "u", now()).await.unwrap();
    let b = jobs.create(&new_job("b"), "u", now()).await.unwrap();
    let mut other = new_job("c");
    other.group = "system".into();
    let c = jobs.create(&other, "u", now()).await.unwrap();
    jobs.set_enabled(b.id, false, None, "u", now())
        .await
        .unwrap();

    let batch = jobs
        .pause_many(
            JobSelection::Ids(&[b.id, a.id, 999_999, a.id]),
            &pause(None, None),
            "bob",
            at(T),
        )
        .await
        .unwrap();
    let changed: Vec<i64> = batch.changed.iter().map(|o| o.after.id).collect();
    assert_eq!(changed, [a.id]);
    assert!(batch.changed[0].before.enabled);
    assert_eq!(batch.unchanged, [b.id]);
    assert_eq!(batch.not_found, [999_999]);

    let batch = jobs
        .pause_many(
            JobSelection::Group("default"),
            &pause(Some("月结"), Some(T + 60_000)),
            "bob",
            at(T + 1),
        )
        .await
        .unwrap();
    let changed: Vec<i64> = batch.changed.iter().map(|o| o.after.id).collect();
    assert_eq!(changed, [a.id, b.id]);
    for o in &batch.changed {
        assert_eq!(o.after.pause.reason.as_deref(), Some("月结"));
        assert_eq!(o.after.pause.until, Some(at(T + 60_000)));
    }
    assert!(batch.unchanged.is_empty() && batch.not_found.is_empty());
    assert!(jobs.get(c.id).await.unwrap().unwrap().enabled);

    let batch = jobs
        .pause_many(JobSelection::Group("default"), &enable(), "bob", at(T + 2))
        .await
        .unwrap();
    assert_eq!(batch.changed.len(), 2);
    assert_eq!(jobs.next_resume().await.unwrap(), None);
}

async fn resume_race_has_one_winner(store: Store) {
    let jobs = store.jobs();
    let job = jobs.create(&new_job("r"), "u", now()).await.unwrap();
    let until = T + 60_000;
    let paused = jobs
        .pause(job.id, &pause(Some("x"), Some(until)), None, "bob", at(T))
        .await
        .unwrap()
        .after;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .jobs()
                .resume(
                    job.id,
                    at(until),
                    "system",
                    |name| format!("resumed {name}"),
                    at(until + i),
                )
                .await
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(job) = t.await.unwrap().unwrap() {
            winners.push(job);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let resumed = &winners[0];
    assert!(resumed.enabled);
    assert_eq!(resumed.version, paused.version + 1);
    assert_eq!(resumed.updated_by, "system");
    assert_eq!(resumed.pause, qiwu_storage::Pause::default());
    // The new schedule starts at the end of the pause, not when it was noticed.
    assert_eq!(resumed.schedule_from, at(until));
    let entries: Vec<audit_log::Model> = audit_log::Entity::find()
        .filter(audit_log::Column::Action.eq("job.enable"))
        .all(store.connection())
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].actor, "system");
    assert_eq!(entries[0].summary, "resumed r");
    assert_eq!(jobs.next_resume().await.unwrap(), None);

    // A stale end (the job was paused again later) is not resumed.
    let again = jobs
        .pause(
            job.id,
            &pause(None, Some(until + 60_000)),
            None,
            "bob",
            at(until + 10),
        )
        .await
        .unwrap()
        .after;
    let stale = jobs
        .resume(
            job.id,
            at(until),
            "system",
            |n| n.to_owned(),
            at(until + 20),
        )
        .await
        .unwrap();
    assert!(stale.is_none());
    assert_eq!(jobs.get(job.id).await.unwrap().unwrap(), again);
}
