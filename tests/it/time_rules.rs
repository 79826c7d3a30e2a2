//! Black-box tests of a job's time rules (issue 11): jobs naming a
//! calendar and an active window, validated like the cron preview, shown in
//! the job detail, followed by the engine, and a calendar a job names kept
//! from deletion; on SQLite, PostgreSQL and MariaDB.

use std::time::Duration;

use crate::common;
use crate::common::{Db, Server, admin_token, fields, wait_for_runs};
use chrono::{NaiveDate, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn send(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    lang: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(
        method,
        server.url(path),
        Some(&admin_token()),
        Some(lang),
        body,
    )
    .await
}

async fn get(server: &Server, path: &str) -> (StatusCode, Value) {
    send(reqwest::Method::GET, server, path, "en", None).await
}

async fn post(server: &Server, path: &str, body: Value) -> (StatusCode, Value) {
    send(reqwest::Method::POST, server, path, "en", Some(body)).await
}

async fn put(server: &Server, path: &str, body: Value) -> (StatusCode, Value) {
    send(reqwest::Method::PUT, server, path, "en", Some(body)).await
}

/// Today's date in Shanghai and the next `n` days.
fn days_ahead(n: i64) -> Vec<NaiveDate> {
    let today = Utc::now()
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .date_naive();
    (0..=n).map(|i| today + TimeDelta::days(i)).collect()
}

/// The dates (in Shanghai) of a detail's next fire times.
fn fire_dates(detail: &Value) -> Vec<String> {
    detail["nextFireTimes"]
        .as_array()
        .expect("nextFireTimes")
        .iter()
        .filter_map(|t| t.as_str().map(|t| t[..10].to_string()))
        .collect()
}

async fn jobs_name_calendars(db: Db) {
    let server = Server::start_with(db, &[]);
    let days = days_ahead(6);
    let (first_year, last_year) = (
        chrono::Datelike::year(&days[0]),
        chrono::Datelike::year(&days[6]) + 1,
    );
    // Tomorrow and the day after are the plant's holidays.
    let (status, calendar) = post(
        &server,
        "/api/calendars",
        json!({"code": "plant", "name": "Plant", "firstYear": first_year, "lastYear": last_year,
        "dates": [
            {"date": days[1].to_string(), "kind": "holiday", "name": "stocktaking"},
            {"date": days[2].to_string(), "kind": "holiday", "name": "stocktaking"},
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{calendar}");

    // Validated like the preview, every problem named at once.
    let cases = [
        (
            json!({"calendar": "nope", "calendarRule": "exclude"}),
            vec!["calendar"],
        ),
        (json!({"calendarRule": "workdays"}), vec!["calendarRule"]),
        (json!({"calendar": "plant"}), vec!["calendarRule"]),
        (
            json!({"calendar": "plant", "calendarRule": "weekends"}),
            vec!["calendarRule"],
        ),
        (
            json!({"calendar": "cn-workdays", "calendarRule": "workdays", "cron": "0 0 9 * * 1-5"}),
            vec!["cron"],
        ),
        (
            json!({"activeFrom": "2027-01-02T00:00:00+08:00", "activeUntil": "2027-01-01T00:00:00+08:00"}),
            vec!["activeUntil"],
        ),
        (json!({"activeFrom": "tomorrow"}), vec!["activeFrom"]),
        // A jitter must stay below the cron's shortest period.
        (
            json!({"cron": "0 * * * * *", "jitterMs": 60000}),
            vec!["jitterMs"],
        ),
        (json!({"jitterMs": 86_400_001}), vec!["jitterMs"]),
        (json!({"maxRuns": 0}), vec!["maxRuns"]),
        (json!({"misfireGraceMs": -1}), vec!["misfireGraceMs"]),
        (
            json!({"misfireGraceMs": 2_592_000_001_i64}),
            vec!["misfireGraceMs"],
        ),
    ];
    for (extra, want) in cases {
        let mut body = json!({"name": "bad", "handler": "demo.echo", "cron": "0 0 9 * * *",
                              "timezone": "Asia/Shanghai"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        let (status, problem) = post(&server, "/api/jobs", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {problem}");
        assert_eq!(fields(&problem), want, "{body}: {problem}");
    }

    // A job on the plant's days: its next fire times leave the holidays out.
    let (status, job) = post(
        &server,
        "/api/jobs",
        json!({"name": "stock report", "handler": "demo.echo", "cron": "0 0 9 * * *",
               "timezone": "Asia/Shanghai", "calendar": "plant", "calendarRule": "exclude"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["calendar"], "plant");
    assert_eq!(job["calendarRule"], "exclude");
    assert_eq!(job["activeFrom"], Value::Null);
    let id = job["id"].as_i64().expect("id");
    let (status, detail) = get(&server, &format!("/api/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let dates = fire_dates(&detail);
    assert_eq!(dates.len(), 5, "{detail}");
    for holiday in &days[1..=2] {
        assert!(!dates.contains(&holiday.to_string()), "{dates:?}");
    }
    assert!(dates.contains(&days[3].to_string()), "{dates:?}");
    assert_eq!(detail["notice"], Value::Null, "{detail}");

    // The calendar edited: the job follows at once, without a new version.
    let (status, edited) = put(
        &server,
        "/api/calendars/plant",
        json!({"version": 1, "name": "Plant", "firstYear": first_year, "lastYear": last_year,
               "dates": [{"date": days[3].to_string(), "kind": "holiday"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    let (_, detail) = get(&server, &format!("/api/jobs/{id}")).await;
    let dates = fire_dates(&detail);
    assert!(dates.contains(&days[2].to_string()), "{dates:?}");
    assert!(!dates.contains(&days[3].to_string()), "{dates:?}");
    assert_eq!(detail["version"], 1);

    // A calendar a job names cannot be deleted; the answer names the job.
    let (status, problem) = send(
        reqwest::Method::DELETE,
        &server,
        "/api/calendars/plant",
        "en",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let detail_text = problem["detail"].as_str().unwrap_or_default();
    assert!(detail_text.contains(&format!("jobs {id}")), "{problem}");

    // An active window: nothing before it, and the window is kept.
    let from = format!("{}T00:00:00+08:00", days[5]);
    let (status, job) = put(
        &server,
        &format!("/api/jobs/{id}"),
        json!({"version": 1, "activeFrom": from, "calendar": null, "calendarRule": null}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["calendar"], Value::Null);
    assert_eq!(job["version"], 2);
    assert_eq!(job["maxRuns"], Value::Null);
    assert_eq!(job["misfireGraceMs"], 0);
    assert_eq!(job["scheduledSuccesses"], 0);
    // A limit and a catch-up window are kept.
    let (status, job) = put(
        &server,
        &format!("/api/jobs/{id}"),
        json!({"version": 2, "maxRuns": 3, "misfireGraceMs": 3_600_000, "misfirePolicy": "run_once"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["maxRuns"], 3);
    assert_eq!(job["jitterMs"], 0);
    let (status, job) = put(
        &server,
        &format!("/api/jobs/{id}"),
        json!({"version": 3, "jitterMs": 600_000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["jitterMs"], 600_000);
    assert_eq!(job["misfireGraceMs"], 3_600_000);
    assert!(job["activeFrom"].is_string(), "the window is kept: {job}");
    let (_, detail) = get(&server, &format!("/api/jobs/{id}")).await;
    assert_eq!(fire_dates(&detail)[0], days[5].to_string(), "{detail}");
    assert_eq!(detail["version"], 4);
    // The next fire times stay nominal: 09:00:00, whatever the jitter.
    assert!(
        detail["nextFireTimes"][0]
            .as_str()
            .is_some_and(|t| t.ends_with("T09:00:00+08:00")),
        "{detail}"
    );

    // No job names the calendar now: it can go.
    let (status, _) = send(
        reqwest::Method::DELETE,
        &server,
        "/api/calendars/plant",
        "en",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // A calendar without data for this year: the detail says what happens.
    let (status, _) = post(
        &server,
        "/api/calendars",
        json!({"code": "old", "name": "Old", "firstYear": 2020, "lastYear": 2020, "dates": []}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, job) = post(
        &server,
        "/api/jobs",
        json!({"name": "old days", "handler": "demo.echo", "cron": "0 0 9 * * *",
               "calendar": "old", "calendarRule": "workdays"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let (_, detail) = get(&server, &format!("/api/jobs/{}", job["id"])).await;
    let notice = detail["notice"].as_str().unwrap_or_default();
    assert!(
        notice.contains(&format!("Calendar old has no data for {first_year}")),
        "{detail}"
    );
    assert!(notice.contains("Monday to Friday only"), "{detail}");
}

#[tokio::test]
async fn jobs_name_calendars_on_sqlite() {
    jobs_name_calendars(Db::Sqlite).await;
}

#[tokio::test]
async fn jobs_name_calendars_on_postgres() {
    jobs_name_calendars(Db::Postgres).await;
}

#[tokio::test]
async fn jobs_name_calendars_on_mariadb() {
    jobs_name_calendars(Db::MySql).await;
}

/// The engine follows the calendar: an every-second job whose calendar
/// makes today and tomorrow holidays records nothing while a twin without
/// it runs, and fires once the calendar is edited to free today.
#[tokio::test]
async fn the_engine_fires_only_on_the_calendars_days() {
    let server = Server::start();
    let store = server.store().await;
    let today = Utc::now().date_naive();
    let days = [today, today + TimeDelta::days(1)];
    let holidays = |dates: &[NaiveDate]| -> Vec<Value> {
        dates
            .iter()
            .map(|d| json!({"date": d.to_string(), "kind": "holiday"}))
            .collect()
    };
    let years = (
        chrono::Datelike::year(&days[0]),
        chrono::Datelike::year(&days[1]),
    );
    let (status, _) = post(
        &server,
        "/api/calendars",
        json!({"code": "closed", "name": "Closed", "firstYear": years.0, "lastYear": years.1,
               "dates": holidays(&days)}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let mut ids = Vec::new();
    for (name, calendar) in [("twin", Value::Null), ("closed", json!("closed"))] {
        let rule = if calendar.is_null() {
            Value::Null
        } else {
            json!("exclude")
        };
        let (status, job) = post(
            &server,
            "/api/jobs",
            json!({"name": name, "handler": "demo.echo", "cron": "* * * * * *", "timezone": "UTC",
                   "calendar": calendar, "calendarRule": rule, "params": {"message": name}}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        ids.push(job["id"].as_i64().expect("id"));
    }
    let limit = Duration::from_secs(60);
    wait_for_runs(&store, ids[0], limit, |runs| {
        runs.iter().filter(|r| r.status == "success").count() >= 3
    })
    .await;
    let closed = common::runs_of(&store, ids[1]).await;
    assert!(closed.is_empty(), "fired on a holiday: {closed:#?}");

    // Both days freed: it fires from the edit on.
    let (status, edited) = put(
        &server,
        "/api/calendars/closed",
        json!({"version": 1, "name": "Closed", "firstYear": years.0, "lastYear": years.1,
               "dates": holidays(&[])}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    let edited_at = Utc::now().timestamp_millis();
    let runs = wait_for_runs(&store, ids[1], limit, |runs| {
        runs.iter().filter(|r| r.status == "success").count() >= 2
    })
    .await;
    // Nothing before the edit is caught up: the new dates start a new
    // schedule, as an edit of the job does.
    assert!(
        runs.iter().all(|r| r.scheduled_at >= edited_at - 2000),
        "{runs:#?}"
    );
}

/// `POST /api/jobs/{id}/preview-change`: the next fire times before and
/// after an edit, whether it starts a new schedule (never a catch-up), the
/// calendar's effect and the errors a `PUT` would answer; nothing saved.
#[tokio::test]
async fn an_edit_is_previewed_without_saving() {
    let server = Server::start();
    let (status, job) = post(
        &server,
        "/api/jobs",
        json!({"name": "payroll", "handler": "demo.echo", "cron": "0 0 10 * * *",
               "timezone": "Asia/Shanghai"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_i64().expect("id");
    let path = format!("/api/jobs/{id}/preview-change");

    // To working days by cn-workdays, starting after the 2026 Spring
    // Festival's make-up Saturday: nothing else changes yet.
    let (status, preview) = post(
        &server,
        &path,
        json!({"version": 1, "calendar": "cn-workdays", "calendarRule": "workdays",
               "activeFrom": "2026-02-14T00:00:00+08:00", "activeUntil": "2026-02-28T23:59:59+08:00"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["valid"], true, "{preview}");
    assert_eq!(preview["errors"], json!([]));
    assert_eq!(preview["newSchedule"], true);
    assert_eq!(preview["catchUpOnSave"], false);
    assert!(
        preview["catchUpNote"]
            .as_str()
            .is_some_and(|n| n.contains("not caught up")),
        "{preview}"
    );
    assert_eq!(
        preview["nextFireTimesBefore"].as_array().map(Vec::len),
        Some(5)
    );
    // Its window is in the past: no time after saving.
    assert_eq!(preview["nextFireTimesAfter"], json!([]), "{preview}");

    // Without the window the calendar's effect over the listed times is
    // given (an object, even when it changed no date there).
    let (_, preview) = post(
        &server,
        &path,
        json!({"calendar": "cn-workdays", "calendarRule": "workdays"}),
    )
    .await;
    assert_eq!(preview["valid"], true, "{preview}");
    assert!(preview["calendarEffect"].is_object(), "{preview}");
    assert_eq!(
        preview["nextFireTimesAfter"].as_array().map(Vec::len),
        Some(5)
    );

    // A remark changes no schedule.
    let (_, preview) = post(&server, &path, json!({"remark": "paid on time"})).await;
    assert_eq!(preview["valid"], true, "{preview}");
    assert_eq!(preview["newSchedule"], false);
    assert_eq!(
        preview["nextFireTimesAfter"],
        preview["nextFireTimesBefore"]
    );
    assert_eq!(preview["calendarEffect"], Value::Null);

    // Every problem a PUT would answer, a stale version included.
    let (status, preview) = post(
        &server,
        &path,
        json!({"version": 7, "calendar": "nope", "calendarRule": "workdays", "cron": "0 0 9 * * 1-5"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["valid"], false);
    assert_eq!(
        fields(&preview),
        ["version", "calendar", "cron"],
        "{preview}"
    );
    assert_eq!(preview["nextFireTimesAfter"], json!([]));

    // Nothing was saved.
    let (_, detail) = get(&server, &format!("/api/jobs/{id}")).await;
    assert_eq!(detail["version"], 1);
    assert_eq!(detail["calendar"], Value::Null);
    assert_eq!(detail["remark"], "");
    let (status, _) = post(&server, "/api/jobs/999999/preview-change", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
