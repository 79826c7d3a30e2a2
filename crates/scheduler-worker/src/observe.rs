//! What the engine tells its observers: the Prometheus metrics of claims,
//! fires and runs (`qiwu_telemetry::metrics`), and the spans of a fire.
//!
//! The engine's files call the one-line functions here at the points where
//! things happen, so the fire path stays readable; what a metric or a span
//! holds is decided here. A fire's trace is one `fire` span from its claim
//! to its last recorded end, with an `attempt` span per attempt (the
//! handler's work, an outgoing call included, runs inside it) and the job
//! lock's acquire, renewals and loss as events. A run-once fire continues
//! the trace of the request that queued it.

use chrono::{DateTime, SecondsFormat, Utc};
use qiwu_domain::MissReason;
use qiwu_storage::{ClaimOutcome, EndWritten, JobRecord, RunStatus, Trigger};
use qiwu_telemetry::{metrics, trace};
use tracing::field::Empty;

use crate::engine::Shared;
use crate::fire::{Decision, Fire};

/// The metric label of why fire times were missed.
fn reason_label(reason: MissReason) -> &'static str {
    match reason {
        MissReason::Downtime => "downtime",
        MissReason::Outage => "outage",
        MissReason::Overloaded => "overloaded",
        MissReason::Stalled => "stalled",
        MissReason::ClockSkew => "clock_skew",
    }
}

/// What a claim decided, as the `outcome` label.
fn outcome_label(outcome: &ClaimOutcome) -> &'static str {
    match outcome {
        ClaimOutcome::Claimed(c) => match c.status {
            RunStatus::Running => "claimed",
            RunStatus::Skipped => "skipped_overlap",
            _ => "failed",
        },
        ClaimOutcome::Taken => "lost_race",
        ClaimOutcome::Stale => "stale",
        ClaimOutcome::Gap { .. } => "gap",
    }
}

/// Counts a timer fire's or a run-once request's claim.
pub(crate) fn claimed(trigger: Trigger, outcome: &ClaimOutcome) {
    metrics().fire(trigger.as_str(), outcome_label(outcome));
}

/// Why a fire claimed ahead of its time was taken back (`crate::ahead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Withdrawal {
    /// The job changed (or went) before the time.
    Changed,
    /// A freeze window holds the time.
    Frozen,
    /// The process is stopping.
    Stopping,
}

/// Counts a fire claimed ahead and taken back before its time (its time is
/// then claimed afresh, and counted by that claim).
pub(crate) fn withdrawn(job_id: i64, at: DateTime<Utc>, why: Withdrawal) {
    tracing::info!(job = job_id, %at, ?why, "a fire claimed ahead of its time was taken back");
    metrics().fire(Trigger::Schedule.as_str(), "withdrawn");
}

/// Counts what a fire claimed ahead came to at its time, as its claim
/// would have been counted then: it runs (`claimed`) or the overlap rule
/// skips it (`skipped_overlap`).
pub(crate) fn decided_at_time(skipped: bool) {
    let outcome = if skipped {
        "skipped_overlap"
    } else {
        "claimed"
    };
    metrics().fire(Trigger::Schedule.as_str(), outcome);
}

/// Counts a catch-up's claim: `count` missed fire times recorded as one
/// skipped record or one catch-up run when this instance wrote it.
pub(crate) fn caught_up(outcome: &ClaimOutcome, reason: MissReason, count: usize) {
    let label = match outcome {
        ClaimOutcome::Claimed(c) if c.status == RunStatus::Skipped => {
            if reason == MissReason::Overloaded {
                "skipped_overloaded"
            } else {
                "skipped_misfire"
            }
        }
        other => outcome_label(other),
    };
    metrics().fire(Trigger::Misfire.as_str(), label);
    if let ClaimOutcome::Claimed(_) = outcome {
        metrics().missed(reason_label(reason), count as u64);
    }
}

/// Sets the size of the claim queue.
pub(crate) fn claim_queue(len: usize) {
    metrics().claim_queue.set(len as i64);
}

/// A run decided at the claim (a skip, a deleted job) is already ended.
pub(crate) fn ended_at_claim(handler: Option<&str>, status: RunStatus) {
    if status != RunStatus::Running {
        metrics().run_ended(handler.unwrap_or(""), status.as_str());
    }
}

/// The `fire` span a claimed fire runs in (disabled when tracing is off).
/// A run-once fire's span continues the trace of the request that queued
/// it, read from the fire's row.
pub(crate) async fn fire_span(fire: &Fire) -> tracing::Span {
    if !trace::enabled() {
        return tracing::Span::none();
    }
    let job = &fire.job;
    let span = tracing::info_span!(
        "fire",
        otel.name = %format!("fire {}", job.name),
        job.id = job.id,
        job.name = %job.name,
        job.handler = %job.handler,
        fire.id = fire.fire_id,
        fire.trigger = fire.trigger.as_str(),
        fire.scheduled_at = %fire.scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        fire.lag_ms = Empty,
        instance = %fire.shared.config.instance,
    );
    if fire.trigger == Trigger::Manual {
        match fire.shared.store.fires().traceparent(fire.fire_id).await {
            Ok(Some(parent)) => trace::set_parent(&span, &parent, None),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(fire = fire.fire_id, error = %e, "cannot read the fire's traceparent")
            }
        }
    }
    span
}

/// The first attempt starts now: the fire's lag, measured from `due`, the
/// time it was to start (a jittered fire's delay is not lag).
pub(crate) fn fire_started(trigger: Trigger, due: DateTime<Utc>, now: DateTime<Utc>) {
    let lag = (now - due).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    // A catch-up and a backfill fire times long past: their lag says
    // nothing about the engine.
    if !matches!(trigger, Trigger::Misfire | Trigger::Backfill) {
        metrics().fire_lag(trigger.as_str(), lag);
    }
    tracing::Span::current().record("fire.lag_ms", (lag * 1000.0).round() as i64);
}

/// The span of one attempt, a child of the fire's; `None`-like (disabled)
/// when tracing is off.
pub(crate) fn attempt_span(
    job: &JobRecord,
    attempt: u32,
    trigger: Trigger,
    scheduled_at: DateTime<Utc>,
) -> tracing::Span {
    if !trace::enabled() {
        return tracing::Span::none();
    }
    tracing::info_span!(
        "attempt",
        otel.name = %format!("attempt {} {}", attempt, job.handler),
        job.id = job.id,
        job.name = %job.name,
        handler = %job.handler,
        attempt = attempt,
        trigger = trigger.as_str(),
        scheduled_at = %scheduled_at.to_rfc3339_opts(SecondsFormat::Millis, true),
        lag_ms = (Utc::now() - scheduled_at).num_milliseconds(),
        status = Empty,
        otel.status_code = Empty,
    )
}

/// An attempt ended as `decision` says after `seconds` of handler time.
pub(crate) fn attempt_decided(
    span: &tracing::Span,
    handler: &str,
    decision: &Decision,
    seconds: f64,
) {
    metrics().run_duration(handler, seconds);
    span.record("status", decision.status.as_str());
    if matches!(decision.status, RunStatus::Failed | RunStatus::Timeout) {
        span.record("otel.status_code", "ERROR");
    }
}

/// A run's end was handed to the recorder; `written` is its answer.
pub(crate) fn run_end_written(handler: &str, status: RunStatus, written: Option<EndWritten>) {
    match written {
        Some(EndWritten::Recorded) => metrics().run_ended(handler, status.as_str()),
        Some(EndWritten::NoRow) => metrics().end_write_failed("no_row"),
        None => {}
    }
}

/// The trace id to store with the current run row (the fire's trace).
pub(crate) fn trace_id() -> Option<String> {
    trace::trace_id(&tracing::Span::current())
}

pub(crate) fn retry(handler: &str) {
    metrics().retry(handler);
}

/// A job lock event on the current span (the fire's): `lock.acquired`,
/// `lock.renewed`, `lock.lost`, `lock.released`.
pub(crate) fn lock_event(name: &'static str, job_id: i64, token: i64) {
    if name == "lock.lost" {
        metrics().lock_lost.inc();
    }
    trace::event(name, &[("job.id", job_id), ("lock.token", token)]);
}

/// A run end could not be written, and why.
pub(crate) fn end_write_failed(reason: &'static str) {
    metrics().end_write_failed(reason);
}

/// The loop's gauges after each event.
pub(crate) fn loop_state(armed: usize, known: usize) {
    metrics().jobs_armed.set(armed as i64);
    metrics().jobs_known.set(known as i64);
}

pub(crate) fn timer_woke() {
    metrics().timer_wakeups.inc();
}

pub(crate) fn reconciled(ok: bool) {
    metrics().reconciled(ok);
}

/// What a reconciliation changed for one job: it was armed where it was
/// not, re-armed from another schedule, or disarmed.
pub(crate) fn repaired(before: Option<DateTime<Utc>>, after: Option<DateTime<Utc>>) {
    let repair = match (before, after) {
        (None, Some(_)) => "armed",
        (Some(_), None) => "disarmed",
        (Some(b), Some(a)) if a != b => "rearmed",
        _ => return,
    };
    metrics().repaired(repair, 1);
}

/// Where `qiwu_fires_in_flight` comes from: the places taken out of the
/// engine's bound.
pub(crate) fn watch_in_flight(shared: &std::sync::Arc<Shared>) {
    let permits = std::sync::Arc::clone(&shared.permits);
    let max = shared.config.max_in_flight.max(1);
    metrics().set_in_flight_source(move || max.saturating_sub(permits.available_permits()) as i64);
}

/// A heart-beat's result.
pub(crate) fn heartbeat(ok: bool, skew_ms: i64, live: Option<usize>) {
    metrics().heartbeat(ok, Utc::now().timestamp_millis());
    if ok {
        metrics().clock_skew_ms(skew_ms);
    }
    if let Some(live) = live {
        metrics().live_workers.set(live as i64);
    }
}
