//! `audit.purge`: deletes, in batches, runs (soft-deleted ones included),
//! audit entries and notifications (with their outbox rows) older than the
//! `audit.retention_days` setting (1–36 500; anything invalid means 180),
//! and run-once `Idempotency-Key`s older than their 24 hours.
//! Batches keep each statement's locks short; the stop signal is obeyed
//! between batches.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use qiwu_domain::run_once::KEY_TTL_HOURS;
use qiwu_domain::settings::{self, RETENTION_DAYS};
use qiwu_storage::{StorageError, Store};
use serde_json::{Map, Value};

use super::{Handler, HandlerFuture};
use crate::clock::{Clock, SystemClock};
use crate::context::RunContext;

/// Rows per delete statement in production (SPEC §7).
pub const DEFAULT_BATCH: u64 = 5_000;

/// The `audit.purge` handler.
pub struct Purge {
    store: Store,
    batch: u64,
    clock: Arc<dyn Clock>,
}

impl Purge {
    /// `batch` rows per statement (at least 1); tests use small batches.
    pub fn new(store: Store, batch: u64) -> Purge {
        Purge {
            store,
            batch: batch.max(1),
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads "now" from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Purge {
        self.clock = clock;
        self
    }
}

/// Rows deleted so far, per table.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    runs: u64,
    audit_logs: u64,
    notifications: u64,
    outbox: u64,
    fires: u64,
}

impl Counts {
    fn summary(&self) -> String {
        format!(
            "deleted runs {}, audit_logs {}, notifications {}, outbox {}, fires {}",
            self.runs, self.audit_logs, self.notifications, self.outbox, self.fires
        )
    }
}

impl Handler for Purge {
    fn run(&self, _params: Map<String, Value>, ctx: RunContext) -> HandlerFuture {
        let store = self.store.clone();
        let batch = self.batch;
        let now = self.clock.now();
        Box::pin(async move { purge(&store, batch, now, &ctx).await })
    }
}

/// Why a purge ended early, with what it had deleted by then.
fn storage_failed(e: StorageError, so_far: &Counts) -> String {
    format!("storage failed ({e:?}); {}", so_far.summary())
}

fn stopped(so_far: &Counts) -> String {
    format!("stopped between batches; {}", so_far.summary())
}

async fn purge(
    store: &Store,
    batch: u64,
    now: DateTime<Utc>,
    ctx: &RunContext,
) -> Result<String, String> {
    let mut counts = Counts::default();
    let raw = store
        .settings()
        .get(RETENTION_DAYS)
        .await
        .map_err(|e| storage_failed(e, &counts))?;
    let days = settings::retention_days(raw.as_ref().map(|s| s.value.as_str()));
    if let Some(raw) = &raw
        && raw.value.trim() != days.to_string()
    {
        ctx.log.line(format!(
            "setting {RETENTION_DAYS} = {:?} is not 1–36500; using {days} days",
            raw.value
        ));
    }
    let cutoff = now - Duration::days(i64::from(days));
    ctx.log.line(format!(
        "retention {days} days: deleting rows older than {}",
        cutoff.to_rfc3339()
    ));

    let purge = store.purge();
    counts.runs = batches(ctx, batch, &counts, || purge.runs_before(cutoff, batch)).await?;
    ctx.log.line(format!("runs: {}", counts.runs));
    counts.audit_logs = batches(ctx, batch, &counts, || {
        purge.audit_logs_before(cutoff, batch)
    })
    .await?;
    ctx.log.line(format!("audit_logs: {}", counts.audit_logs));
    loop {
        if ctx.stop.is_stopped() {
            return Err(stopped(&counts));
        }
        let done = purge
            .notifications_before(cutoff, batch)
            .await
            .map_err(|e| storage_failed(e, &counts))?;
        counts.notifications += done.notifications;
        counts.outbox += done.outbox;
        if done.notifications < batch {
            break;
        }
    }
    ctx.log.line(format!(
        "notifications: {} (outbox {})",
        counts.notifications, counts.outbox
    ));
    let mut after = 0;
    loop {
        if ctx.stop.is_stopped() {
            return Err(stopped(&counts));
        }
        let (deleted, last) = purge
            .fires_before(cutoff, after, batch)
            .await
            .map_err(|e| storage_failed(e, &counts))?;
        counts.fires += deleted;
        match last {
            Some(last) => after = last,
            None => break,
        }
    }
    ctx.log.line(format!("fires: {}", counts.fires));
    // Run-once keys live a day whatever the retention: an older key is
    // ignored, so keeping it would only grow the table.
    let keys_cutoff = now - Duration::hours(KEY_TTL_HOURS);
    let keys = batches(ctx, batch, &counts, || {
        purge.run_once_keys_before(keys_cutoff, batch)
    })
    .await?;
    ctx.log.line(format!("expired run-once keys: {keys}"));
    Ok(counts.summary())
}

/// Runs `step` (one batch) until a batch comes back short, checking the
/// stop signal before each; returns the rows deleted. `so_far` holds the
/// other tables' counts, for the message when it ends early.
async fn batches<F, Fut>(
    ctx: &RunContext,
    batch: u64,
    so_far: &Counts,
    mut step: F,
) -> Result<u64, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, StorageError>>,
{
    let mut total = 0;
    loop {
        if ctx.stop.is_stopped() {
            return Err(format!("{} (this table so far {total})", stopped(so_far)));
        }
        let n = step().await.map_err(|e| storage_failed(e, so_far))?;
        total += n;
        if n < batch {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use qiwu_storage::entity::{audit_log, notification, outbox, run};
    use qiwu_storage::{NewNotification, NotificationRecord};
    use sea_orm::{ActiveModelTrait, ActiveValue::NotSet, EntityTrait, PaginatorTrait, Set};

    use super::*;
    use crate::context::StopReason;
    use crate::test_support::{ManualClock, run_context, test_store};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 1, 3, 30, 0).unwrap()
    }

    async fn insert_run(store: &Store, fire: i64, started: DateTime<Utc>, deleted: bool) {
        let ms = started.timestamp_millis();
        run::ActiveModel {
            id: NotSet,
            fire_id: Set(fire),
            job_id: Set(1),
            job_name: Set("j".into()),
            handler: Set("demo.echo".into()),
            trigger: Set("schedule".into()),
            scheduled_at: Set(ms),
            attempt: Set(1),
            status: Set("success".into()),
            started_at: Set(ms),
            finished_at: Set(Some(ms)),
            duration_ms: Set(Some(0)),
            instance: Set("i".into()),
            output: Set(String::new()),
            error: Set(String::new()),
            swept_at: Set(None),
            deleted_at: Set(deleted.then_some(ms)),
            trace_id: Set(None),
            cancel_requested_at: Set(None),
            cancelled_by: Set(None),
        }
        .insert(store.connection())
        .await
        .unwrap();
    }

    async fn insert_audit(store: &Store, at: DateTime<Utc>) {
        audit_log::ActiveModel {
            id: NotSet,
            at: Set(at.timestamp_millis()),
            actor: Set("a".into()),
            action: Set("job.create".into()),
            target_type: Set("job".into()),
            target_id: Set(None),
            summary: Set(String::new()),
            before_json: Set(None),
            after_json: Set(None),
        }
        .insert(store.connection())
        .await
        .unwrap();
    }

    async fn insert_note(store: &Store, at: DateTime<Utc>, deliver: bool) {
        let new = NewNotification {
            recipient: "super_admins".into(),
            template_code: "scheduler.timeout_alert".into(),
            title: "t".into(),
            body: "b".into(),
        };
        let inbox = store.notifications();
        if deliver {
            inbox
                .create_with_delivery(&new, |n: &NotificationRecord| n.id.to_string(), at)
                .await
                .unwrap();
        } else {
            inbox.create(&new, at).await.unwrap();
        }
    }

    /// Rows on both sides of a 30-day cutoff in every table.
    async fn fill(store: &Store) {
        let expired = now() - Duration::days(30) - Duration::seconds(1);
        let kept = now() - Duration::days(30) + Duration::seconds(1);
        for i in 0..5 {
            insert_run(store, i, expired - Duration::hours(i), i % 2 == 0).await;
        }
        insert_run(store, 10, kept, true).await;
        insert_run(store, 11, kept, false).await;
        for i in 0..3 {
            insert_audit(store, expired - Duration::minutes(i)).await;
        }
        insert_audit(store, kept).await;
        insert_note(store, expired, true).await;
        insert_note(store, expired, false).await;
        insert_note(store, expired - Duration::days(400), true).await;
        insert_note(store, kept, true).await;
    }

    async fn counts(store: &Store) -> (u64, u64, u64, u64) {
        let db = store.connection();
        (
            run::Entity::find().count(db).await.unwrap(),
            audit_log::Entity::find().count(db).await.unwrap(),
            notification::Entity::find().count(db).await.unwrap(),
            outbox::Entity::find().count(db).await.unwrap(),
        )
    }

    #[tokio::test]
    async fn deletes_exactly_the_expired_rows_in_small_batches() {
        let store = test_store().await;
        fill(&store).await;
        store
            .settings()
            .set("audit.retention_days", "30", "admin", now())
            .await
            .unwrap();
        let before_audits = counts(&store).await.1;
        let purge = Purge::new(store.store.clone(), 2).with_clock(Arc::new(ManualClock::at(now())));
        let (_stopper, ctx) = run_context();
        let log = ctx.log.clone();
        let out = purge.run(Map::new(), ctx).await.unwrap();
        assert_eq!(
            out,
            "deleted runs 5, audit_logs 3, notifications 3, outbox 2, fires 0"
        );
        // Left: the two fresh runs, the fresh audit entry plus the setting's
        // own (written "now"), the fresh notification and its outbox row.
        assert_eq!(counts(&store).await, (2, before_audits - 3, 1, 1));
        let log = log.contents();
        assert!(log.contains("retention 30 days"), "{log}");
        assert!(log.contains("2026-05-02T03:30:00+00:00"), "{log}");
    }

    #[tokio::test]
    async fn an_invalid_or_missing_setting_means_180_days() {
        let store = test_store().await;
        // 179 and 181 days old.
        insert_audit(&store, now() - Duration::days(179)).await;
        insert_audit(&store, now() - Duration::days(181)).await;
        let purge =
            Purge::new(store.store.clone(), 10).with_clock(Arc::new(ManualClock::at(now())));
        let out = purge.run(Map::new(), run_context().1).await.unwrap();
        assert_eq!(
            out,
            "deleted runs 0, audit_logs 1, notifications 0, outbox 0, fires 0"
        );

        insert_audit(&store, now() - Duration::days(181)).await;
        store
            .settings()
            .set("audit.retention_days", "0", "admin", now())
            .await
            .unwrap();
        let (_stopper, ctx) = run_context();
        let log = ctx.log.clone();
        let out = purge.run(Map::new(), ctx).await.unwrap();
        assert_eq!(
            out,
            "deleted runs 0, audit_logs 1, notifications 0, outbox 0, fires 0"
        );
        assert!(log.contents().contains("using 180 days"));
    }

    #[tokio::test]
    async fn stops_between_batches_when_told() {
        let store = test_store().await;
        fill(&store).await;
        let before = counts(&store).await;
        let purge = Purge::new(store.store.clone(), 2).with_clock(Arc::new(ManualClock::at(now())));
        let (stopper, ctx) = run_context();
        stopper.stop(StopReason::Timeout);
        let err = purge.run(Map::new(), ctx).await.unwrap_err();
        assert!(err.starts_with("stopped between batches"), "{err}");
        assert_eq!(
            counts(&store).await,
            before,
            "nothing deleted after the stop"
        );
    }
}
