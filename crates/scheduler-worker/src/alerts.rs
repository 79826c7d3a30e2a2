//! Timeout alerts (SPEC §8): when an attempt runs past its timeout, the
//! engine calls [`raise_timeout_alert`], which renders the editable template
//! `scheduler.timeout_alert` into the super administrators' inbox and, when
//! a webhook URL is configured, queues its delivery in the same transaction.
//!
//! Alerts of one job are coalesced: at most one per [`COALESCE_WINDOW`],
//! the next one saying how many were folded into it (a job timing out every
//! second with ten retries would otherwise send eleven alerts a second).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use qiwu_domain::notify::{self, SUPER_ADMINS, TIMEOUT_ALERT};
use qiwu_domain::settings;
use qiwu_storage::{Admission, NewNotification, NotificationRecord, Store, TemplateTexts};
use serde_json::json;

use crate::WorkerError;

/// At most one timeout alert per job within this window.
pub const COALESCE_WINDOW: chrono::Duration = chrono::Duration::minutes(10);

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
        }
    }
}

/// Stores the alert in the `super_admins` inbox (title and body in Chinese,
/// the platform's default language) and, when `notify.webhook_url` is set,
/// queues its webhook delivery atomically with it.
pub async fn raise_timeout_alert(store: &Store, alert: &TimeoutAlert) -> Result<(), WorkerError> {
    raise_timeout_alert_at(store, alert, Utc::now()).await?;
    Ok(())
}

/// [`raise_timeout_alert`] at a given time; returns the stored notification
/// and whether a delivery was queued, or `None` when the alert was folded
/// into the next one of its job.
pub async fn raise_timeout_alert_at(
    store: &Store,
    alert: &TimeoutAlert,
    now: DateTime<Utc>,
) -> Result<Option<(NotificationRecord, bool)>, WorkerError> {
    let key = format!("timeout:{}", alert.job_id);
    let folded = match store
        .alert_windows()
        .admit(&key, now, COALESCE_WINDOW)
        .await?
    {
        Admission::Send { folded } => folded,
        Admission::Fold => {
            tracing::info!(job = alert.job_id, "timeout alert folded into the next one");
            return Ok(None);
        }
    };
    let texts = match store.templates().get(TIMEOUT_ALERT).await? {
        Some(t) => TemplateTexts {
            title_zh: t.title_zh,
            body_zh: t.body_zh,
            title_en: t.title_en,
            body_en: t.body_en,
        },
        None => {
            // Not seeded (or removed by hand): an alert must not be lost
            // for want of a template, so the built-in text is used.
            tracing::warn!(
                template = TIMEOUT_ALERT,
                "template missing; using the built-in text"
            );
            default_texts()?
        }
    };
    let started = format!(
        "{} ({})",
        alert
            .started_at
            .with_timezone(&alert.timezone)
            .format("%Y-%m-%d %H:%M:%S"),
        alert.timezone.name()
    );
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
    let mut body = notify::render(&texts.body_zh, &vars);
    if folded > 0 {
        body.push_str(&format!(
            "\n（此前 10 分钟内该任务另有 {folded} 次超时，已合并到本条提醒。）"
        ));
    }
    let new = NewNotification {
        recipient: SUPER_ADMINS.to_owned(),
        template_code: TIMEOUT_ALERT.to_owned(),
        title: notify::render(&texts.title_zh, &vars),
        body,
    };
    let webhook = store.settings().get(settings::WEBHOOK_URL).await?;
    let deliver = settings::webhook_url(webhook.as_ref().map(|s| s.value.as_str())).is_some();
    let notifications = store.notifications();
    let stored = if deliver {
        let tz = alert.timezone;
        notifications
            .create_with_delivery(&new, |n| webhook_payload(n, tz), now)
            .await?
            .0
    } else {
        notifications.create(&new, now).await?
    };
    tracing::info!(
        job = alert.job_id,
        notification = stored.id,
        queued = deliver,
        folded,
        "timeout alert raised"
    );
    Ok(Some((stored, deliver)))
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

fn default_texts() -> Result<TemplateTexts, WorkerError> {
    notify::find(TIMEOUT_ALERT)
        .map(TemplateTexts::from)
        .ok_or_else(|| WorkerError::Seed {
            key: TIMEOUT_ALERT.to_owned(),
            reason: "the template is not defined".to_owned(),
        })
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
}
