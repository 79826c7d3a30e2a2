//! Alerts (SPEC §8, issue 10): timeout alerts, raised by the engine on
//! every timed-out attempt ([`raise_timeout_alert`]), and the failure,
//! consecutive-failure and recovery alerts of a job's policy, decided when a
//! fire's final end is recorded ([`fire_ended`]).
//!
//! Every alert renders its editable template into a notification and goes
//! to the job's alert channels, or the default ones when it names none, or
//! the super administrators' inbox when no default is set (today's
//! behaviour). The inbox keeps the notification (with its
//! `notify.webhook_url` delivery when that is set); every other channel gets
//! an outbox row with its platform's message, written in the same
//! transaction, which `notify.dispatch` delivers (leases, 3 attempts).
//!
//! A job whose calendar runs out of data for a coming year raises one
//! alert per job, calendar and year ([`raise_calendar_alert`]).
//!
//! Alerts of one kind of one job are coalesced: at most one per
//! [`COALESCE_WINDOW`], the next one saying how many were folded into it (a
//! job timing out every second with ten retries would otherwise send eleven
//! alerts a second).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::alert::{self, AlertKind, ChannelKind, FireEnd};
use qiwu_domain::notify::{self, CALENDAR_DATA_ALERT, SUPER_ADMINS, TIMEOUT_ALERT};
use qiwu_domain::schedule::CalendarNotice;
use qiwu_domain::settings;
use qiwu_storage::{
    Admission, ChannelRecord, NewNotification, NotificationRecord, Store, TemplateTexts,
};
use serde_json::json;

use crate::WorkerError;
use crate::handlers::robots;

/// At most one alert of a kind per job within this window.
pub const COALESCE_WINDOW: chrono::Duration = chrono::Duration::minutes(10);

/// The recipient of an alert that goes to no inbox (only to robots or
/// webhooks): kept for the record and purged with the rest, never listed.
pub const ALERT_ARCHIVE: &str = "alert_archive";

/// Longest error summary put in an alert.
const MAX_ERROR_SUMMARY_CHARS: usize = 300;

/// What the engine knows about the attempt that timed out.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeoutAlert {
    pub job_id: i64,
    pub job_name: String,
    pub handler: String,
    pub timeout_ms: i64,
    pub started_at: DateTime<Utc>,
    pub attempt: u32,
    /// The zone the start time is written in (the job's, else `QIWU_TIMEZONE`).
    pub timezone: Tz,
    /// The job's alert channels (empty: the default ones).
    pub channels: Vec<i64>,
}

/// The engine's facts about a timed-out attempt are exactly an alert's.
impl From<crate::engine::TimeoutInfo> for TimeoutAlert {
    fn from(i: crate::engine::TimeoutInfo) -> TimeoutAlert {
        TimeoutAlert {
            job_id: i.job_id,
            job_name: i.job_name,
            handler: i.handler,
            timeout_ms: i.timeout_ms,
            started_at: i.started_at,
            attempt: i.attempt,
            timezone: i.timezone,
            channels: i.channels,
        }
    }
}

/// Raises the alert of a timed-out attempt (see [`raise_timeout_alert_at`]).
pub async fn raise_timeout_alert(store: &Store, alert: &TimeoutAlert) -> Result<(), WorkerError> {
    raise_timeout_alert_at(store, alert, Utc::now()).await?;
    Ok(())
}

/// [`raise_timeout_alert`] at a given time; returns the stored notification
/// and whether a `notify.webhook_url` delivery was queued, or `None` when
/// the alert was folded into the next one of its job.
pub async fn raise_timeout_alert_at(
    store: &Store,
    alert: &TimeoutAlert,
    now: DateTime<Utc>,
) -> Result<Option<(NotificationRecord, bool)>, WorkerError> {
    let started = written_in(alert.started_at, alert.timezone);
    let job_id = alert.job_id.to_string();
    let timeout_ms = alert.timeout_ms.to_string();
    let attempt = alert.attempt.to_string();
    let vars = [
        ("jobName", alert.job_name.as_str()),
        ("jobId", job_id.as_str()),
        ("handler", alert.handler.as_str()),
        ("timeoutMs", timeout_ms.as_str()),
        ("startedAt", started.as_str()),
        ("attempt", attempt.as_str()),
    ];
    let raised = raise(
        store,
        &Raise {
            template: TIMEOUT_ALERT,
            key: format!("timeout:{}", alert.job_id),
            job_id: alert.job_id,
            vars: &vars,
            folded_word: "超时",
            channels: &alert.channels,
            timezone: alert.timezone,
        },
        now,
    )
    .await?;
    Ok(raised.map(|r| (r.notification, r.webhook_url_queued)))
}

/// Raises the alert that a job's calendar has no data for a year its
/// schedule is about to reach, once per job, calendar and year across the
/// cluster and restarts (a seed marker remembers it). `None` when it was
/// raised before (or the job is gone).
pub async fn raise_calendar_alert(
    store: &Store,
    job_id: i64,
    notice: &CalendarNotice,
    timezone: Tz,
    now: DateTime<Utc>,
) -> Result<Option<NotificationRecord>, WorkerError> {
    let marker = format!(
        "calendar-data-alert:{job_id}:{}:{}",
        notice.calendar, notice.year
    );
    if store.is_seeded(&marker).await? {
        return Ok(None);
    }
    let Some(job) = store.jobs().get(job_id).await? else {
        return Ok(None);
    };
    if !store.mark_seed_once(&marker, now).await? {
        return Ok(None);
    }
    let job_id = job.id.to_string();
    let year = notice.year.to_string();
    let text = notice.message(qiwu_domain::Lang::Zh);
    let vars = [
        ("jobName", job.name.as_str()),
        ("jobId", job_id.as_str()),
        ("handler", job.handler.as_str()),
        ("calendar", notice.calendar.as_str()),
        ("year", year.as_str()),
        ("notice", text.as_str()),
    ];
    let raised = raise(
        store,
        &Raise {
            template: CALENDAR_DATA_ALERT,
            key: format!("calendar:{}:{}", job.id, notice.year),
            job_id: job.id,
            vars: &vars,
            folded_word: "日历数据缺失",
            channels: &job.alert.channels,
            timezone,
        },
        now,
    )
    .await?;
    Ok(raised.map(|r| r.notification))
}

/// How a fire ended, for its alert.
#[derive(Debug, Clone, PartialEq)]
pub struct FireEndFacts {
    pub job_id: i64,
    pub end: FireEnd,
    /// The run status as the run log writes it (`failed`, `timeout`…).
    pub status: String,
    pub error: String,
    pub attempt: u32,
    pub run_id: i64,
    pub finished_at: DateTime<Utc>,
    pub timezone: Tz,
}

/// What [`fire_ended`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct FireEndAlert {
    pub kind: AlertKind,
    /// `None` when the alert was folded into the next one of its kind.
    pub notification: Option<NotificationRecord>,
}

/// Moves the job's alert state by its policy (`qiwu_domain::alert::decide`,
/// in one locked read-decide-write) and raises the alert it decides.
/// `None` when nothing is raised (or the job is gone).
pub async fn fire_ended(
    store: &Store,
    facts: &FireEndFacts,
    now: DateTime<Utc>,
) -> Result<Option<FireEndAlert>, WorkerError> {
    let Some((job, decision)) = store
        .jobs()
        .alert_transition(facts.job_id, |policy, state| {
            alert::decide(policy, state, facts.end)
        })
        .await?
    else {
        return Ok(None);
    };
    let Some(kind) = decision.alert else {
        return Ok(None);
    };
    // The streak an alert speaks of: the one that just grew, or (for a
    // recovery) the one that just ended.
    let failures = match kind {
        AlertKind::Recovery => job.alert_state.failed_in_a_row,
        _ => decision.next.failed_in_a_row,
    }
    .to_string();
    let job_id = job.id.to_string();
    let attempt = facts.attempt.to_string();
    let time = written_in(facts.finished_at, facts.timezone);
    let run_id = facts.run_id.to_string();
    let link_setting = store.settings().get(settings::RUN_LINK).await?;
    let run_link = settings::run_link(
        link_setting.as_ref().map(|s| s.value.as_str()),
        facts.run_id,
        job.id,
    );
    let error = error_summary(&facts.error);
    let vars = [
        ("jobName", job.name.as_str()),
        ("jobId", job_id.as_str()),
        ("handler", job.handler.as_str()),
        ("status", facts.status.as_str()),
        ("error", error.as_str()),
        ("attempt", attempt.as_str()),
        ("time", time.as_str()),
        ("runId", run_id.as_str()),
        ("runLink", run_link.as_str()),
        ("failures", failures.as_str()),
    ];
    let raised = raise(
        store,
        &Raise {
            template: kind.template(),
            key: format!("{}:{}", kind.as_str(), job.id),
            job_id: job.id,
            vars: &vars,
            folded_word: match kind {
                AlertKind::Failure => "失败",
                AlertKind::ConsecutiveFailures => "连续失败告警",
                AlertKind::Recovery => "恢复",
            },
            channels: &job.alert.channels,
            timezone: facts.timezone,
        },
        now,
    )
    .await?;
    Ok(Some(FireEndAlert {
        kind,
        notification: raised.map(|r| r.notification),
    }))
}

/// One alert to raise.
struct Raise<'a> {
    template: &'static str,
    /// The coalescing key: one kind of alert of one job.
    key: String,
    job_id: i64,
    vars: &'a [(&'a str, &'a str)],
    /// What the fold note counts (`超时`, `失败`…).
    folded_word: &'static str,
    channels: &'a [i64],
    timezone: Tz,
}

struct Raised {
    notification: NotificationRecord,
    webhook_url_queued: bool,
}

/// Renders and stores one alert with its deliveries; `None` when folded.
async fn raise(
    store: &Store,
    alert: &Raise<'_>,
    now: DateTime<Utc>,
) -> Result<Option<Raised>, WorkerError> {
    let folded = match store
        .alert_windows()
        .admit(&alert.key, now, COALESCE_WINDOW)
        .await?
    {
        Admission::Send { folded } => folded,
        Admission::Fold => {
            tracing::info!(job = alert.job_id, key = %alert.key, "alert folded into the next one");
            return Ok(None);
        }
    };
    let texts = template_texts(store, alert.template).await?;
    let title = notify::render(&texts.title_zh, alert.vars);
    let mut body = notify::render(&texts.body_zh, alert.vars);
    if folded > 0 {
        body.push_str(&format!(
            "\n（此前 10 分钟内该任务另有 {folded} 次{}，已合并到本条提醒。）",
            alert.folded_word
        ));
    }
    let channels = store.alert_channels().resolve(alert.channels).await?;
    // No channel applies: the inbox, as before channels existed.
    let inbox = channels.is_empty() || channels.iter().any(|c| c.kind == ChannelKind::Inbox);
    let robots: Vec<&ChannelRecord> = channels
        .iter()
        .filter(|c| c.kind != ChannelKind::Inbox)
        .collect();
    let webhook_url_queued = inbox && {
        let raw = store.settings().get(settings::WEBHOOK_URL).await?;
        settings::webhook_url(raw.as_ref().map(|s| s.value.as_str())).is_some()
    };
    let mut targets: Vec<Option<i64>> = Vec::with_capacity(robots.len() + 1);
    if webhook_url_queued {
        targets.push(None);
    }
    targets.extend(robots.iter().map(|c| Some(c.id)));
    let new = NewNotification {
        recipient: if inbox { SUPER_ADMINS } else { ALERT_ARCHIVE }.to_owned(),
        template_code: alert.template.to_owned(),
        title: title.clone(),
        body: body.clone(),
    };
    let tz = alert.timezone;
    let payload = |target: Option<i64>, n: &NotificationRecord| {
        let kind = target.and_then(|id| robots.iter().find(|c| c.id == id).map(|c| c.kind));
        match kind {
            Some(ChannelKind::Dingtalk) => robots::dingtalk_body(&title, &body),
            Some(ChannelKind::Wecom) => robots::wecom_body(&title, &body),
            Some(ChannelKind::Feishu) => robots::feishu_body(&title, &body),
            // The generic webhook gets what `notify.webhook_url` gets.
            _ => webhook_payload(n, tz),
        }
    };
    let (stored, _) = store
        .notifications()
        .create_with_deliveries(&new, &targets, payload, now)
        .await?;
    tracing::info!(
        job = alert.job_id,
        template = alert.template,
        notification = stored.id,
        deliveries = targets.len(),
        folded,
        "alert raised"
    );
    Ok(Some(Raised {
        notification: stored,
        webhook_url_queued,
    }))
}

/// The stored texts of a template, or its built-in ones when it is missing.
async fn template_texts(store: &Store, code: &str) -> Result<TemplateTexts, WorkerError> {
    if let Some(t) = store.templates().get(code).await? {
        return Ok(TemplateTexts {
            title_zh: t.title_zh,
            body_zh: t.body_zh,
            title_en: t.title_en,
            body_en: t.body_en,
        });
    }
    // Not seeded (or removed by hand): an alert must not be lost for want
    // of a template, so the built-in text is used.
    tracing::warn!(template = code, "template missing; using the built-in text");
    notify::find(code)
        .map(TemplateTexts::from)
        .ok_or_else(|| WorkerError::Seed {
            key: code.to_owned(),
            reason: "the template is not defined".to_owned(),
        })
}

/// A time as alerts write it: `2026-03-01 08:00:05 (Asia/Shanghai)`.
fn written_in(at: DateTime<Utc>, tz: Tz) -> String {
    format!(
        "{} ({})",
        at.with_timezone(&tz).format("%Y-%m-%d %H:%M:%S"),
        tz.name()
    )
}

/// The first line of an error, cut to a few hundred characters; `-` for none.
fn error_summary(error: &str) -> String {
    let line = error
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.is_empty() {
        return "-".to_owned();
    }
    let mut out: String = line.chars().take(MAX_ERROR_SUMMARY_CHARS).collect();
    if line.chars().count() > MAX_ERROR_SUMMARY_CHARS {
        out.push('…');
    }
    out
}

/// The JSON body `notify.dispatch` POSTs for a notification.
pub fn webhook_payload(n: &NotificationRecord, tz: Tz) -> String {
    json!({
        "notificationId": n.id,
        "template": n.template_code,
        "recipient": n.recipient,
        "title": n.title,
        "body": n.body,
        "createdAt": n.created_at.with_timezone(&tz).to_rfc3339(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use qiwu_storage::OutboxStatus;

    use super::*;
    use crate::test_support::test_store;

    fn alert() -> TimeoutAlert {
        TimeoutAlert {
            job_id: 7,
            job_name: "夜间报表".into(),
            handler: "demo.echo".into(),
            timeout_ms: 60_000,
            started_at: Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 5).unwrap(),
            attempt: 2,
            timezone: chrono_tz::Asia::Shanghai,
            channels: vec![],
        }
    }

    #[tokio::test]
    async fn renders_the_seeded_template_in_the_zone_into_the_inbox() {
        let store = test_store().await;
        store.templates().seed_defaults(Utc::now()).await.unwrap();
        let (n, queued) = raise_timeout_alert_at(&store, &alert(), Utc::now())
            .await
            .unwrap()
            .expect("sent");
        assert!(!queued, "no webhook configured");
        assert_eq!(n.recipient, "super_admins");
        assert_eq!(n.template_code, "scheduler.timeout_alert");
        assert_eq!(n.title, "任务超时：夜间报表");
        for part in [
            "demo.echo",
            "60000 毫秒",
            "2026-03-01 08:00:05 (Asia/Shanghai)",
            "第 2 次尝试",
        ] {
            assert!(n.body.contains(part), "{part} in {}", n.body);
        }
        assert_eq!(store.outbox().count_unfinished().await.unwrap(), 0);
    }

    #[tokio::test]
    async fn queues_a_delivery_when_a_webhook_is_set() {
        let store = test_store().await;
        store
            .settings()
            .set(
                "notify.webhook_url",
                "https://hooks.example.com/q",
                "t",
                Utc::now(),
            )
            .await
            .unwrap();
        let (n, queued) = raise_timeout_alert_at(&store, &alert(), Utc::now())
            .await
            .unwrap()
            .expect("sent");
        assert!(queued);
        let claimed = store
            .outbox()
            .claim_due(Utc::now(), chrono::Duration::minutes(1), 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].status, OutboxStatus::Sending);
        let payload: serde_json::Value = serde_json::from_str(&claimed[0].payload).unwrap();
        assert_eq!(payload["notificationId"], n.id);
        assert_eq!(payload["title"], "任务超时：夜间报表");
        assert_eq!(payload["template"], "scheduler.timeout_alert");
        assert!(payload["createdAt"].as_str().unwrap().ends_with("+08:00"));
    }

    #[tokio::test]
    async fn uses_an_edited_template_and_survives_a_missing_one() {
        let store = test_store().await;
        // Not seeded: the built-in text is used.
        let (n, _) = raise_timeout_alert_at(&store, &alert(), Utc::now())
            .await
            .unwrap()
            .expect("sent");
        assert_eq!(n.title, "任务超时：夜间报表");

        store.templates().seed_defaults(Utc::now()).await.unwrap();
        let edited = TemplateTexts {
            title_zh: "【超时】{jobName}#{jobId}".into(),
            body_zh: "{handler} 超过 {timeoutMs}ms".into(),
            title_en: "Timeout".into(),
            body_en: "Timeout".into(),
        };
        store
            .templates()
            .update("scheduler.timeout_alert", &edited, "admin", Utc::now())
            .await
            .unwrap();
        // A job name that looks like a placeholder is not expanded again.
        let odd = TimeoutAlert {
            job_id: 8,
            job_name: "{handler}".into(),
            ..alert()
        };
        raise_timeout_alert(&store, &odd).await.unwrap();
        let page = store
            .notifications()
            .list("super_admins", false, 1, None)
            .await
            .unwrap();
        assert_eq!(page.items[0].title, "【超时】{handler}#8");
        assert_eq!(page.items[0].body, "demo.echo 超过 60000ms");
    }

    #[tokio::test]
    async fn a_storm_of_timeouts_is_one_alert_per_window_with_a_count() {
        let store = test_store().await;
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        let at = |s: i64| t0 + chrono::Duration::seconds(s);
        // Eleven timeouts in the first second (ten retries): one alert.
        let mut sent = 0;
        for i in 0..11 {
            if raise_timeout_alert_at(&store, &alert(), at(0) + chrono::Duration::milliseconds(i))
                .await
                .unwrap()
                .is_some()
            {
                sent += 1;
            }
        }
        assert_eq!(sent, 1);
        // Another job is not held back by this one.
        let other = TimeoutAlert {
            job_id: 9,
            ..alert()
        };
        assert!(
            raise_timeout_alert_at(&store, &other, at(1))
                .await
                .unwrap()
                .is_some()
        );
        // Still inside the window: folded.
        assert!(
            raise_timeout_alert_at(&store, &alert(), at(599))
                .await
                .unwrap()
                .is_none()
        );
        // The window is over: the next alert says how many it stands for.
        let (n, _) = raise_timeout_alert_at(&store, &alert(), at(601))
            .await
            .unwrap()
            .expect("sent");
        assert!(n.body.contains("另有 11 次超时"), "{}", n.body);
        // And the count starts again.
        assert!(
            raise_timeout_alert_at(&store, &alert(), at(602))
                .await
                .unwrap()
                .is_none()
        );
    }

    // -----------------------------------------------------------------
    // Fire-end alerts
    // -----------------------------------------------------------------

    use qiwu_domain::alert::{AlertPolicy, ChannelSpec};
    use qiwu_storage::{JobRecord, NewJob};

    async fn job(store: &Store, alert: AlertPolicy) -> JobRecord {
        store
            .jobs()
            .create(
                &NewJob {
                    name: "报表".into(),
                    group: "default".into(),
                    handler: "demo.echo".into(),
                    params: json!({}),
                    cron: "0 0 0 * * *".into(),
                    timezone: None,
                    enabled: true,
                    retry_count: 2,
                    retry_interval_ms: 0,
                    timeout_ms: 0,
                    allow_concurrent: false,
                    misfire_policy: "skip".into(),
                    remark: String::new(),
                    builtin_key: None,
                    retry_backoff: "fixed".into(),
                    retry_max_interval_ms: 3_600_000,
                    retry_jitter: false,
                    overlap_policy: "skip".into(),
                    alert,
                    time_rules: Default::default(),
                },
                "t",
                Utc::now(),
            )
            .await
            .unwrap()
    }

    fn facts(job_id: i64, end: FireEnd, run_id: i64) -> FireEndFacts {
        FireEndFacts {
            job_id,
            end,
            status: match end {
                FireEnd::Success => "success",
                FireEnd::Timeout => "timeout",
                _ => "failed",
            }
            .into(),
            error: "连接被拒绝\nConnection refused".into(),
            attempt: 3,
            run_id,
            finished_at: Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 5).unwrap(),
            timezone: chrono_tz::Asia::Shanghai,
        }
    }

    #[tokio::test]
    async fn default_policy_raises_nothing_but_keeps_the_streak() {
        let store = test_store().await;
        let j = job(&store, AlertPolicy::default()).await;
        for run in 1..=3 {
            let got = fire_ended(&store, &facts(j.id, FireEnd::Failed, run), Utc::now())
                .await
                .unwrap();
            assert_eq!(got, None);
        }
        let stored = store.jobs().get(j.id).await.unwrap().unwrap();
        assert_eq!(stored.alert_state.failed_in_a_row, 3);
        assert_eq!(store.outbox().count_unfinished().await.unwrap(), 0);
        assert!(
            store
                .notifications()
                .list("super_admins", false, 10, None)
                .await
                .unwrap()
                .items
                .is_empty()
        );
        // A job that is gone raises nothing.
        assert_eq!(
            fire_ended(&store, &facts(999, FireEnd::Failed, 1), Utc::now())
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn failure_streak_and_recovery_render_their_templates_in_the_inbox() {
        let store = test_store().await;
        store.templates().seed_defaults(Utc::now()).await.unwrap();
        let j = job(
            &store,
            AlertPolicy {
                on_failure: true,
                after_consecutive_failures: 2,
                on_recovery: true,
                channels: vec![],
            },
        )
        .await;
        let t0 = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        let first = fire_ended(&store, &facts(j.id, FireEnd::Failed, 41), t0)
            .await
            .unwrap()
            .expect("alert");
        assert_eq!(first.kind, AlertKind::Failure);
        let n = first.notification.expect("sent");
        assert_eq!(n.recipient, "super_admins");
        assert_eq!(n.template_code, "scheduler.failure_alert");
        assert_eq!(n.title, "任务失败：报表");
        for part in [
            "demo.echo",
            "结果：failed",
            "共 3 次尝试",
            "2026-03-01 08:00:05 (Asia/Shanghai)",
            "错误摘要：连接被拒绝。",
            "执行记录：41（/api/runs/41）",
        ] {
            assert!(n.body.contains(part), "{part} in {}", n.body);
        }
        let second = fire_ended(&store, &facts(j.id, FireEnd::Timeout, 42), t0)
            .await
            .unwrap()
            .expect("alert");
        assert_eq!(second.kind, AlertKind::ConsecutiveFailures);
        let n = second.notification.expect("sent");
        assert_eq!(n.title, "任务连续失败 2 次：报表");
        // The third failure's alert falls in the failure alert's window.
        let third = fire_ended(&store, &facts(j.id, FireEnd::Failed, 43), t0)
            .await
            .unwrap()
            .expect("alert");
        assert_eq!((third.kind, third.notification), (AlertKind::Failure, None));
        let back = fire_ended(&store, &facts(j.id, FireEnd::Success, 44), t0)
            .await
            .unwrap()
            .expect("alert");
        assert_eq!(back.kind, AlertKind::Recovery);
        let n = back.notification.expect("sent");
        assert_eq!(n.title, "任务已恢复：报表");
        assert!(n.body.contains("连续 3 次失败后"), "{}", n.body);
        // After the window, the next failure alert counts the folded one.
        let later = t0 + chrono::Duration::minutes(11);
        let n = fire_ended(&store, &facts(j.id, FireEnd::Failed, 45), later)
            .await
            .unwrap()
            .and_then(|a| a.notification)
            .expect("sent");
        assert!(n.body.contains("另有 1 次失败"), "{}", n.body);
        // A success with nothing alerted since is quiet.
        let recovered = fire_ended(&store, &facts(j.id, FireEnd::Success, 46), later)
            .await
            .unwrap();
        assert_eq!(recovered.map(|a| a.kind), Some(AlertKind::Recovery));
        assert_eq!(
            fire_ended(&store, &facts(j.id, FireEnd::Success, 47), later)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn channels_get_their_platform_message_and_the_inbox_its_notification() {
        let store = test_store().await;
        let channel = |name: &str, kind, url: Option<&str>, is_default| ChannelSpec {
            name: name.into(),
            kind,
            enabled: true,
            is_default,
            url: url.map(str::to_owned),
            secret: Some(None),
        };
        let repo = store.alert_channels();
        let ding = repo
            .create(
                &channel(
                    "d",
                    ChannelKind::Dingtalk,
                    Some("https://d/robot/send?access_token=t"),
                    true,
                ),
                "a",
                Utc::now(),
            )
            .await
            .unwrap();
        let inbox = repo
            .create(
                &channel("i", ChannelKind::Inbox, None, true),
                "a",
                Utc::now(),
            )
            .await
            .unwrap();
        let feishu = repo
            .create(
                &channel(
                    "f",
                    ChannelKind::Feishu,
                    Some("https://f/open-apis/bot/v2/hook/x"),
                    false,
                ),
                "a",
                Utc::now(),
            )
            .await
            .unwrap();
        store
            .settings()
            .set(
                "notify.webhook_url",
                "https://hooks.example.com/q",
                "t",
                Utc::now(),
            )
            .await
            .unwrap();
        store
            .settings()
            .set(
                "notify.run_link",
                "https://admin.example.com/runs/{runId}",
                "t",
                Utc::now(),
            )
            .await
            .unwrap();
        let policy = AlertPolicy {
            on_failure: true,
            ..AlertPolicy::default()
        };
        // No channel named: the default ones (DingTalk and the inbox, which
        // brings the webhook URL's delivery).
        let a = job(&store, policy.clone()).await;
        let n = fire_ended(&store, &facts(a.id, FireEnd::Failed, 1), Utc::now())
            .await
            .unwrap()
            .and_then(|x| x.notification)
            .expect("sent");
        assert_eq!(n.recipient, "super_admins");
        let rows = store
            .outbox()
            .claim_due(Utc::now(), chrono::Duration::minutes(1), 10)
            .await
            .unwrap();
        let mut targets: Vec<Option<i64>> = rows.iter().map(|r| r.channel_id).collect();
        targets.sort();
        assert_eq!(targets, [None, Some(ding.id)]);
        let ding_row = rows.iter().find(|r| r.channel_id == Some(ding.id)).unwrap();
        let body: serde_json::Value = serde_json::from_str(&ding_row.payload).unwrap();
        assert_eq!(body["msgtype"], "markdown");
        assert_eq!(body["markdown"]["title"], "任务失败：报表");
        let text = body["markdown"]["text"].as_str().unwrap();
        assert!(
            text.contains("（https://admin.example.com/runs/1）"),
            "{text}"
        );
        let _ = inbox;
        // A job naming only Feishu: no inbox, no webhook URL delivery.
        let b = store
            .jobs()
            .create(
                &NewJob {
                    name: "只发飞书".into(),
                    group: "default".into(),
                    handler: "demo.echo".into(),
                    params: json!({}),
                    cron: "0 0 0 * * *".into(),
                    timezone: None,
                    enabled: true,
                    retry_count: 0,
                    retry_interval_ms: 0,
                    timeout_ms: 0,
                    allow_concurrent: false,
                    misfire_policy: "skip".into(),
                    remark: String::new(),
                    builtin_key: None,
                    retry_backoff: "fixed".into(),
                    retry_max_interval_ms: 3_600_000,
                    retry_jitter: false,
                    overlap_policy: "skip".into(),
                    alert: AlertPolicy {
                        channels: vec![feishu.id],
                        ..policy
                    },
                    time_rules: Default::default(),
                },
                "t",
                Utc::now(),
            )
            .await
            .unwrap();
        let n = fire_ended(&store, &facts(b.id, FireEnd::Failed, 2), Utc::now())
            .await
            .unwrap()
            .and_then(|x| x.notification)
            .expect("sent");
        assert_eq!(n.recipient, ALERT_ARCHIVE);
        let rows = store
            .outbox()
            .claim_due(Utc::now(), chrono::Duration::minutes(1), 10)
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].channel_id, Some(feishu.id));
        let body: serde_json::Value = serde_json::from_str(&rows[0].payload).unwrap();
        assert_eq!(body["msg_type"], "text");
        assert!(
            body["content"]["text"]
                .as_str()
                .unwrap()
                .starts_with("任务失败：只发飞书\n")
        );
    }

    #[test]
    fn error_summaries_are_one_short_line() {
        assert_eq!(error_summary(""), "-");
        assert_eq!(error_summary("\n  \n"), "-");
        assert_eq!(error_summary("  第一行 \nsecond"), "第一行");
        let long = "错".repeat(400);
        let cut = error_summary(&long);
        assert_eq!(cut.chars().count(), MAX_ERROR_SUMMARY_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
