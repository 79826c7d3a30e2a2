//! Black-box tests of calendars (issue 11): the built-in `cn-workdays`, user
//! calendars over the API (audited, super admins only) on SQLite,
//! PostgreSQL and MariaDB, and the cron preview with a calendar.

use crate::common;
use crate::common::{Db, Server, admin_token, audit, client, token};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn send(
    method: reqwest::Method,
    server: &Server,
    path: &str,
    token: &str,
    lang: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    common::send(method, server.url(path), Some(token), Some(lang), body).await
}

async fn get(server: &Server, path: &str, token: &str) -> (StatusCode, Value) {
    send(reqwest::Method::GET, server, path, token, "zh", None).await
}

async fn post(server: &Server, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    send(reqwest::Method::POST, server, path, token, "zh", Some(body)).await
}

async fn put(server: &Server, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    send(reqwest::Method::PUT, server, path, token, "zh", Some(body)).await
}

async fn delete(server: &Server, path: &str, token: &str) -> (StatusCode, Value) {
    send(reqwest::Method::DELETE, server, path, token, "zh", None).await
}

fn field_of(problem: &Value, field: &str) -> Option<String> {
    problem["errors"]
        .as_array()?
        .iter()
        .find(|e| e["field"] == field)
        .and_then(|e| e["message"].as_str().map(str::to_string))
}

/// The built-in calendar, a user calendar's whole life, and who may do what.
async fn calendar_lifecycle(db: Db) {
    let server = Server::start_with(db, &[]);
    let admin = admin_token();

    // The built-in calendar is listed first, with its years and notices.
    let (status, list) = get(&server, "/api/calendars", &admin).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list[0]["code"], "cn-workdays");
    assert_eq!(list[0]["builtin"], true);
    assert_eq!(list[0]["firstYear"], 2020);
    assert_eq!(list[0]["lastYear"], 2026);
    assert_eq!(list[0]["version"], Value::Null);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let (status, cn) = get(&server, "/api/calendars/cn-workdays", &admin).await;
    assert_eq!(status, StatusCode::OK, "{cn}");
    let titles: Vec<&str> = cn["notices"]
        .as_array()
        .expect("notices")
        .iter()
        .filter_map(|n| n["title"].as_str())
        .collect();
    assert_eq!(titles.len(), 7);
    assert_eq!(titles[6], "国务院办公厅关于2026年部分节假日安排的通知");
    assert_eq!(cn["notices"][6]["date"], "2025-11-04");
    assert_eq!(
        cn["notices"][0]["amendments"][0]["title"],
        "国务院办公厅关于延长2020年春节假期的通知"
    );
    let make_up = cn["dates"]
        .as_array()
        .expect("dates")
        .iter()
        .find(|d| d["date"] == "2026-02-14")
        .expect("14 February 2026");
    assert_eq!(make_up["kind"], "workday");
    assert_eq!(make_up["name"], "春节");
    assert_eq!(
        cn["dateCount"],
        cn["dates"].as_array().map(Vec::len).unwrap_or(0)
    );
    let (_, cn_en) = send(
        reqwest::Method::GET,
        &server,
        "/api/calendars/cn-workdays",
        &admin,
        "en",
        None,
    )
    .await;
    assert!(
        cn_en["dates"]
            .as_array()
            .expect("dates")
            .iter()
            .any(|d| d["date"] == "2026-02-17" && d["name"] == "Spring Festival"),
    );
    // Read-only.
    let (status, problem) = put(
        &server,
        "/api/calendars/cn-workdays",
        &admin,
        json!({"version": 1, "name": "x"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let (status, _) = delete(&server, "/api/calendars/cn-workdays", &admin).await;
    assert_eq!(status, StatusCode::CONFLICT);

    // Create a user calendar.
    let body = json!({
        "code": "acme",
        "name": "ACME 办公日历",
        "description": "年会放假，盘点的周六上班",
        "dates": [
            {"date": "2026-12-26", "kind": "workday", "name": "盘点"},
            {"date": "2026-12-24", "kind": "holiday", "name": "年会"},
        ],
    });
    let (status, created) = post(&server, "/api/calendars", &admin, body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["version"], 1);
    assert_eq!(created["builtin"], false);
    assert_eq!(created["firstYear"], 2026);
    assert_eq!(created["lastYear"], 2026);
    assert_eq!(created["createdBy"], "admin");
    assert_eq!(
        created["dates"],
        json!([
            {"date": "2026-12-24", "kind": "holiday", "name": "年会"},
            {"date": "2026-12-26", "kind": "workday", "name": "盘点"},
        ])
    );
    let (status, got) = get(&server, "/api/calendars/acme", &admin).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, created);
    let entries = audit(&server, "action=calendar.create").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["targetType"], "calendar");
    assert_eq!(entries[0]["targetId"], "acme");
    assert_eq!(entries[0]["actor"], "admin");
    assert_eq!(entries[0]["after"]["dates"], created["dates"]);

    // Taken codes, built-in codes and bad fields.
    let (status, _) = post(&server, "/api/calendars", &admin, body).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, problem) = post(
        &server,
        "/api/calendars",
        &admin,
        json!({"code": "cn-workdays", "name": "mine"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(field_of(&problem, "code").is_some(), "{problem}");
    let (status, problem) = send(
        reqwest::Method::POST,
        &server,
        "/api/calendars",
        &admin,
        "en",
        Some(json!({"code": "bad", "name": "", "dates": [
            {"date": "2026-02-30", "kind": "holiday"},
            {"date": "2026-03-01", "kind": "off"},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(
        field_of(&problem, "name").as_deref(),
        Some("Must not be blank")
    );
    assert_eq!(
        field_of(&problem, "dates[0].date").as_deref(),
        Some("`2026-02-30` is not a date: write YYYY-MM-DD, such as 2026-02-14")
    );
    assert_eq!(
        field_of(&problem, "dates[1].kind").as_deref(),
        Some("Kind off does not exist: use holiday or workday")
    );
    let (status, _) = post(
        &server,
        "/api/calendars",
        &admin,
        json!(["not", "an object"]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Listed after the built-in one.
    let (_, list) = get(&server, "/api/calendars", &admin).await;
    assert_eq!(list[1]["code"], "acme");
    assert_eq!(list[1]["dateCount"], 2);
    assert!(list[1].get("dates").is_none());

    // Replace: version required, stale refused, then saved.
    let new_body = json!({
        "name": "ACME 2027",
        "firstYear": 2026,
        "lastYear": 2027,
        "dates": [{"date": "2027-01-02", "kind": "workday"}],
    });
    let (status, problem) = put(&server, "/api/calendars/acme", &admin, new_body.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(field_of(&problem, "version").is_some(), "{problem}");
    let mut stale = new_body.clone();
    stale["version"] = json!(7);
    let (status, problem) = put(&server, "/api/calendars/acme", &admin, stale).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(problem["type"], "urn:qiwu:problem:stale-version");
    let mut renamed = new_body.clone();
    renamed["version"] = json!(1);
    renamed["code"] = json!("other");
    let (status, problem) = put(&server, "/api/calendars/acme", &admin, renamed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(field_of(&problem, "code").is_some(), "{problem}");
    let mut good = new_body;
    good["version"] = json!(1);
    let (status, updated) = put(&server, "/api/calendars/acme", &admin, good.clone()).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["version"], 2);
    assert_eq!(updated["name"], "ACME 2027");
    assert_eq!(updated["description"], "");
    assert_eq!(updated["lastYear"], 2027);
    assert_eq!(
        updated["dates"],
        json!([{"date": "2027-01-02", "kind": "workday", "name": ""}])
    );
    let (status, _) = put(&server, "/api/calendars/ghost", &admin, good).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let entries = audit(&server, "action=calendar.modify").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["before"]["version"], 1);
    assert_eq!(entries[0]["before"]["dates"], created["dates"]);
    assert_eq!(entries[0]["after"]["version"], 2);

    // Who may do what: reading needs scheduler.task.browse, writing a
    // super admin.
    let browser = token(&["scheduler.task.browse"]);
    let (status, _) = get(&server, "/api/calendars/acme", &browser).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(
        &server,
        "/api/calendars",
        &browser,
        json!({"code": "mine", "name": "mine"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = delete(&server, "/api/calendars/acme", &browser).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = get(&server, "/api/calendars", &token(&[])).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let resp = client()
        .get(server.url("/api/calendars"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // The user calendar drives a preview.
    let (status, preview) = post(
        &server,
        "/api/cron/preview",
        &browser,
        json!({"cron": "0 0 9 * * *", "timezone": "Asia/Shanghai", "from": "2027-01-01T00:00:00+08:00",
               "calendar": "acme", "calendarRule": "workdays", "count": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(
        preview["nextFireTimes"],
        json!(["2027-01-01T09:00:00+08:00", "2027-01-02T09:00:00+08:00"])
    );
    assert_eq!(preview["calendarEffect"]["added"][0]["date"], "2027-01-02");

    // Delete: gone, audited, and a second delete is a 404.
    let (status, _) = delete(&server, "/api/calendars/acme", &admin).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = get(&server, "/api/calendars/acme", &admin).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = delete(&server, "/api/calendars/acme", &admin).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let entries = audit(&server, "action=calendar.delete").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["before"]["name"], "ACME 2027");
    assert_eq!(entries[0]["after"], Value::Null);
    let (_, list) = get(&server, "/api/calendars", &admin).await;
    assert_eq!(list.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn calendar_lifecycle_on_sqlite() {
    calendar_lifecycle(Db::Sqlite).await;
}

#[tokio::test]
async fn calendar_lifecycle_on_postgres() {
    calendar_lifecycle(Db::Postgres).await;
}

#[tokio::test]
async fn calendar_lifecycle_on_mariadb() {
    calendar_lifecycle(Db::MySql).await;
}

/// The README's worked example: a payroll job at 10:00 on working days,
/// over the 2026 Spring Festival and its make-up Saturdays.
#[tokio::test]
async fn preview_of_a_payroll_job_over_the_spring_festival() {
    let server = Server::start();
    let user = token(&[]);
    let (status, preview) = send(
        reqwest::Method::POST,
        &server,
        "/api/cron/preview",
        &user,
        "en",
        Some(json!({
            "cron": "0 0 10 * * *",
            "timezone": "Asia/Shanghai",
            "from": "2026-02-12T00:00:00+08:00",
            "count": 5,
            "calendar": "cn-workdays",
            "calendarRule": "workdays",
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["valid"], true);
    assert_eq!(preview["description"], "At 10:00:00, every day");
    assert_eq!(
        preview["nextFireTimes"],
        json!([
            "2026-02-12T10:00:00+08:00",
            "2026-02-13T10:00:00+08:00",
            "2026-02-14T10:00:00+08:00",
            "2026-02-24T10:00:00+08:00",
            "2026-02-25T10:00:00+08:00",
        ])
    );
    let removed: Vec<&str> = preview["calendarEffect"]["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .filter_map(|d| d["date"].as_str())
        .collect();
    assert_eq!(
        removed,
        [
            "2026-02-16",
            "2026-02-17",
            "2026-02-18",
            "2026-02-19",
            "2026-02-20",
            "2026-02-23"
        ]
    );
    assert_eq!(
        preview["calendarEffect"]["removed"][0]["name"],
        "Spring Festival"
    );
    assert_eq!(
        preview["calendarEffect"]["added"],
        json!([{"date": "2026-02-14", "kind": "workday", "name": "Spring Festival"}])
    );
    assert_eq!(preview["calendarEffect"]["missingYears"], json!([]));
    assert_eq!(preview["notice"], Value::Null);

    // Without a calendar the answer has no effect, as before.
    let (_, plain) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "0 0 10 * * *", "timezone": "Asia/Shanghai", "from": "2026-02-12T00:00:00+08:00", "count": 3}),
    )
    .await;
    assert_eq!(plain["calendarEffect"], Value::Null);
    assert_eq!(
        plain["nextFireTimes"][2], "2026-02-14T10:00:00+08:00",
        "every day without a calendar"
    );

    // From December the missing next year is a notice, and the effect says so.
    let (_, december) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "0 0 10 * * *", "timezone": "Asia/Shanghai", "from": "2026-12-30T00:00:00+08:00",
               "count": 3, "calendar": "cn-workdays", "calendarRule": "workdays"}),
    )
    .await;
    assert_eq!(
        december["nextFireTimes"],
        json!([
            "2026-12-30T10:00:00+08:00",
            "2026-12-31T10:00:00+08:00",
            "2027-01-01T10:00:00+08:00",
        ])
    );
    assert_eq!(december["calendarEffect"]["missingYears"], json!([2027]));
    let notice = december["notice"].as_str().expect("a notice");
    assert!(
        notice.contains("cn-workdays") && notice.contains("2027"),
        "{notice}"
    );

    // A restricted day-of-week with `workdays` is not a valid combination.
    let (status, weekdays) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "0 0 10 * * 1-5", "calendar": "cn-workdays", "calendarRule": "workdays"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(weekdays["valid"], false);
    assert!(
        weekdays["error"]
            .as_str()
            .is_some_and(|e| e.contains("星期字段")),
        "{weekdays}"
    );
    // `exclude` takes any cron.
    let (_, exclude) = post(
        &server,
        "/api/cron/preview",
        &user,
        json!({"cron": "0 0 10 * * 1-5", "timezone": "Asia/Shanghai", "from": "2026-02-12T00:00:00+08:00",
               "count": 3, "calendar": "cn-workdays", "calendarRule": "exclude"}),
    )
    .await;
    assert_eq!(
        exclude["nextFireTimes"],
        json!([
            "2026-02-12T10:00:00+08:00",
            "2026-02-13T10:00:00+08:00",
            "2026-02-24T10:00:00+08:00",
        ])
    );

    // Bad calendar fields are 400s naming the field.
    let cases = [
        (
            json!({"calendar": "nope", "calendarRule": "workdays"}),
            "calendar",
        ),
        (
            json!({"calendar": "cn-workdays", "calendarRule": "weekdays"}),
            "calendarRule",
        ),
        (json!({"calendarRule": "workdays"}), "calendarRule"),
        (json!({"calendar": "cn-workdays"}), "calendarRule"),
    ];
    for (extra, field) in cases {
        let mut body = json!({"cron": "0 0 10 * * *"});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra.clone()) {
            b.extend(e);
        }
        let (status, problem) = post(&server, "/api/cron/preview", &user, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {problem}");
        assert!(field_of(&problem, field).is_some(), "{extra}: {problem}");
    }
}
