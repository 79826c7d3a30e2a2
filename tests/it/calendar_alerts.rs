//! Black-box test of the alert a job raises when its calendar has no data
//! for a year its schedule reaches (issue 11): raised once per job and year
//! through the alert machinery (the inbox here), and remembered across an
//! edit of the job and a restart.

use std::time::Duration;

use crate::common;
use crate::common::{Server, admin_token};
use chrono::{Datelike, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

const ALERT: &str = "scheduler.calendar_data_alert";

async fn send(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, server.url(path), Some(&admin_token()), None, body).await
}

/// The calendar alerts in the inbox.
async fn calendar_alerts(server: &Server) -> Vec<Value> {
    let (status, page) = send(
        server,
        reqwest::Method::GET,
        "/api/notifications?limit=100",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|n| n["templateCode"] == ALERT)
        .cloned()
        .collect()
}

async fn wait_for_alerts(server: &Server, n: usize) -> Vec<Value> {
    let start = std::time::Instant::now();
    loop {
        let alerts = calendar_alerts(server).await;
        if alerts.len() >= n {
            return alerts;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no calendar alert: {alerts:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_calendar_that_runs_out_raises_one_alert_per_job_and_year() {
    let server = Server::start();
    // Data for last year only: this year (and the coming one) are missing,
    // whatever the date the test runs on; `exclude` fires on any weekday.
    let last_year = Utc::now().year() - 1;
    let (status, calendar) = send(
        &server,
        reqwest::Method::POST,
        "/api/calendars",
        Some(
            json!({"code": "stale", "name": "Stale", "firstYear": last_year, "lastYear": last_year,
                    "dates": [{"date": format!("{last_year}-10-01"), "kind": "holiday"}]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{calendar}");
    let (status, job) = send(
        &server,
        reqwest::Method::POST,
        "/api/jobs",
        Some(
            json!({"name": "payroll", "handler": "demo.echo", "cron": "* * * * * *",
                    "calendar": "stale", "calendarRule": "exclude"}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_i64().expect("id");
    let (_, detail) = send(
        &server,
        reqwest::Method::GET,
        &format!("/api/jobs/{id}"),
        None,
    )
    .await;
    assert!(
        detail["notice"].as_str().is_some(),
        "the detail's notice: {detail}"
    );

    let alerts = wait_for_alerts(&server, 1).await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let this_year = Utc::now().year().to_string();
    let title = alerts[0]["title"].as_str().unwrap_or_default();
    assert!(
        title.contains("stale") && title.contains(&this_year) && title.contains("payroll"),
        "{title}"
    );
    let body = alerts[0]["body"].as_str().unwrap_or_default();
    assert!(
        body.contains(&format!("ID {id}")) && body.contains("还没有"),
        "{body}"
    );

    // An edit re-arms the job, and a restart re-reads everything: the
    // alert is not raised again. Fires go on meanwhile, each checking.
    let (status, _) = send(
        &server,
        reqwest::Method::PUT,
        &format!("/api/jobs/{id}"),
        Some(json!({"version": job["version"], "remark": "edited"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let store = server.store().await;
    common::wait_for_runs(&store, id, Duration::from_secs(30), |runs| runs.len() >= 2).await;
    drop(store);
    let server = Server::restart(server.stop());
    let store = server.store().await;
    let seen = common::runs_of(&store, id).await.len();
    common::wait_for_runs(&store, id, Duration::from_secs(30), |runs| {
        runs.len() >= seen + 2
    })
    .await;
    assert_eq!(calendar_alerts(&server).await.len(), 1);
}
