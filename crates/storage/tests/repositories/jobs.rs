//! The job and group repositories on all three databases: create, read,
//! list with filters and pages, optimistic versions and their races,
//! enable, delete, time rules and `maxRuns`.

use super::*;

scenarios!(
    job_create_get_round_trip,
    job_name_taken,
    job_list_filters_and_paging,
    job_list_name_filter_follows_renames_and_deletes,
    job_update_bumps_version,
    job_update_stale_version,
    job_update_to_taken_name,
    job_update_missing,
    job_concurrent_updates_one_wins,
    job_concurrent_creates_one_wins,
    job_set_enabled,
    job_concurrent_set_enabled,
    job_delete_and_delete_many,
    job_corrupt_params,
    groups_create_duplicate_delete_list,
    job_time_rules_round_trip,
    max_runs_disables_the_job_once,
);

async fn job_create_get_round_trip(store: Store) {
    let jobs = store.jobs();
    let mut input = new_job("清理过期日志 — Ünïcødé ✓");
    input.group = "system".into();
    input.handler = "audit.purge".into();
    input.params = json!({
        "message": "héllo \"quoted\" \\ back",
        "delayMs": 600_000,
        "nested": {"list": [1, 2.5, null, true, "任务"], "empty": {}},
    });
    input.cron = "0 30 3 * * *".into();
    input.enabled = false;
    input.retry_count = 3;
    input.retry_interval_ms = 2500;
    input.timeout_ms = 600_000;
    input.allow_concurrent = true;
    input.misfire_policy = "run_once".into();
    input.remark = "line 1\nline 2 'single' \"double\" 备注".into();
    input.builtin_key = Some("audit.purge:清理过期日志".into());

    let created = jobs.create(&input, "alice", now()).await.unwrap();
    assert!(created.id > 0);
    assert_matches_input(&created, &input);
    assert_eq!(created.timezone, None);
    assert_eq!(created.version, 1);
    assert_eq!(created.builtin_key, input.builtin_key);
    assert_eq!(created.created_at, truncate_to_millis(now()));
    assert_eq!(created.updated_at, truncate_to_millis(now()));
    assert_eq!(created.created_by, "alice");
    assert_eq!(created.updated_by, "alice");

    let fetched = jobs.get(created.id).await.unwrap().unwrap();
    assert_eq!(fetched, created);
    assert_eq!(
        jobs.find_by_builtin_key("audit.purge:清理过期日志")
            .await
            .unwrap(),
        Some(created.clone())
    );
    assert_eq!(jobs.find_by_builtin_key("audit.purge").await.unwrap(), None);
    assert_eq!(jobs.get(created.id + 1000).await.unwrap(), None);

    // Maximum lengths: 64 CJK characters fit VARCHAR(64) everywhere; a zone;
    // a far-future instant; large params.
    let mut long = new_job(&"任".repeat(64));
    long.timezone = Some("America/Argentina/ComodRivadavia".into());
    long.params = json!({"message": "x".repeat(3900)});
    long.remark = "备".repeat(500);
    let later = at(4_102_444_800_999);
    let created = jobs.create(&long, "bob", later).await.unwrap();
    assert_matches_input(&created, &long);
    assert_eq!(created.created_at, later);
    assert_eq!(created.builtin_key, None);
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), created);

    assert_eq!(jobs.count_in_group("system").await.unwrap(), 1);
    assert_eq!(jobs.count_in_group("default").await.unwrap(), 1);
    assert_eq!(jobs.count_in_group("none").await.unwrap(), 0);
}

async fn job_name_taken(store: Store) {
    let jobs = store.jobs();
    jobs.create(&new_job("Abc"), "u", now()).await.unwrap();
    // Case and accents make different names on every backend.
    jobs.create(&new_job("abc"), "u", now()).await.unwrap();
    jobs.create(&new_job("ABC"), "u", now()).await.unwrap();
    jobs.create(&new_job("Ábc"), "u", now()).await.unwrap();
    let err = jobs.create(&new_job("Abc"), "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    let err = jobs.create(&new_job("abc"), "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");

    // A second job with the same built-in key is a different conflict.
    let mut a = new_job("builtin one");
    a.builtin_key = Some("demo.echo:示例".into());
    jobs.create(&a, "u", now()).await.unwrap();
    let mut b = new_job("builtin two");
    b.builtin_key = a.builtin_key.clone();
    let err = jobs.create(&b, "u", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");

    let (_, total) = jobs.list(&JobFilter::default(), 1, 100).await.unwrap();
    assert_eq!(total, 5);
}

async fn job_list_filters_and_paging(store: Store) {
    let jobs = store.jobs();
    let specs: [(&str, &str, &str, bool); 9] = [
        ("Alpha_1", "default", "demo.echo", true),
        ("alpha%2", "system", "audit.purge", false),
        ("Beta", "default", "demo.echo", false),
        ("ALPHAX", "system", "demo.echo", true),
        ("100% done", "default", "notify.dispatch", true),
        ("under_score", "default", "demo.echo", true),
        ("Ba-1", "system", "demo.echo", true),
        ("Bang!", "default", "audit.purge", true),
        ("任务一", "default", "demo.echo", true),
    ];
    let mut ids = Vec::new();
    for (name, group, handler, enabled) in specs {
        let mut j = new_job(name);
        j.group = group.into();
        j.handler = handler.into();
        j.enabled = enabled;
        ids.push(jobs.create(&j, "u", now()).await.unwrap().id);
    }

    let list = |filter: JobFilter| {
        let jobs = store.jobs();
        async move { jobs.list(&filter, 1, 100).await.unwrap() }
    };
    let by_name = |n: &str| JobFilter {
        name: Some(n.into()),
        ..JobFilter::default()
    };

    // No filter: everything, by id.
    let (all, total) = list(JobFilter::default()).await;
    assert_eq!(total, 9);
    assert_eq!(all.iter().map(|j| j.id).collect::<Vec<_>>(), ids);

    // Name: case-insensitive substring.
    let (items, total) = list(by_name("alpha")).await;
    assert_eq!(names(&items), ["Alpha_1", "alpha%2", "ALPHAX"]);
    assert_eq!(total, 3);
    let (items, _) = list(by_name("ALPHA_")).await;
    assert_eq!(names(&items), ["Alpha_1"]);
    // `%` and `_` are literal, not wildcards.
    let (items, _) = list(by_name("%")).await;
    assert_eq!(names(&items), ["alpha%2", "100% done"]);
    let (items, _) = list(by_name("_")).await;
    assert_eq!(names(&items), ["Alpha_1", "under_score"]);
    let (items, _) = list(by_name("a_1")).await;
    assert_eq!(names(&items), ["Alpha_1"]);
    let (items, _) = list(by_name("!")).await;
    assert_eq!(names(&items), ["Bang!"]);
    let (items, _) = list(by_name("任务")).await;
    assert_eq!(names(&items), ["任务一"]);
    let (items, total) = list(by_name("zzz")).await;
    assert!(items.is_empty());
    assert_eq!(total, 0);

    // Group, handler, enabled: exact (and case-sensitive on every backend).
    let (items, _) = list(JobFilter {
        group: Some("system".into()),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "ALPHAX", "Ba-1"]);
    let (items, total) = list(JobFilter {
        group: Some("SYSTEM".into()),
        ..JobFilter::default()
    })
    .await;
    assert!(items.is_empty());
    assert_eq!(total, 0);
    let (items, _) = list(JobFilter {
        handler: Some("audit.purge".into()),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "Bang!"]);
    let (items, _) = list(JobFilter {
        handler: Some("audit".into()),
        ..JobFilter::default()
    })
    .await;
    assert!(items.is_empty());
    let (items, _) = list(JobFilter {
        enabled: Some(false),
        ..JobFilter::default()
    })
    .await;
    assert_eq!(names(&items), ["alpha%2", "Beta"]);

    // Combined.
    let (items, total) = list(JobFilter {
        name: Some("A".into()),
        group: Some("default".into()),
        handler: Some("demo.echo".into()),
        enabled: Some(true),
    })
    .await;
    assert_eq!(names(&items), ["Alpha_1"]);
    assert_eq!(total, 1);

    // Paging: 1-based, total independent of the page.
    let all_names = names(&all);
    let mut seen = Vec::new();
    for page in 1..=5 {
        let (items, total) = jobs.list(&JobFilter::default(), page, 2).await.unwrap();
        assert_eq!(total, 9);
        assert_eq!(items.len(), if page < 5 { 2 } else { 1 }, "page {page}");
        seen.extend(items.into_iter().map(|j| j.name));
    }
    assert_eq!(seen, all_names);
    let (items, total) = jobs.list(&JobFilter::default(), 6, 2).await.unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 9);
    // Page 0 reads as page 1; a page far away is just empty.
    let (items, _) = jobs.list(&JobFilter::default(), 0, 2).await.unwrap();
    assert_eq!(names(&items), ["Alpha_1", "alpha%2"]);
    let (items, total) = jobs
        .list(&JobFilter::default(), u64::MAX, 50)
        .await
        .unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 9);
    let (items, total) = jobs.list(&by_name("a"), 2, 3).await.unwrap();
    assert_eq!(total, 6);
    assert_eq!(names(&items), ["ALPHAX", "Ba-1", "Bang!"]);
    // A name filter's ids are read once and paged here: by id, the total
    // whatever the page, an empty page past the end, page 0 as page 1.
    let mut seen = Vec::new();
    for page in 1..=3 {
        let (items, total) = jobs.list(&by_name("a"), page, 2).await.unwrap();
        assert_eq!(total, 6);
        seen.extend(items.into_iter().map(|j| j.id));
    }
    let expected: Vec<i64> = list(by_name("a")).await.0.iter().map(|j| j.id).collect();
    assert!(expected.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(seen, expected);
    let (items, total) = jobs.list(&by_name("a"), 4, 2).await.unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 6);
    let (items, _) = jobs.list(&by_name("a"), 0, 2).await.unwrap();
    assert_eq!(
        items.iter().map(|j| j.id).collect::<Vec<_>>(),
        expected[..2]
    );
    let (items, total) = jobs.list(&by_name("a"), u64::MAX, 50).await.unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 6);
    let (items, total) = jobs.list(&by_name("a"), 1, 0).await.unwrap();
    assert!(items.is_empty());
    assert_eq!(total, 6);

    // Quotes, backslashes and placeholders in a name are text (PostgreSQL
    // gets the pattern as a quoted literal).
    let odd = jobs
        .create(&new_job(r"it's a \ $1 ? job"), "u", now())
        .await
        .unwrap();
    for needle in ["'", r"\", r"'s a \ $1 ?", "$1", "?"] {
        let (items, total) = list(by_name(needle)).await;
        assert_eq!(total, 1, "{needle}");
        assert_eq!(
            items.iter().map(|j| j.id).collect::<Vec<_>>(),
            [odd.id],
            "{needle}"
        );
    }
    let (items, _) = list(by_name(r"\'")).await;
    assert!(items.is_empty());
}

/// The name filter after creates, renames and deletes (on MySQL it looks
/// up trigrams kept by triggers on `jobs`): the same jobs as a lowered
/// substring match computed here, for needles of every shape.
async fn job_list_name_filter_follows_renames_and_deletes(store: Store) {
    let jobs = store.jobs();
    let mut live: Vec<(i64, String)> = Vec::new();
    for name in [
        "Nightly-Report",
        "nightly-backup",
        "每日报表任务",
        "周报表",
        "Été-Report-2",
        "Load 50%_x",
        "aab",
        "to-rename",
        "to-delete-report",
    ] {
        let job = jobs.create(&new_job(name), "u", now()).await.unwrap();
        live.push((job.id, name.to_owned()));
    }
    // A rename drops the old name's pieces and adds the new one's.
    let (id, _) = live[7].clone();
    let renamed = new_job("Renamed-Weekly");
    jobs.update(id, 1, &renamed, "u", now()).await.unwrap();
    live[7].1 = "Renamed-Weekly".into();
    let (id, _) = live.pop().unwrap();
    jobs.delete_many(&[id]).await.unwrap();

    // SQLite lowers ASCII letters only: the needles keep the case of the
    // names' other letters.
    for needle in [
        "report",
        "REPORT",
        "ly-",
        "nightly-r",
        "每日报",
        "报表",
        "报表任务",
        "Été",
        "Été-REP",
        "té-Re",
        "50%_",
        "%_x",
        "aab",
        "aa",
        "a",
        "to-rename",
        "rename",
        "weekly",
        "delete",
        "to-delete",
        "zzz",
        "-",
    ] {
        let mut want: Vec<i64> = live
            .iter()
            .filter(|(_, n)| n.to_lowercase().contains(&needle.to_lowercase()))
            .map(|(id, _)| *id)
            .collect();
        want.sort_unstable();
        let filter = JobFilter {
            name: Some(needle.into()),
            ..JobFilter::default()
        };
        let (items, total) = jobs.list(&filter, 1, 100).await.unwrap();
        assert_eq!(
            items.iter().map(|j| j.id).collect::<Vec<_>>(),
            want,
            "{needle}"
        );
        assert_eq!(total, want.len() as u64, "{needle}");
    }
}

async fn job_update_bumps_version(store: Store) {
    let jobs = store.jobs();
    let mut input = new_job("before");
    input.builtin_key = Some("demo.echo:before".into());
    let created = jobs.create(&input, "alice", now()).await.unwrap();

    let mut changed = new_job("after");
    changed.group = "system".into();
    changed.handler = "audit.purge".into();
    changed.params = json!({"days": 30});
    changed.cron = "*/5 * * * *".into();
    changed.timezone = Some("Asia/Shanghai".into());
    changed.enabled = false;
    changed.retry_count = 2;
    changed.retry_interval_ms = 10;
    changed.timeout_ms = 0;
    changed.allow_concurrent = true;
    changed.misfire_policy = "run_once".into();
    changed.remark = "edited".into();
    // Ignored by update.
    changed.builtin_key = Some("something else".into());
    let later = at(1_800_000_000_000);

    let updated = jobs
        .update(created.id, 1, &changed, "bob", later)
        .await
        .unwrap();
    assert_matches_input(&updated, &changed);
    assert_eq!(updated.id, created.id);
    assert_eq!(updated.version, 2);
    assert_eq!(updated.builtin_key, created.builtin_key);
    assert_eq!(updated.created_at, created.created_at);
    assert_eq!(updated.created_by, "alice");
    assert_eq!(updated.updated_at, later);
    assert_eq!(updated.updated_by, "bob");
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), updated);

    // Saving the same values still counts as a change.
    let again = jobs
        .update(created.id, 2, &changed, "bob", later)
        .await
        .unwrap();
    assert_eq!(again.version, 3);
    // Keeping its own name is no clash.
    let renamed_back = jobs
        .update(created.id, 3, &input, "carol", later)
        .await
        .unwrap();
    assert_eq!(renamed_back.name, "before");
    assert_eq!(renamed_back.version, 4);
}

async fn job_update_stale_version(store: Store) {
    let jobs = store.jobs();
    let created = jobs.create(&new_job("j"), "u", now()).await.unwrap();
    jobs.update(created.id, 1, &new_job("j2"), "u", now())
        .await
        .unwrap();

    let err = jobs
        .update(created.id, 1, &new_job("j3"), "u", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let err = jobs
        .update(created.id, 7, &new_job("j3"), "u", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let current = jobs.get(created.id).await.unwrap().unwrap();
    assert_eq!(current.name, "j2");
    assert_eq!(current.version, 2);
}

async fn job_update_to_taken_name(store: Store) {
    let jobs = store.jobs();
    jobs.create(&new_job("taken"), "u", now()).await.unwrap();
    let other = jobs.create(&new_job("other"), "u", now()).await.unwrap();

    let err = jobs
        .update(other.id, 1, &new_job("taken"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NameTaken), "{err:?}");
    // Nothing changed, and the job is still usable afterwards.
    assert_eq!(jobs.get(other.id).await.unwrap().unwrap(), other);
    let updated = jobs
        .update(other.id, 1, &new_job("TAKEN"), "u", now())
        .await
        .unwrap();
    assert_eq!(updated.name, "TAKEN");
    assert_eq!(updated.version, 2);
}

async fn job_update_missing(store: Store) {
    let jobs = store.jobs();
    let err = jobs
        .update(424_242, 1, &new_job("ghost"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let created = jobs.create(&new_job("gone"), "u", now()).await.unwrap();
    jobs.delete(created.id).await.unwrap();
    let err = jobs
        .update(created.id, 1, &new_job("gone"), "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let err = jobs
        .set_enabled(created.id, false, None, "u", now())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
}

/// Two administrators saving the same version: exactly one wins.
async fn job_concurrent_updates_one_wins(store: Store) {
    let created = store
        .jobs()
        .create(&new_job("race"), "u", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut j = new_job("race");
            j.remark = format!("writer {i}");
            store.jobs().update(created.id, 1, &j, "u", now()).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => {
                assert_eq!(rec.version, 2);
                wins += 1;
            }
            Err(StorageError::StaleVersion { current: 2 }) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(
        store.jobs().get(created.id).await.unwrap().unwrap().version,
        2
    );
}

async fn job_concurrent_creates_one_wins(store: Store) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.jobs().create(&new_job("same"), "u", now()).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => wins += 1,
            Err(StorageError::NameTaken) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(wins, 1);
}

async fn job_set_enabled(store: Store) {
    let jobs = store.jobs();
    let created = jobs
        .create(&new_job("toggle"), "alice", now())
        .await
        .unwrap();
    assert!(created.enabled);
    let later = at(1_800_000_000_000);

    // Same value: nothing changes, not even the version.
    let same = jobs
        .set_enabled(created.id, true, None, "bob", later)
        .await
        .unwrap();
    assert_eq!(same, created);
    let same = jobs
        .set_enabled(created.id, true, Some(1), "bob", later)
        .await
        .unwrap();
    assert_eq!(same, created);

    // Change: version and updated_* move, the rest stays.
    let off = jobs
        .set_enabled(created.id, false, Some(1), "bob", later)
        .await
        .unwrap();
    assert!(!off.enabled);
    assert_eq!(off.version, 2);
    assert_eq!(off.updated_at, later);
    assert_eq!(off.updated_by, "bob");
    assert_eq!(off.created_at, created.created_at);
    assert_eq!(off.created_by, "alice");
    assert_eq!(off.name, created.name);
    assert_eq!(off.params, created.params);
    assert_eq!(jobs.get(created.id).await.unwrap().unwrap(), off);

    // Stale version, whether or not the value would change.
    let err = jobs
        .set_enabled(created.id, true, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );
    let err = jobs
        .set_enabled(created.id, false, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 2 }),
        "{err:?}"
    );

    let on = jobs
        .set_enabled(created.id, true, None, "carol", later)
        .await
        .unwrap();
    assert!(on.enabled);
    assert_eq!(on.version, 3);
    assert_eq!(on.updated_by, "carol");

    let err = jobs
        .set_enabled(999_999, true, Some(1), "carol", later)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
}

/// Concurrent toggles: one change, one version bump; stale callers are told.
async fn job_concurrent_set_enabled(store: Store) {
    let created = store
        .jobs()
        .create(&new_job("flip"), "u", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        // Half check the version, half do not.
        let expected = (i % 2 == 0).then_some(1);
        tasks.push(tokio::spawn(async move {
            store
                .jobs()
                .set_enabled(created.id, false, expected, "u", now())
                .await
        }));
    }
    let mut stale = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(rec) => {
                assert!(!rec.enabled);
                assert_eq!(rec.version, 2);
            }
            Err(StorageError::StaleVersion { current: 2 }) => stale += 1,
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert!(stale <= 4, "{stale}");
    let rec = store.jobs().get(created.id).await.unwrap().unwrap();
    assert!(!rec.enabled);
    assert_eq!(rec.version, 2);
}

async fn job_delete_and_delete_many(store: Store) {
    let jobs = store.jobs();
    let a = jobs.create(&new_job("a"), "u", now()).await.unwrap();
    let b = jobs.create(&new_job("b"), "u", now()).await.unwrap();
    let c = jobs.create(&new_job("c"), "u", now()).await.unwrap();
    let d = jobs.create(&new_job("d"), "u", now()).await.unwrap();

    assert_eq!(jobs.delete(a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(jobs.delete(a.id).await.unwrap(), None);
    assert_eq!(jobs.get(a.id).await.unwrap(), None);

    let deleted = jobs
        .delete_many(&[c.id, 987_654, b.id, c.id, a.id])
        .await
        .unwrap();
    assert_eq!(deleted, vec![b.clone(), c.clone()]);
    assert_eq!(jobs.delete_many(&[]).await.unwrap(), vec![]);
    assert_eq!(jobs.delete_many(&[b.id, c.id]).await.unwrap(), vec![]);

    let (left, total) = jobs.list(&JobFilter::default(), 1, 10).await.unwrap();
    assert_eq!(left, vec![d.clone()]);
    assert_eq!(total, 1);

    // The name is free again.
    let again = jobs.create(&new_job("a"), "u", now()).await.unwrap();
    assert!(again.id > d.id);

    // Many ids in one call (more than one IN chunk).
    let mut ids = Vec::new();
    for i in 0..120 {
        ids.push(
            jobs.create(&new_job(&format!("bulk {i}")), "u", now())
                .await
                .unwrap()
                .id,
        );
    }
    let mut wanted: Vec<i64> = ids.clone();
    wanted.extend(1_000_000..1_001_000);
    let deleted = jobs.delete_many(&wanted).await.unwrap();
    assert_eq!(deleted.iter().map(|j| j.id).collect::<Vec<_>>(), ids);
    let (_, total) = jobs.list(&JobFilter::default(), 1, 10).await.unwrap();
    assert_eq!(total, 2);
}

async fn job_corrupt_params(store: Store) {
    let jobs = store.jobs();
    let created = jobs.create(&new_job("broken"), "u", now()).await.unwrap();
    job::Entity::update_many()
        .col_expr(
            job::Column::Params,
            sea_orm::sea_query::Expr::val("{not json"),
        )
        .filter(job::Column::Id.eq(created.id))
        .exec(store.connection())
        .await
        .unwrap();
    let err = jobs.get(created.id).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    let err = jobs.list(&JobFilter::default(), 1, 10).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    // A failed batch deletes nothing.
    let err = jobs.delete_many(&[created.id]).await.unwrap_err();
    assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
    let (_, total) = jobs
        .list(
            &JobFilter {
                name: Some("zzz".into()),
                ..Default::default()
            },
            1,
            10,
        )
        .await
        .unwrap();
    assert_eq!(total, 0);
    assert_eq!(jobs.count_in_group("default").await.unwrap(), 1);
}

async fn groups_create_duplicate_delete_list(store: Store) {
    let groups = store.groups();
    let ops = groups
        .create("ops", "运维", "Operations", now())
        .await
        .unwrap();
    assert_eq!(
        ops,
        GroupRecord {
            code: "ops".into(),
            label_zh: "运维".into(),
            label_en: "Operations".into(),
            builtin: false,
        }
    );
    assert_eq!(groups.get("ops").await.unwrap(), Some(ops.clone()));
    assert_eq!(groups.get("nope").await.unwrap(), None);

    let err = groups.create("ops", "x", "y", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");
    let err = groups.create("default", "x", "y", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");
    // Codes are case-sensitive on every backend.
    groups.create("OPS", "运维2", "Ops 2", now()).await.unwrap();
    groups.create("zeta", "z", "Zeta", now()).await.unwrap();
    groups.create("aa", "a", "AA", now()).await.unwrap();

    let codes: Vec<String> = groups
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.code)
        .collect();
    assert_eq!(codes, ["default", "system", "OPS", "aa", "ops", "zeta"]);
    let builtin: Vec<bool> = groups
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.builtin)
        .collect();
    assert_eq!(builtin, [true, true, false, false, false, false]);

    assert!(groups.delete("ops").await.unwrap());
    assert!(!groups.delete("ops").await.unwrap());
    assert_eq!(groups.get("ops").await.unwrap(), None);
    assert!(groups.get("OPS").await.unwrap().is_some());
    // Re-creating after delete works.
    groups
        .create("ops", "运维", "Operations", now())
        .await
        .unwrap();
}

/// Time rules are stored, read back with the job and with its schedule,
/// and a change of those deciding the fire times starts a new schedule.
async fn job_time_rules_round_trip(store: Store) {
    use qiwu_domain::{CalendarRule, TimeRules};
    let rules = TimeRules {
        calendar: Some("cn-workdays".into()),
        calendar_rule: Some(CalendarRule::Workdays),
        misfire_grace_ms: 0,
        active_from: Some(at(1_767_225_600_000)),
        active_until: Some(at(1_798_761_599_999)),
        max_runs: None,
        jitter_ms: 0,
    };
    let job = NewJob {
        time_rules: rules.clone(),
        ..new_job("payroll")
    };
    let created = store.jobs().create(&job, "alice", now()).await.unwrap();
    assert_eq!(created.time_rules, rules);
    assert_eq!(created.scheduled_successes, 0);
    let read = store.jobs().get(created.id).await.unwrap().unwrap();
    assert_eq!(read.time_rules, rules);
    let schedule = store.jobs().schedule(created.id).await.unwrap().unwrap();
    assert_eq!(schedule.time_rules, rules);
    let listed = store.jobs().schedules(0, 10).await.unwrap();
    assert_eq!(listed[0].time_rules, rules);

    // An edit that leaves the time rules alone keeps the schedule.
    let later = now() + chrono::TimeDelta::seconds(1);
    let renamed = NewJob {
        remark: "same times".into(),
        ..job.clone()
    };
    let kept = store
        .jobs()
        .update(created.id, 1, &renamed, "bob", later)
        .await
        .unwrap();
    assert_eq!(kept.schedule_from, created.schedule_from);
    // Each rule deciding the fire times starts a new one.
    let changes = [
        TimeRules {
            calendar_rule: Some(CalendarRule::Holidays),
            ..rules.clone()
        },
        TimeRules {
            calendar: None,
            calendar_rule: None,
            ..rules.clone()
        },
        TimeRules {
            active_until: None,
            ..rules.clone()
        },
        TimeRules {
            active_from: None,
            ..rules.clone()
        },
    ];
    let mut current = kept;
    for (i, changed) in changes.into_iter().enumerate() {
        let at_edit = later + chrono::TimeDelta::seconds(i as i64 + 1);
        let edit = NewJob {
            time_rules: changed.clone(),
            ..renamed.clone()
        };
        let updated = store
            .jobs()
            .update(created.id, current.version, &edit, "bob", at_edit)
            .await
            .unwrap();
        assert_eq!(updated.time_rules, changed);
        assert_eq!(
            updated.schedule_from,
            truncate_to_millis(at_edit),
            "change {i}"
        );
        current = updated;
    }
}

/// `maxRuns`: each success counts; the one reaching the limit disables the
/// job as the system, with one audit entry; a new limit counts from zero.
async fn max_runs_disables_the_job_once(store: Store) {
    use qiwu_domain::TimeRules;
    let job = NewJob {
        time_rules: TimeRules {
            max_runs: Some(2),
            ..TimeRules::default()
        },
        ..new_job("twice")
    };
    let created = store.jobs().create(&job, "alice", now()).await.unwrap();
    let later = now() + chrono::TimeDelta::seconds(10);
    let count = |at| {
        let store = store.clone();
        async move {
            store
                .jobs()
                .count_scheduled_success(created.id, "system", "limit reached", at)
                .await
                .unwrap()
        }
    };
    assert!(count(later).await.is_none());
    let disabled = count(later).await.expect("disabled at the second");
    assert!(!disabled.enabled);
    assert_eq!(disabled.scheduled_successes, 2);
    assert_eq!(disabled.version, 2);
    assert_eq!(disabled.updated_by, "system");
    assert_eq!(disabled.schedule_from, truncate_to_millis(later));
    // A fire that was already running when the limit was reached still
    // counts, and disables nothing more.
    assert!(count(later).await.is_none());
    let entries: Vec<audit_log::Model> = audit_log::Entity::find()
        .filter(audit_log::Column::Action.eq("job.disable"))
        .all(store.connection())
        .await
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].actor, "system");
    assert_eq!(
        entries[0].target_id.as_deref(),
        Some(created.id.to_string().as_str())
    );
    assert_eq!(entries[0].summary, "limit reached");

    // Raised to 5 and enabled again: the count starts over.
    let raised = NewJob {
        time_rules: TimeRules {
            max_runs: Some(5),
            ..TimeRules::default()
        },
        ..job.clone()
    };
    let again = store
        .jobs()
        .update(created.id, 2, &raised, "alice", later)
        .await
        .unwrap();
    assert!(again.enabled);
    assert_eq!(again.scheduled_successes, 0);
    // Other edits keep it.
    assert!(count(later).await.is_none());
    let renamed = NewJob {
        remark: "same limit".into(),
        ..raised.clone()
    };
    let kept = store
        .jobs()
        .update(created.id, again.version, &renamed, "alice", later)
        .await
        .unwrap();
    assert_eq!(kept.scheduled_successes, 1);
    // A job that is gone counts nothing.
    store.jobs().delete(created.id).await.unwrap();
    assert!(count(later).await.is_none());
}
