//! Run-once callbacks (issue 10, part 5): when a fire whose request named
//! a `callbackUrl` has ended (after its retries, or skipped, cancelled, or
//! failed at its claim), whoever recorded that end queues a signed POST of
//! [`CallbackReport`] to the URL. The report is read back from the run log,
//! so it says exactly what the log says.
//!
//! The delivery is an outbox row (with a notification kept for the record
//! under [`RUN_CALLBACK`], never listed) written in one transaction, which
//! `notify.dispatch` sends like the webhook: `X-Qiwu-Timestamp` and
//! `X-Qiwu-Signature` keyed by `QIWU_WEBHOOK_SECRET` (and the previous
//! secrets during a rotation), leases, at most 3 attempts.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use qiwu_domain::run_once::CallbackReport;
use qiwu_storage::{NewNotification, OutboxRecord, Store};

use crate::WorkerError;
use crate::engine::Shared;

/// The recipient of a callback's notification: kept for the record and
/// purged with the rest, never listed.
pub const RUN_CALLBACK: &str = "run_callback";
/// The template code a callback's notification is stored under.
pub const CALLBACK_CODE: &str = "scheduler.run_callback";

/// Queues the callback of a fire that has ended, if its request named one.
/// `None` when it has none, or its last run is not written as ended (the
/// process stops before the write: the sweep that closes the run reports
/// it, see [`swept`]).
pub async fn fire_ended(
    store: &Store,
    fire_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<OutboxRecord>, WorkerError> {
    let Some(callback) = store.fires().callback(fire_id).await? else {
        return Ok(None);
    };
    let Some(last) = callback.last else {
        tracing::warn!(
            fire = fire_id,
            "the fire's end is not recorded; no callback"
        );
        return Ok(None);
    };
    let report = CallbackReport {
        fire_id,
        job_id: callback.job_id,
        status: last.status,
        attempts: u32::try_from(last.attempt.max(1)).unwrap_or(1),
        started_at: callback.started_at,
        finished_at: last.finished_at,
        error: Some(last.error).filter(|e| !e.is_empty()),
    };
    let body = report.body();
    let new = NewNotification {
        recipient: RUN_CALLBACK.to_owned(),
        template_code: CALLBACK_CODE.to_owned(),
        title: format!(
            "执行一次回调：任务 {} 触发 {fire_id}（{}）",
            report.job_id, report.status
        ),
        body: body.clone(),
    };
    let (_, row) = store
        .notifications()
        .create_with_callback(&new, &callback.url, &body, now)
        .await?;
    tracing::info!(
        fire = fire_id,
        job = report.job_id,
        status = %report.status,
        outbox = row.id,
        "run-once callback queued"
    );
    Ok(Some(row))
}

/// [`fire_ended`] on the engine's tracker, so the fire's guards are not
/// held meanwhile; a failure is logged (the callback is lost, the run log
/// keeps the outcome).
pub(crate) fn report(shared: &Arc<Shared>, fire_id: i64) {
    let shared = Arc::clone(shared);
    let tracker = shared.tracker.clone();
    tracker.spawn(async move {
        let now = shared.clock.now();
        if let Err(e) = fire_ended(&shared.store, fire_id, now).await {
            tracing::error!(fire = fire_id, error = ?e, "cannot queue the run-once callback");
        }
    });
}

/// Queues the callbacks of run-once fires whose runs a sweep (a lost
/// instance, an orphan, a restart, a shutdown past its grace) has just
/// closed with `reason` at `closed_at`; called only when it closed some.
/// Failures are logged: the run log keeps the outcome. Should the process
/// thought gone still write a real end, its own report follows, so a
/// callback can come twice, the later one with the real end.
pub(crate) async fn swept(
    store: &Store,
    instances: Option<&[String]>,
    reason: &str,
    closed_at: DateTime<Utc>,
) {
    let fires = match store
        .fires()
        .callbacks_of_swept(instances, reason, closed_at)
        .await
    {
        Ok(fires) => fires,
        Err(e) => {
            tracing::error!(error = ?e, "cannot read the callbacks of the runs a sweep closed; they are not reported");
            return;
        }
    };
    for fire_id in fires {
        if let Err(e) = fire_ended(store, fire_id, closed_at).await {
            tracing::error!(fire = fire_id, error = ?e, "cannot queue the callback of a swept fire");
        }
    }
}
