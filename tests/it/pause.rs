//! Pausing jobs with a reason and an end (issue 10 part 3), black-box:
//! the pause shows on the job, the job is enabled again at its end exactly
//! once (also by a cluster of two workers racing for it), nothing fires
//! while it is paused and the first fire after is the first cron time
//! after the end (on all three databases); batches by ids and by group;
//! validation; permission.

use std::time::Duration;

use crate::common;
use crate::common::{Db, Server, admin_token, client, records, token};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Where the API answers and the database it writes.
struct Target {
    base: String,
    store: qiwu_storage::Store,
}

impl Target {
    async fn of(server: &Server) -> Target {
        Target {
            base: server.base.clone(),
            store: server.store().await,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        bearer: &str,
        lang: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = client()
            .request(method, self.url(path))
            .bearer_auth(bearer)
            .header("Accept-Language", lang);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn create(&self, body: Value) -> i64 {
        let (status, job) = self
            .send(
                reqwest::Method::POST,
                "/api/jobs",
                &admin_token(),
                "en",
                Some(body),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        job["id"].as_i64().expect("id")
    }

    async fn job(&self, id: i64) -> Value {
        let (status, job) = self
            .send(
                reqwest::Method::GET,
                &format!("/api/jobs/{id}"),
                &admin_token(),
                "en",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{job}");
        job
    }

    async fn set_enabled(&self, id: i64, body: Value, lang: &str) -> (StatusCode, Value) {
        self.send(
            reqwest::Method::PUT,
            &format!("/api/jobs/{id}/enabled"),
            &admin_token(),
            lang,
            Some(body),
        )
        .await
    }

    async fn batch(&self, body: Value, lang: &str) -> (StatusCode, Value) {
        self.send(
            reqwest::Method::POST,
            "/api/jobs/batch-enabled",
            &admin_token(),
            lang,
            Some(body),
        )
        .await
    }

    /// The audit entries of one job and action, oldest first.
    async fn audits(&self, id: i64, action: &str) -> Vec<qiwu_storage::entity::audit_log::Model> {
        use qiwu_storage::entity::audit_log::{Column, Entity};
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
        Entity::find()
            .filter(Column::TargetId.eq(id.to_string()))
            .filter(Column::Action.eq(action))
            .order_by_asc(Column::Id)
            .all(self.store.connection())
            .await
            .expect("read the audit log")
    }
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {v}"))
}

/// Pauses every-second jobs for a few seconds and watches them come back:
/// the pause's fields on the detail and the list, one enable by the
/// system per job at the end, no record of the paused seconds, and the
/// first fire at the first cron time after the end.
async fn pause_and_resume(target: &Target, jobs: usize) {
    let mut ids = Vec::new();
    for i in 0..jobs {
        ids.push(
            target
                .create(json!({"name": format!("paused-{i}"), "handler": "demo.echo", "cron": "* * * * * *"}))
                .await,
        );
    }
    // Each fires before it is paused.
    for id in &ids {
        common::until("a first fire", Duration::from_secs(20), async || {
            (!records(&target.store, *id).await.is_empty()).then_some(())
        })
        .await;
    }
    let until = Utc::now() + chrono::Duration::milliseconds(4_500);
    let until_text = until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut paused = Vec::new();
    for id in &ids {
        let (status, job) = target
            .set_enabled(
                *id,
                json!({"enabled": false, "reason": "下游维护 / downstream maintenance", "until": until_text}),
                "en",
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{job}");
        assert_eq!(job["enabled"], false);
        assert_eq!(job["pausedReason"], "下游维护 / downstream maintenance");
        assert_eq!(job["pausedBy"], "admin");
        assert_eq!(time(&job["pausedUntil"]), time(&json!(until_text)));
        let paused_at = time(&job["pausedAt"]);
        assert!(paused_at <= Utc::now() && paused_at < until, "{job}");
        // The fires recorded by now came before the pause (a worker's clock,
        // corrected against the database's, may put one a few ms after
        // `pausedAt`); no fire can be claimed once the pause is committed.
        let before: Vec<i64> = records(&target.store, *id)
            .await
            .iter()
            .map(|r| r.fire_id)
            .collect();
        paused.push((job["version"].as_i64().expect("version"), paused_at, before));
    }
    // The detail and the list items show the pause; the detail lists the
    // fire times after its end.
    let detail = target.job(ids[0]).await;
    assert_eq!(detail["pausedReason"], "下游维护 / downstream maintenance");
    assert_eq!(time(&detail["pausedUntil"]), time(&json!(until_text)));
    assert!(
        detail["notice"]
            .as_str()
            .unwrap_or("")
            .contains("paused until"),
        "{detail}"
    );
    let listed = time(&detail["nextFireTimes"][0]).timestamp_millis();
    let end = until.timestamp_millis();
    assert_eq!(listed, end - end.rem_euclid(1000) + 1000, "{detail}");
    let (_, page) = target
        .send(
            reqwest::Method::GET,
            "/api/jobs?enabled=false&pageSize=100",
            &admin_token(),
            "en",
            None,
        )
        .await;
    let item = page["items"]
        .as_array()
        .and_then(|items| items.iter().find(|j| j["id"] == ids[0]))
        .unwrap_or_else(|| panic!("{page}"))
        .clone();
    assert_eq!(item["pausedBy"], "admin");
    assert_eq!(time(&item["pausedAt"]), paused[0].1);

    for id in &ids {
        common::until(
            "the job enabled again",
            Duration::from_secs(20),
            async || (target.job(*id).await["enabled"] == true).then_some(()),
        )
        .await;
    }
    assert!(Utc::now() >= until, "resumed before its end");
    let until_ms = until.timestamp_millis();
    let first_after = until_ms - until_ms.rem_euclid(1000) + 1000;
    for (id, (version, paused_at, before)) in ids.iter().zip(&paused) {
        let job = target.job(*id).await;
        assert_eq!(job["version"], version + 1, "enabled once: {job}");
        assert_eq!(job["updatedBy"], "system");
        for field in ["pausedReason", "pausedBy", "pausedAt", "pausedUntil"] {
            assert_eq!(job[field], Value::Null, "{field} cleared: {job}");
        }
        let enables = target.audits(*id, "job.enable").await;
        assert_eq!(enables.len(), 1, "{enables:#?}");
        assert_eq!(enables[0].actor, "system");
        assert!(enables[0].summary.contains("暂停到期"), "{enables:#?}");

        // The first fire after the end, and nothing in between.
        let paused_ms = paused_at.timestamp_millis();
        common::until(
            "a fire after the pause",
            Duration::from_secs(20),
            async || {
                records(&target.store, *id)
                    .await
                    .iter()
                    .any(|r| r.last > paused_ms && !before.contains(&r.fire_id))
                    .then_some(())
            },
        )
        .await;
        let after: Vec<_> = records(&target.store, *id)
            .await
            .into_iter()
            .filter(|r| r.last > paused_ms && !before.contains(&r.fire_id))
            .collect();
        assert_eq!(after[0].first, first_after, "{after:#?}");
        assert_eq!(after[0].last, first_after, "{after:#?}");
        assert_eq!(after[0].trigger, "schedule", "no catch-up: {after:#?}");
        assert!(
            after.iter().all(|r| r.trigger == "schedule"),
            "no misfire record: {after:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_until_resumes_once_on_sqlite() {
    let server = Server::start();
    let target = Target::of(&server).await;
    pause_and_resume(&target, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_until_resumes_once_on_postgres() {
    let server = Server::start_with(Db::Postgres, &[]);
    let target = Target::of(&server).await;
    pause_and_resume(&target, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_until_resumes_once_on_mariadb() {
    let server = Server::start_with(Db::MySql, &[]);
    let target = Target::of(&server).await;
    pause_and_resume(&target, 1).await;
}

/// Two workers both wake at the end of each pause; the database lets one
/// enable each job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_until_resumes_once_in_a_cluster() {
    let cluster = common::cluster::Cluster::start(Db::Postgres, 2);
    let target = Target {
        base: cluster.api.base.clone(),
        store: cluster.store().await,
    };
    pause_and_resume(&target, 3).await;
}

/// Batches by ids and by group, validation and permission.
async fn batches_and_rules(target: &Target) {
    let (status, body) = target
        .send(
            reqwest::Method::POST,
            "/api/job-groups",
            &admin_token(),
            "en",
            Some(json!({"code": "nightly", "labelZh": "夜间", "labelEn": "Nightly"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let job = |name: &str, group: &str| json!({"name": name, "handler": "demo.echo", "cron": "0 0 3 * * *", "group": group});
    let a = target.create(job("a", "nightly")).await;
    let b = target.create(job("b", "nightly")).await;
    let c = target.create(job("c", "default")).await;

    // By ids: the unknown id reported, a job already as asked unchanged.
    let (status, body) = target
        .batch(json!({"ids": [a, c], "enabled": false}), "en")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = target
        .batch(
            json!({"ids": [c, b, 9_007_199_254_740_991_i64], "enabled": false, "reason": "月结"}),
            "en",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], json!([b, c]), "{body}");
    assert_eq!(body["unchanged"], json!([]), "{body}");
    assert_eq!(
        body["notFound"],
        json!([9_007_199_254_740_991_i64]),
        "{body}"
    );
    assert_eq!(target.job(b).await["pausedReason"], "月结");
    // `c` was disabled already: the reason replaced its pause.
    assert_eq!(target.job(c).await["pausedReason"], "月结");
    assert_eq!(target.audits(c, "job.disable").await.len(), 2);
    let (status, body) = target
        .batch(json!({"ids": [a], "enabled": false}), "en")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["unchanged"], json!([a]), "{body}");
    assert_eq!(target.audits(a, "job.disable").await.len(), 1);

    // An edit echoing the job back keeps its pause; an edit enabling it
    // ends the pause.
    let mut edit = target.job(b).await;
    edit["remark"] = json!("edited while paused");
    // Not echoable (a read-only field of the time rules the job body
    // does not list); left out.
    if let Some(map) = edit.as_object_mut() {
        map.remove("scheduledSuccesses");
    }
    let (status, body) = target
        .send(
            reqwest::Method::PUT,
            &format!("/api/jobs/{b}"),
            &admin_token(),
            "en",
            Some(edit),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["pausedReason"], "月结", "{body}");
    assert_eq!(body["pausedBy"], "admin", "{body}");
    let version = body["version"].clone();
    let (status, body) = target
        .send(
            reqwest::Method::PUT,
            &format!("/api/jobs/{b}"),
            &admin_token(),
            "en",
            Some(json!({"version": version, "enabled": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["pausedReason"], Value::Null, "{body}");
    assert_eq!(body["pausedAt"], Value::Null, "{body}");
    let (status, body) = target
        .batch(
            json!({"ids": [b], "enabled": false, "reason": "月结"}),
            "en",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // By group: every job of it, each audited; the others untouched.
    let (status, body) = target
        .batch(json!({"group": "nightly", "enabled": true}), "en")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], json!([a, b]), "{body}");
    assert_eq!(body["notFound"], json!([]), "{body}");
    for id in [a, b] {
        let job = target.job(id).await;
        assert_eq!(job["enabled"], true);
        assert_eq!(job["pausedReason"], Value::Null);
        assert_eq!(job["pausedBy"], Value::Null);
        assert_eq!(target.audits(id, "job.enable").await.len(), 1);
    }
    assert_eq!(target.job(c).await["enabled"], false);

    // Validation: each problem named, in the request's language.
    let past = (Utc::now() - chrono::Duration::seconds(1)).to_rfc3339();
    let future = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let long = "停".repeat(501);
    let cases = [
        (
            json!({"enabled": false, "until": past}),
            "until",
            "must be in the future",
            "必须是将来的时间",
        ),
        (
            json!({"enabled": true, "until": future}),
            "until",
            "only accepted with enabled: false",
            "只能在停用",
        ),
        (
            json!({"enabled": true, "reason": "x"}),
            "reason",
            "only accepted with enabled: false",
            "只能在停用",
        ),
        (
            json!({"enabled": false, "reason": long}),
            "reason",
            "at most 500 characters",
            "最多 500 个字",
        ),
        (
            json!({"enabled": false, "until": "tomorrow"}),
            "until",
            "RFC 3339",
            "RFC 3339",
        ),
        (
            json!({"enabled": false, "reason": 5}),
            "reason",
            "must be a string",
            "字符串",
        ),
    ];
    for (body, field, en, zh) in &cases {
        for (lang, text) in [("en", en), ("zh-CN", zh)] {
            let (status, problem) = target.set_enabled(a, body.clone(), lang).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body} {problem}");
            assert_eq!(problem["errors"][0]["field"], *field, "{problem}");
            let message = problem["errors"][0]["message"].as_str().unwrap_or("");
            assert!(message.contains(*text), "{lang}: {problem}");
            let mut batch = body.clone();
            batch["ids"] = json!([a]);
            let (status, problem) = target.batch(batch, lang).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
            assert_eq!(problem["errors"][0]["field"], *field, "{problem}");
        }
    }
    let batch_cases = [
        (
            json!({"ids": [a], "group": "nightly", "enabled": false}),
            "group",
            "not both",
        ),
        (json!({"enabled": false}), "ids", "ids or group"),
        (json!({"ids": [], "enabled": false}), "ids", "1 to 1000 ids"),
        (
            json!({"group": "nope", "enabled": false}),
            "group",
            "does not exist",
        ),
        (json!({"ids": [a]}), "enabled", "required"),
    ];
    for (body, field, en) in batch_cases {
        let (status, problem) = target.batch(body.clone(), "en").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} {problem}");
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
        let message = problem["errors"][0]["message"].as_str().unwrap_or("");
        assert!(message.contains(en), "{problem}");
    }
    // Nothing was written by a refused request.
    assert_eq!(target.job(a).await["enabled"], true);

    // Permission: the same as the single enable route.
    let browse = token(&["scheduler.task.browse"]);
    let (status, _) = target
        .send(
            reqwest::Method::PUT,
            &format!("/api/jobs/{a}/enabled"),
            &browse,
            "en",
            Some(json!({"enabled": false, "reason": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = target
        .send(
            reqwest::Method::POST,
            "/api/jobs/batch-enabled",
            &browse,
            "en",
            Some(json!({"ids": [a], "enabled": false})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let modify = token(&["scheduler.task.modify"]);
    let (status, body) = target
        .send(
            reqwest::Method::POST,
            "/api/jobs/batch-enabled",
            &modify,
            "en",
            Some(json!({"ids": [a], "enabled": false, "until": future})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["updated"], json!([a]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_validation_and_permission_on_sqlite() {
    let server = Server::start();
    batches_and_rules(&Target::of(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_validation_and_permission_on_postgres() {
    let server = Server::start_with(Db::Postgres, &[]);
    batches_and_rules(&Target::of(&server).await).await;
}
