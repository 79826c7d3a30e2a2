//! User calendars on all three databases: create, update, delete, racing
//! updates, and an edit restarting the schedules of the jobs naming it.

use super::*;

scenarios!(
    calendars_create_update_delete,
    calendars_concurrent_updates_one_wins,
    calendar_edit_restarts_its_jobs_schedules,
);

fn calendar_spec(
    code: &str,
    body: serde_json::Value,
) -> qiwu_domain::calendar::user::UserCalendarSpec {
    let serde_json::Value::Object(mut map) = body else {
        panic!("an object");
    };
    map.insert("code".into(), json!(code));
    qiwu_domain::calendar::user::validate(&map, None).expect("a valid calendar")
}

async fn calendars_create_update_delete(store: Store) {
    use qiwu_domain::calendar::{DayKind, Years};
    let calendars = store.calendars();
    let spec = calendar_spec(
        "acme",
        json!({"name": "ACME", "description": "office days", "dates": [
            {"date": "2026-12-26", "kind": "workday", "name": "盘点"},
            {"date": "2026-12-24", "kind": "holiday", "name": "Christmas Eve"},
        ]}),
    );
    let created = calendars.create(&spec, "admin", now()).await.unwrap();
    assert_eq!(created.code, "acme");
    assert_eq!(created.name, "ACME");
    assert_eq!(created.description, "office days");
    assert_eq!(
        (created.first_year, created.last_year),
        (Some(2026), Some(2026))
    );
    assert_eq!(created.version, 1);
    assert_eq!(created.created_by, "admin");
    assert_eq!(created.created_at, truncate_to_millis(now()));
    let dates: Vec<(String, DayKind, &str)> = created
        .dates
        .iter()
        .map(|d| (d.date.to_string(), d.kind, d.name.as_str()))
        .collect();
    assert_eq!(
        dates,
        [
            ("2026-12-24".to_string(), DayKind::Holiday, "Christmas Eve"),
            ("2026-12-26".to_string(), DayKind::Workday, "盘点"),
        ]
    );
    assert_eq!(calendars.get("acme").await.unwrap(), Some(created.clone()));
    assert_eq!(calendars.get("nope").await.unwrap(), None);
    let cal = created.to_calendar().unwrap();
    assert_eq!(cal.years(), Years::new(2026, 2026));
    assert!(cal.is_working_day(chrono::NaiveDate::from_ymd_opt(2026, 12, 26).unwrap()));

    let err = calendars.create(&spec, "admin", now()).await.unwrap_err();
    assert!(matches!(err, StorageError::AlreadyExists), "{err:?}");

    // More dates than one insert carries, and a calendar with none.
    let many: Vec<serde_json::Value> = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .iter_days()
        .take(1200)
        .map(|d| json!({"date": d.to_string(), "kind": "holiday"}))
        .collect();
    calendars
        .create(
            &calendar_spec("big", json!({"name": "big", "dates": many})),
            "admin",
            now(),
        )
        .await
        .unwrap();
    calendars
        .create(
            &calendar_spec("empty", json!({"name": "empty"})),
            "admin",
            now(),
        )
        .await
        .unwrap();
    let listed: Vec<(String, u64, Option<i32>, Option<i32>)> = calendars
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.code, c.date_count, c.first_year, c.last_year))
        .collect();
    assert_eq!(
        listed,
        [
            ("acme".to_string(), 2, Some(2026), Some(2026)),
            ("big".to_string(), 1200, Some(2026), Some(2029)),
            ("empty".to_string(), 0, None, None),
        ]
    );
    assert_eq!(calendars.codes().await.unwrap(), ["acme", "big", "empty"]);
    assert_eq!(
        calendars.get("big").await.unwrap().unwrap().dates.len(),
        1200
    );

    // Update: stale, missing, then the real one replacing every date.
    let new_spec = calendar_spec(
        "acme",
        json!({"name": "ACME 2027", "firstYear": 2026, "lastYear": 2027, "dates": [
            {"date": "2027-01-02", "kind": "workday"},
        ]}),
    );
    let err = calendars
        .update(2, &new_spec, "bob", now())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::StaleVersion { current: 1 }),
        "{err:?}"
    );
    let err = calendars
        .update(
            1,
            &calendar_spec("ghost", json!({"name": "g"})),
            "bob",
            now(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::NotFound), "{err:?}");
    let later = now() + chrono::TimeDelta::seconds(5);
    let (before, after, jobs) = calendars.update(1, &new_spec, "bob", later).await.unwrap();
    assert!(jobs.is_empty(), "no job names it");
    assert_eq!(before, created);
    assert_eq!(after.version, 2);
    assert_eq!(after.name, "ACME 2027");
    assert_eq!(after.description, "");
    assert_eq!(
        (after.first_year, after.last_year),
        (Some(2026), Some(2027))
    );
    assert_eq!(after.dates.len(), 1);
    assert_eq!(after.dates[0].date.to_string(), "2027-01-02");
    assert_eq!(after.created_by, "admin");
    assert_eq!(after.updated_by, "bob");
    assert_eq!(after.updated_at, truncate_to_millis(later));
    assert_eq!(calendars.get("acme").await.unwrap(), Some(after.clone()));

    // Delete returns what went; the dates go with it.
    assert_eq!(calendars.delete("acme").await.unwrap(), Some(after));
    assert_eq!(calendars.delete("acme").await.unwrap(), None);
    assert_eq!(calendars.get("acme").await.unwrap(), None);
    let left = qiwu_storage::entity::calendar_date::Entity::find()
        .filter(qiwu_storage::entity::calendar_date::Column::CalendarCode.eq("acme"))
        .all(store.connection())
        .await
        .unwrap();
    assert!(left.is_empty());
    // Recreating the code starts again at version 1.
    let again = calendars.create(&spec, "admin", now()).await.unwrap();
    assert_eq!(again.version, 1);
}

async fn calendars_concurrent_updates_one_wins(store: Store) {
    let spec = calendar_spec("race", json!({"name": "race"}));
    store
        .calendars()
        .create(&spec, "admin", now())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let spec = calendar_spec(
                "race",
                json!({"name": format!("writer {i}"), "dates": [
                    {"date": format!("2026-01-0{}", i + 1), "kind": "holiday"},
                ]}),
            );
            store.calendars().update(1, &spec, "w", now()).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(StorageError::StaleVersion { current: 2 }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(won, 1);
    let stored = store.calendars().get("race").await.unwrap().unwrap();
    assert_eq!(stored.version, 2);
    assert_eq!(stored.dates.len(), 1, "one writer's dates, not a mix");
}

/// Editing a calendar starts a new schedule for the jobs naming it (and
/// only them), without a new version; deleting it is refused while a job
/// names it.
async fn calendar_edit_restarts_its_jobs_schedules(store: Store) {
    use qiwu_domain::{CalendarRule, TimeRules};
    let spec = calendar_spec(
        "plant",
        json!({"name": "Plant", "dates": [{"date": "2026-12-24", "kind": "holiday"}]}),
    );
    store
        .calendars()
        .create(&spec, "admin", now())
        .await
        .unwrap();
    let rules = TimeRules {
        calendar: Some("plant".into()),
        calendar_rule: Some(CalendarRule::Exclude),
        ..TimeRules::default()
    };
    let mut ids = Vec::new();
    for name in ["uses a", "uses b"] {
        let job = NewJob {
            time_rules: rules.clone(),
            ..new_job(name)
        };
        ids.push(store.jobs().create(&job, "alice", now()).await.unwrap().id);
    }
    let other = store
        .jobs()
        .create(&new_job("plain"), "alice", now())
        .await
        .unwrap();

    let later = now() + chrono::TimeDelta::minutes(1);
    let (_, _, touched) = store
        .calendars()
        .update(1, &spec, "admin", later)
        .await
        .unwrap();
    assert_eq!(touched, ids);
    for id in &ids {
        let job = store.jobs().get(*id).await.unwrap().unwrap();
        assert_eq!(job.schedule_from, truncate_to_millis(later));
        assert_eq!(job.updated_at, truncate_to_millis(later));
        assert_eq!(job.version, 1, "the job's own fields did not change");
        assert_eq!(job.updated_by, "alice");
    }
    let untouched = store.jobs().get(other.id).await.unwrap().unwrap();
    assert_eq!(untouched.schedule_from, other.schedule_from);
    // Reconciliation finds them by their change time.
    let changed: Vec<i64> = store
        .jobs()
        .schedules_changed_since(later, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(changed, ids);

    let err = store.calendars().delete("plant").await.unwrap_err();
    assert!(
        matches!(&err, StorageError::InUse(jobs) if *jobs == ids),
        "{err:?}"
    );
    assert!(store.calendars().get("plant").await.unwrap().is_some());
    store.jobs().delete_many(&ids).await.unwrap();
    assert!(store.calendars().delete("plant").await.unwrap().is_some());
}
