//! The run log and the audit log on all three databases: pages newest
//! first with a cursor, filters, soft deletion, export rows, audit entries.

use super::*;
use qiwu_storage::{
    AuditCursor, AuditFilter, EXPORT_ERROR_CHARS, NewAudit, RunCursor, RunFilter, RunRecord,
};
use sea_orm::ActiveValue::Set;

scenarios!(
    runs_page_newest_first_with_a_cursor,
    runs_filters,
    runs_job_name_filter_seeks_named_jobs,
    runs_soft_delete_hides_everywhere,
    runs_export_rows,
    audit_record_filter_and_page,
);

/// 2025-11-25T00:00:00Z, the base of the fixtures' start times.
const T0: i64 = 1_764_028_800_000;

/// A run row to insert; `started_at` is what paging orders by.
fn run_row(job_id: i64, job_name: &str, started_at: i64, status: &str) -> run::ActiveModel {
    run::ActiveModel {
        id: NotSet,
        fire_id: Set(rand::random::<i64>().abs()),
        job_id: Set(job_id),
        job_name: Set(job_name.to_owned()),
        handler: Set("demo.echo".into()),
        trigger: Set("schedule".into()),
        scheduled_at: Set(started_at - 3),
        attempt: Set(1),
        status: Set(status.to_owned()),
        started_at: Set(started_at),
        finished_at: Set(Some(started_at + 10)),
        duration_ms: Set(Some(10)),
        instance: Set("host-1".into()),
        output: Set(format!("output of {job_name}")),
        error: Set(String::new()),
        swept_at: Set(None),
        deleted_at: Set(None),
        trace_id: Set(None),
        cancel_requested_at: Set(None),
        cancelled_by: Set(None),
    }
}

async fn insert_runs(store: &Store, rows: Vec<run::ActiveModel>) {
    for chunk in rows.chunks(100) {
        run::Entity::insert_many(chunk.to_vec())
            .exec(store.connection())
            .await
            .unwrap();
    }
}

/// Every visible run through pages of `limit`, checking each page's size.
async fn all_pages(store: &Store, filter: &RunFilter, limit: u64) -> Vec<RunRecord> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let (items, next) = store.runs().list(filter, limit, cursor).await.unwrap();
        assert!(items.len() as u64 <= limit);
        out.extend(items.iter().cloned());
        match next {
            Some(c) => {
                assert_eq!(items.len() as u64, limit, "only the last page is short");
                // The cursor survives its trip through a URL.
                cursor = Some(RunCursor::decode(&c.encode()).unwrap());
            }
            None => break,
        }
    }
    out
}

fn keys(items: &[RunRecord]) -> Vec<(i64, i64)> {
    items
        .iter()
        .map(|r| (r.started_at.timestamp_millis(), r.id))
        .collect()
}

async fn runs_page_newest_first_with_a_cursor(store: Store) {
    // 250 runs; groups of five share a start time so ids break the ties,
    // and they are inserted out of time order.
    let rows: Vec<_> = (0..250i64)
        .map(|i| run_row(1, "paged", T0 + ((i * 37) % 250) / 5 * 1000, "success"))
        .collect();
    insert_runs(&store, rows).await;
    let all = all_pages(&store, &RunFilter::default(), 20).await;
    assert_eq!(all.len(), 250);
    let mut expected = keys(&all);
    expected.sort_unstable_by(|a, b| b.cmp(a));
    expected.dedup();
    assert_eq!(keys(&all), expected, "newest first, every row once");
    // Other page sizes see the same sequence.
    for limit in [1, 7, 100, 249, 250, 1000] {
        let again = all_pages(&store, &RunFilter::default(), limit).await;
        assert_eq!(keys(&again), expected, "limit {limit}");
    }
    // The last page says so; an empty result has no cursor.
    let (items, next) = store
        .runs()
        .list(&RunFilter::default(), 250, None)
        .await
        .unwrap();
    assert_eq!(items.len(), 250);
    assert_eq!(next, None);
    let past_end = RunCursor {
        started_at_ms: T0 - 1,
        id: i64::MAX,
    };
    let (items, next) = store
        .runs()
        .list(&RunFilter::default(), 20, Some(past_end))
        .await
        .unwrap();
    assert!(items.is_empty());
    assert_eq!(next, None);
    // Records carry every column.
    let first = &all[0];
    let got = store.runs().get(first.id).await.unwrap().unwrap();
    assert_eq!(&got, first);
    assert_eq!(got.output, "output of paged");
    assert_eq!(got.scheduled_at, at(got.started_at.timestamp_millis() - 3));
    assert_eq!(
        got.finished_at,
        Some(at(got.started_at.timestamp_millis() + 10))
    );
    assert_eq!(got.deleted_at, None);
    assert_eq!(store.runs().get(i64::MAX).await.unwrap(), None);
    // Recent runs of a job: the newest n.
    let recent = store.runs().recent_for_job(1, 10).await.unwrap();
    assert_eq!(keys(&recent), expected[..10].to_vec());
    assert!(store.runs().recent_for_job(2, 10).await.unwrap().is_empty());
}

/// The `jobName` filter finds the jobs it names and seeks their runs by
/// job id, or walks the log in time order (a name thousands of jobs
/// share); both give exactly the runs whose own copy of the name
/// matches, renamed and deleted jobs included.
async fn runs_job_name_filter_seeks_named_jobs(store: Store) {
    // 120 jobs with 3 runs each, interleaved in time; job 7 was renamed
    // (its older runs carry the old name); job 900 was deleted long ago
    // (no job row, its runs stay); one run of job 3 is hidden.
    let mut rows = Vec::new();
    let mut t = T0;
    for round in 0..3 {
        for job in 1..=120i64 {
            t += 1000;
            let name = if job == 7 && round < 2 {
                "Old Seven".to_owned()
            } else {
                format!("Job-{job:03}")
            };
            let status = if job % 10 == 0 { "failed" } else { "success" };
            let mut row = run_row(job, &name, t, status);
            if job == 3 && round == 1 {
                row.deleted_at = Set(Some(t + 1));
            }
            rows.push(row);
        }
    }
    for i in 0..4 {
        rows.push(run_row(900, "gone for good", T0 - 10_000 + i, "success"));
    }
    // More jobs than a filter hands over as ids (5 000): `bulk` walks
    // the log by time, `bulk-1` names 1 111 of them.
    for job in 0..5_001i64 {
        rows.push(run_row(
            10_000 + job,
            &format!("bulk-{job}"),
            T0 - 20_000_000 + job,
            "success",
        ));
    }
    // Names with CJK, cased non-ASCII letters and LIKE's wildcards
    // (MySQL looks up the ASCII and caseless pieces only).
    for (i, name) in ["每日报表任务", "Été-Report", "Load 50%_x"]
        .iter()
        .enumerate()
    {
        rows.push(run_row(
            800 + i as i64,
            name,
            T0 - 5_000 + i as i64,
            "success",
        ));
    }
    // Two rows share a start time, so ids break the tie across jobs.
    rows.push(run_row(11, "Job-011", T0 + 500_000, "success"));
    rows.push(run_row(12, "Job-012", T0 + 500_000, "success"));
    insert_runs(&store, rows).await;

    // The same rows straight from the table, filtered here.
    let everything = run::Entity::find().all(store.connection()).await.unwrap();
    let expected = |f: &RunFilter| -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = everything
            .iter()
            .filter(|r| r.deleted_at.is_none())
            .filter(|r| f.job_id.is_none_or(|j| r.job_id == j))
            .filter(|r| f.status.as_ref().is_none_or(|s| &r.status == s))
            .filter(|r| {
                f.job_name
                    .as_ref()
                    .is_none_or(|n| r.job_name.to_lowercase().contains(&n.to_lowercase()))
            })
            .filter(|r| {
                f.started_from
                    .is_none_or(|t| r.started_at >= t.timestamp_millis())
            })
            .map(|r| (r.started_at, r.id))
            .collect();
        out.sort_unstable_by(|a, b| b.cmp(a));
        out
    };
    let by_name = |name: &str| RunFilter {
        job_name: Some(name.into()),
        ..RunFilter::default()
    };
    let filters = [
        // One job, a few, many, more than are handed over as ids.
        by_name("job-042"),
        by_name("JOB-01"),
        by_name("job-0"),
        by_name("job"),
        by_name("bulk-1"),
        by_name("bulk"),
        by_name("-"),
        // Old names of renamed jobs, and deleted jobs, still match.
        by_name("old seven"),
        by_name("seven"),
        by_name("GONE"),
        by_name("e"),
        by_name("no such job"),
        by_name("报表任"),
        // SQLite lowers ASCII letters only.
        by_name("Été-REP"),
        by_name("té-Re"),
        by_name("50%_"),
        by_name("%_x"),
        RunFilter {
            job_id: Some(7),
            ..by_name("job-007")
        },
        RunFilter {
            job_id: Some(8),
            ..by_name("job-007")
        },
        RunFilter {
            status: Some("failed".into()),
            ..by_name("job-1")
        },
        RunFilter {
            status: Some("failed".into()),
            ..by_name("job-")
        },
        RunFilter {
            started_from: Some(at(T0 + 200_000)),
            ..by_name("job-00")
        },
    ];
    for f in &filters {
        let want = expected(f);
        // Paging one by one through thousands of rows takes long.
        let limits: &[u64] = if want.len() > 1000 {
            &[100]
        } else {
            &[1, 7, 100]
        };
        for &limit in limits {
            let got = all_pages(&store, f, limit).await;
            assert_eq!(keys(&got), want, "{f:?}, limit {limit}");
        }
    }
    assert_eq!(expected(&by_name("old seven")).len(), 2);
    assert_eq!(expected(&by_name("gone")).len(), 4);
    // Jobs 1–99, less job 7's two old runs and job 3's hidden one,
    // plus the two tied runs.
    assert_eq!(expected(&by_name("job-0")).len(), 99 * 3 - 2 - 1 + 2);
    assert_eq!(expected(&by_name("bulk-1")).len(), 1_111);

    // Runs inserted later, under a new name, are found at once.
    insert_runs(
        &store,
        vec![run_row(7, "Seven Reborn", T0 + 900_000, "success")],
    )
    .await;
    let got = all_pages(&store, &by_name("reborn"), 20).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].job_name, "Seven Reborn");
    assert_eq!(all_pages(&store, &by_name("seven"), 20).await.len(), 3);
}

async fn runs_filters(store: Store) {
    let mut rows = vec![
        run_row(1, "Nightly Report", T0, "success"),
        run_row(1, "Nightly Report", T0 + 1000, "failed"),
        run_row(2, "100% done_ok", T0 + 2000, "success"),
        run_row(3, "1000 doneXok", T0 + 3000, "timeout"),
        run_row(4, "清理过期日志", T0 + 4000, "skipped"),
    ];
    let mut other = run_row(5, "other handler", T0 + 5000, "running");
    other.handler = Set("demo.echo.v2".into());
    other.finished_at = Set(None);
    other.duration_ms = Set(None);
    rows.push(other);
    let mut hidden = run_row(1, "Nightly Report", T0 + 6000, "success");
    hidden.deleted_at = Set(Some(T0 + 7000));
    rows.push(hidden);
    insert_runs(&store, rows).await;

    let names =
        |items: Vec<RunRecord>| -> Vec<String> { items.into_iter().map(|r| r.job_name).collect() };
    let list = |filter: RunFilter| {
        let store = store.clone();
        async move { store.runs().list(&filter, 100, None).await.unwrap().0 }
    };
    assert_eq!(
        list(RunFilter::default()).await.len(),
        6,
        "deleted rows are invisible"
    );
    let by_job = list(RunFilter {
        job_id: Some(1),
        ..RunFilter::default()
    })
    .await;
    assert_eq!(by_job.len(), 2);
    assert_eq!(by_job[0].status.as_str(), "failed");
    // Job name: case-insensitive substring; `%` and `_` are literal.
    assert_eq!(
        names(
            list(RunFilter {
                job_name: Some("nIGHTLY".into()),
                ..RunFilter::default()
            })
            .await
        ),
        ["Nightly Report", "Nightly Report"]
    );
    assert_eq!(
        names(
            list(RunFilter {
                job_name: Some("0% done_".into()),
                ..RunFilter::default()
            })
            .await
        ),
        ["100% done_ok"]
    );
    assert_eq!(
        names(
            list(RunFilter {
                job_name: Some("过期".into()),
                ..RunFilter::default()
            })
            .await
        ),
        ["清理过期日志"]
    );
    // Handler: exact, so `demo.echo` does not match `demo.echo.v2`.
    assert_eq!(
        list(RunFilter {
            handler: Some("demo.echo".into()),
            ..RunFilter::default()
        })
        .await
        .len(),
        5
    );
    assert_eq!(
        names(
            list(RunFilter {
                handler: Some("demo.echo.v2".into()),
                ..RunFilter::default()
            })
            .await
        ),
        ["other handler"]
    );
    assert!(
        list(RunFilter {
            handler: Some("demo".into()),
            ..RunFilter::default()
        })
        .await
        .is_empty()
    );
    assert_eq!(
        names(
            list(RunFilter {
                status: Some("timeout".into()),
                ..RunFilter::default()
            })
            .await
        ),
        ["1000 doneXok"]
    );
    // Start range: both ends inclusive.
    let ranged = list(RunFilter {
        started_from: Some(at(T0 + 1000)),
        started_to: Some(at(T0 + 3000)),
        ..RunFilter::default()
    })
    .await;
    assert_eq!(
        names(ranged),
        ["1000 doneXok", "100% done_ok", "Nightly Report"]
    );
    let combined = list(RunFilter {
        job_id: Some(1),
        status: Some("success".into()),
        started_to: Some(at(T0)),
        ..RunFilter::default()
    })
    .await;
    assert_eq!(combined.len(), 1);
    assert_eq!(combined[0].started_at, at(T0));
    // Paging honours the filter.
    let filter = RunFilter {
        handler: Some("demo.echo".into()),
        ..RunFilter::default()
    };
    let paged = all_pages(&store, &filter, 2).await;
    assert_eq!(paged.len(), 5);
}

async fn runs_soft_delete_hides_everywhere(store: Store) {
    let rows: Vec<_> = (0..10i64)
        .map(|i| run_row(1 + i % 2, "del", T0 + i * 1000, "success"))
        .collect();
    insert_runs(&store, rows).await;
    let all = all_pages(&store, &RunFilter::default(), 100).await;
    let ids: Vec<i64> = all.iter().map(|r| r.id).collect();
    let deleted_at = now();

    // One.
    assert!(store.runs().soft_delete(ids[0], deleted_at).await.unwrap());
    assert!(!store.runs().soft_delete(ids[0], deleted_at).await.unwrap());
    assert!(
        !store
            .runs()
            .soft_delete(i64::MAX, deleted_at)
            .await
            .unwrap()
    );
    assert_eq!(store.runs().get(ids[0]).await.unwrap(), None);
    let row = run::Entity::find_by_id(ids[0])
        .one(store.connection())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        row.deleted_at,
        Some(truncate_to_millis(deleted_at).timestamp_millis()),
        "kept for audit.purge"
    );

    // Many: duplicates, unknown and already hidden ids count nothing.
    let many = vec![ids[1], ids[2], ids[2], ids[0], -5, i64::MAX];
    assert_eq!(
        store
            .runs()
            .soft_delete_many(&many, deleted_at)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .runs()
            .soft_delete_many(&[], deleted_at)
            .await
            .unwrap(),
        0
    );
    let left = all_pages(&store, &RunFilter::default(), 3).await;
    assert_eq!(
        left.iter().map(|r| r.id).collect::<Vec<_>>(),
        ids[3..].to_vec()
    );
    let recent = store
        .runs()
        .recent_for_job(ids_job(&all, ids[1]), 10)
        .await
        .unwrap();
    assert!(recent.iter().all(|r| r.id != ids[1]));
    // More ids than one IN list holds.
    let big: Vec<i64> = (1..=1200).map(|i| -i).chain([ids[3]]).collect();
    assert_eq!(
        store
            .runs()
            .soft_delete_many(&big, deleted_at)
            .await
            .unwrap(),
        1
    );

    // Clear: every visible row, once.
    assert_eq!(store.runs().clear(deleted_at).await.unwrap(), 6);
    assert_eq!(store.runs().clear(deleted_at).await.unwrap(), 0);
    let (items, next) = store
        .runs()
        .list(&RunFilter::default(), 20, None)
        .await
        .unwrap();
    assert!(items.is_empty());
    assert_eq!(next, None);
    assert!(store.runs().recent_for_job(1, 10).await.unwrap().is_empty());
    assert!(
        store
            .runs()
            .export(&RunFilter::default(), 100)
            .await
            .unwrap()
            .is_empty()
    );
    // The rows are still there for audit.purge.
    assert_eq!(
        run::Entity::find()
            .all(store.connection())
            .await
            .unwrap()
            .len(),
        10
    );
}

fn ids_job(all: &[RunRecord], id: i64) -> i64 {
    all.iter().find(|r| r.id == id).map(|r| r.job_id).unwrap()
}

async fn runs_export_rows(store: Store) {
    let mut rows: Vec<_> = (0..30i64)
        .map(|i| run_row(1 + i % 3, "export", T0 + i * 1000, "success"))
        .collect();
    let mut failed = run_row(9, "失败的任务", T0 + 100_000, "failed");
    // Longer than an export keeps, in multi-byte characters.
    failed.error = Set("错".repeat(4000));
    failed.output = Set("o".repeat(16_000));
    rows.push(failed);
    insert_runs(&store, rows).await;

    let exported = store
        .runs()
        .export(&RunFilter::default(), 100)
        .await
        .unwrap();
    assert_eq!(exported.len(), 31);
    let listed = all_pages(&store, &RunFilter::default(), 100).await;
    assert_eq!(
        exported.iter().map(|r| r.id).collect::<Vec<_>>(),
        listed.iter().map(|r| r.id).collect::<Vec<_>>(),
        "same order as the list"
    );
    let top = &exported[0];
    assert_eq!(top.job_name, "失败的任务");
    assert_eq!(top.status, "failed");
    assert_eq!(top.error.chars().count(), EXPORT_ERROR_CHARS as usize);
    assert!(top.error.chars().all(|c| c == '错'));
    assert_eq!(top.started_at, at(T0 + 100_000));
    assert_eq!(top.finished_at, Some(at(T0 + 100_010)));
    assert_eq!(top.duration_ms, Some(10));
    // The cap and the filter.
    assert_eq!(
        store
            .runs()
            .export(&RunFilter::default(), 5)
            .await
            .unwrap()
            .len(),
        5
    );
    assert!(
        store
            .runs()
            .export(&RunFilter::default(), 0)
            .await
            .unwrap()
            .is_empty()
    );
    let job2 = store
        .runs()
        .export(
            &RunFilter {
                job_id: Some(2),
                ..RunFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(job2.len(), 10);
    assert!(job2.iter().all(|r| r.job_id == 2));
    assert_eq!(job2[0].error, "");
}

async fn audit_record_filter_and_page(store: Store) {
    let audit = store.audit();
    let before = json!({"id": 7, "name": "旧名", "enabled": true});
    let after = json!({"id": 7, "name": "新名", "enabled": true});
    let first = audit
        .record(
            &NewAudit {
                actor: "alice".into(),
                action: "job.modify".into(),
                target_type: "job".into(),
                target_id: Some("7".into()),
                summary: "修改任务「新名」".into(),
                before: Some(before.clone()),
                after: Some(after.clone()),
            },
            now(),
        )
        .await
        .unwrap();
    assert_eq!(first.at, truncate_to_millis(now()));
    assert_eq!(first.before, Some(before.clone()));
    assert_eq!(first.after, Some(after.clone()));

    // 30 more, some at the same instant so ids break the ties.
    for i in 0..30i64 {
        let entry = NewAudit {
            actor: if i % 2 == 0 { "bob" } else { "carol" }.into(),
            action: if i % 3 == 0 {
                "run.clear"
            } else {
                "job.delete"
            }
            .into(),
            target_type: if i % 3 == 0 { "run" } else { "job" }.into(),
            target_id: (i % 3 != 0).then(|| i.to_string()),
            summary: format!("entry {i}"),
            before: (i % 3 != 0).then(|| json!({"id": i})),
            after: None,
        };
        audit.record(&entry, at(T0 + (i / 3) * 1000)).await.unwrap();
    }

    // Paging: every entry once, newest first by (at, id).
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let (items, next) = audit
            .list(&AuditFilter::default(), 4, cursor)
            .await
            .unwrap();
        seen.extend(items.iter().map(|a| (a.at, a.id)));
        match next {
            Some(c) => cursor = Some(AuditCursor::decode(&c.encode()).unwrap()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 31);
    let mut sorted = seen.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    sorted.dedup();
    assert_eq!(seen, sorted);
    assert_eq!(seen[30].1, first.id, "the oldest entry comes last");

    let list = |filter: AuditFilter| {
        let store = store.clone();
        async move { store.audit().list(&filter, 100, None).await.unwrap().0 }
    };
    let mine = list(AuditFilter {
        actor: Some("alice".into()),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(mine, vec![first.clone()]);
    assert_eq!(
        list(AuditFilter {
            action: Some("run.clear".into()),
            ..AuditFilter::default()
        })
        .await
        .len(),
        10
    );
    let bob_deletes = list(AuditFilter {
        actor: Some("bob".into()),
        action: Some("job.delete".into()),
        target_type: Some("job".into()),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(bob_deletes.len(), 10);
    let one = list(AuditFilter {
        target_type: Some("job".into()),
        target_id: Some("4".into()),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].before, Some(json!({"id": 4})));
    assert_eq!(one[0].after, None);
    // Time range, both ends inclusive: entries 3..=8 are at T0+1s and T0+2s.
    let ranged = list(AuditFilter {
        from: Some(at(T0 + 1000)),
        to: Some(at(T0 + 2000)),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(ranged.len(), 6);
    assert!(
        list(AuditFilter {
            actor: Some("ALICE".into()),
            ..AuditFilter::default()
        })
        .await
        .is_empty(),
        "exact match"
    );

    // A batch lands in one go, each entry as `record` would write it.
    let batch: Vec<NewAudit> = (0..250)
        .map(|i| NewAudit {
            actor: "dave".into(),
            action: "job.delete".into(),
            target_type: "job".into(),
            target_id: Some(format!("b{i}")),
            summary: format!("删除任务「b{i}」"),
            before: Some(json!({"id": i, "name": format!("b{i}")})),
            after: None,
        })
        .collect();
    audit.record_many(&batch, now()).await.unwrap();
    audit.record_many(&[], now()).await.unwrap();
    let daves = list(AuditFilter {
        actor: Some("dave".into()),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(daves.len(), 100, "a page holds at most the limit");
    assert!(daves.iter().all(|a| a.at == truncate_to_millis(now())));
    let b7 = list(AuditFilter {
        target_id: Some("b7".into()),
        ..AuditFilter::default()
    })
    .await;
    assert_eq!(b7.len(), 1);
    assert_eq!(b7[0].before, Some(json!({"id": 7, "name": "b7"})));
    assert_eq!(b7[0].summary, "删除任务「b7」");

    // Column limits never lose an entry.
    let huge = audit
        .record(
            &NewAudit {
                actor: "a".repeat(300),
                action: "job.export".into(),
                target_type: "job".into(),
                target_id: None,
                summary: "导出".repeat(5000),
                before: None,
                after: Some(json!({"blob": "x".repeat(70_000)})),
            },
            now(),
        )
        .await
        .unwrap();
    assert_eq!(huge.actor, "a".repeat(128));
    assert_eq!(huge.summary.chars().count(), 2000);
    let note = huge.after.unwrap();
    assert!(note["omitted"].is_string(), "{note}");
}
