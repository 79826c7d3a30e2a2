//! The process's Prometheus metrics: one [`Metrics`] per process
//! ([`metrics()`]), written to by the engine and the HTTP layer, and encoded
//! in the OpenMetrics text format at every scrape together with the values
//! only a scrape computes (database pool, per-job state, …).
//!
//! Every name is in the `qiwu_` namespace and in base units (seconds);
//! counters get their `_total` suffix from the encoder. Labels are bounded:
//! triggers, outcomes, statuses and reasons are fixed sets, handlers are the
//! registered ones, HTTP routes are route templates (never raw paths).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Fire lag buckets: 1 ms to 60 s.
const LAG_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Handler run times: 5 ms to an hour.
const RUN_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0,
];
/// HTTP request latency: 1 ms to 10 s.
const HTTP_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// `trigger` and `outcome` of a fire time's claim.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FireLabels {
    pub trigger: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TriggerLabel {
    pub trigger: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandlerLabel {
    pub handler: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabels {
    pub handler: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepairLabel {
    pub repair: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn lag_histogram() -> Histogram {
    Histogram::new(LAG_BUCKETS)
}

fn run_histogram() -> Histogram {
    Histogram::new(RUN_BUCKETS)
}

fn http_histogram() -> Histogram {
    Histogram::new(HTTP_BUCKETS)
}

/// A value read at scrape time from a part of the process that owns it
/// (the engine's semaphore, say).
type Sampler = Box<dyn Fn() -> i64 + Send + Sync>;

/// Every metric this process keeps between scrapes.
pub struct Metrics {
    pub fires: Family<FireLabels, Counter>,
    pub fire_lag: HistogramFamily<TriggerLabel>,
    pub missed_fires: Family<ReasonLabel, Counter>,
    pub runs: Family<RunLabels, Counter>,
    pub run_duration: HistogramFamily<HandlerLabel>,
    pub runs_running: Gauge,
    pub retries: Family<HandlerLabel, Counter>,
    pub lock_lost: Counter,
    pub run_end_write_failures: Family<ReasonLabel, Counter>,
    pub jobs_armed: Gauge,
    pub jobs_known: Gauge,
    pub claim_queue: Gauge,
    pub timer_wakeups: Counter,
    pub reconciliations: Family<ResultLabel, Counter>,
    pub reconcile_repairs: Family<RepairLabel, Counter>,
    pub heartbeats: Family<ResultLabel, Counter>,
    pub live_workers: Gauge,
    /// This clock minus the database's, in seconds.
    pub clock_skew: Gauge<f64, AtomicU64>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: HistogramFamily<RouteLabels>,
    pub spans_dropped: Family<ReasonLabel, Counter>,
    /// Unix time (ms) of the last successful heart-beat; 0 before the first.
    heartbeat_at_ms: AtomicI64,
    in_flight: Mutex<Option<Sampler>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            fires: Family::default(),
            fire_lag: Family::new_with_constructor(lag_histogram),
            missed_fires: Family::default(),
            runs: Family::default(),
            run_duration: Family::new_with_constructor(run_histogram),
            runs_running: Gauge::default(),
            retries: Family::default(),
            lock_lost: Counter::default(),
            run_end_write_failures: Family::default(),
            jobs_armed: Gauge::default(),
            jobs_known: Gauge::default(),
            claim_queue: Gauge::default(),
            timer_wakeups: Counter::default(),
            reconciliations: Family::default(),
            reconcile_repairs: Family::default(),
            heartbeats: Family::default(),
            live_workers: Gauge::default(),
            clock_skew: Gauge::default(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(http_histogram),
            spans_dropped: Family::default(),
            heartbeat_at_ms: AtomicI64::new(0),
            in_flight: Mutex::new(None),
        }
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Holds a gauge up by one while it lives.
#[must_use = "the gauge goes down again when this is dropped"]
pub struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Counts one claim decision.
    pub fn fire(&self, trigger: &'static str, outcome: &'static str) {
        self.fires
            .get_or_create(&FireLabels { trigger, outcome })
            .inc();
    }

    /// A fire started `lag_seconds` after its scheduled time.
    pub fn fire_lag(&self, trigger: &'static str, lag_seconds: f64) {
        self.fire_lag
            .get_or_create(&TriggerLabel { trigger })
            .observe(lag_seconds.max(0.0));
    }

    pub fn missed(&self, reason: &'static str, count: u64) {
        self.missed_fires
            .get_or_create(&ReasonLabel { reason })
            .inc_by(count);
    }

    /// A run row of `handler` got its final status.
    pub fn run_ended(&self, handler: &str, status: &'static str) {
        self.runs
            .get_or_create(&RunLabels {
                handler: handler.to_string(),
                status,
            })
            .inc();
    }

    pub fn run_duration(&self, handler: &str, seconds: f64) {
        self.run_duration
            .get_or_create(&HandlerLabel {
                handler: handler.to_string(),
            })
            .observe(seconds.max(0.0));
    }

    pub fn retry(&self, handler: &str) {
        self.retries
            .get_or_create(&HandlerLabel {
                handler: handler.to_string(),
            })
            .inc();
    }

    pub fn end_write_failed(&self, reason: &'static str) {
        self.run_end_write_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }

    /// One more run in progress until the guard drops.
    pub fn running(&self) -> GaugeGuard {
        self.runs_running.inc();
        GaugeGuard(self.runs_running.clone())
    }

    pub fn reconciled(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reconciliations
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    pub fn repaired(&self, repair: &'static str, count: u64) {
        if count > 0 {
            self.reconcile_repairs
                .get_or_create(&RepairLabel { repair })
                .inc_by(count);
        }
    }

    /// A heart-beat landed (or failed).
    pub fn heartbeat(&self, ok: bool, now_ms: i64) {
        let result = if ok { "ok" } else { "error" };
        self.heartbeats.get_or_create(&ResultLabel { result }).inc();
        if ok {
            self.heartbeat_at_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    pub fn clock_skew_ms(&self, skew_ms: i64) {
        self.clock_skew.set(skew_ms as f64 / 1000.0);
    }

    /// An HTTP request was answered.
    pub fn http_request(&self, route: &str, method: &str, status: u16, seconds: f64) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                method: method.to_string(),
            })
            .observe(seconds);
    }

    pub fn span_dropped(&self, reason: &'static str, count: u64) {
        self.spans_dropped
            .get_or_create(&ReasonLabel { reason })
            .inc_by(count);
    }

    /// Where `qiwu_fires_in_flight` is read from at each scrape.
    pub fn set_in_flight_source(&self, sampler: impl Fn() -> i64 + Send + Sync + 'static) {
        if let Ok(mut slot) = self.in_flight.lock() {
            *slot = Some(Box::new(sampler));
        }
    }

    /// Registers everything kept here under the `qiwu` prefix.
    fn register(&self, r: &mut Registry, now_ms: i64) {
        r.register(
            "fires",
            "Fire times by trigger (schedule, misfire, manual, backfill) and what their claim decided: claimed, lost_race (another instance recorded it), stale (the job changed), gap (earlier times caught up first), skipped_overlap, skipped_misfire, skipped_overloaded, failed (job deleted), withdrawn (claimed ahead, taken back before its time)",
            self.fires.clone(),
        );
        r.register_with_unit(
            "fire_lag",
            "Time from a fire's scheduled time to the start of its first attempt (schedule and manual triggers)",
            Unit::Seconds,
            self.fire_lag.clone(),
        );
        r.register(
            "missed_fires",
            "Fire times recorded by the misfire path (one skipped record or one catch-up run each stands for several), by why they were missed",
            self.missed_fires.clone(),
        );
        r.register(
            "runs",
            "Run records this process ended, by handler and final status",
            self.runs.clone(),
        );
        r.register_with_unit(
            "run_duration",
            "Run time of handler attempts, by handler",
            Unit::Seconds,
            self.run_duration.clone(),
        );
        r.register(
            "runs_running",
            "Attempts this process is running now",
            self.runs_running.clone(),
        );
        r.register(
            "retries",
            "Attempts started after a failed or timed-out one, by handler",
            self.retries.clone(),
        );
        r.register(
            "lock_lost",
            "Job locks whose renewal was not confirmed (the run is stopped and recorded failed)",
            self.lock_lost.clone(),
        );
        r.register(
            "run_end_write_failures",
            "Failed writes of run ends, by reason: unreachable (retried), refused (by the database), fallback (a short failed end written instead), no_row (the run was no longer open)",
            self.run_end_write_failures.clone(),
        );
        r.register(
            "jobs_armed",
            "Jobs with a timer armed in this process",
            self.jobs_armed.clone(),
        );
        r.register(
            "jobs_known",
            "Enabled jobs this engine knows of (armed here or on other workers)",
            self.jobs_known.clone(),
        );
        r.register(
            "claim_queue",
            "Jobs and run-once requests waiting in this engine's claim queue",
            self.claim_queue.clone(),
        );
        let in_flight: Gauge = Gauge::default();
        if let Ok(slot) = self.in_flight.lock()
            && let Some(sampler) = slot.as_ref()
        {
            in_flight.set(sampler());
        }
        r.register(
            "fires_in_flight",
            "Fires this process holds a place for (claimed and not yet ended)",
            in_flight,
        );
        r.register(
            "timer_wakeups",
            "Times the engine's timer loop woke up for a due timer",
            self.timer_wakeups.clone(),
        );
        r.register(
            "reconciliations",
            "Reconciliations (re-reading the jobs changed since the last one), by result",
            self.reconciliations.clone(),
        );
        r.register(
            "reconcile_repairs",
            "Jobs a reconciliation found out of date here (a change message was lost or late), by what it did: armed, rearmed, disarmed",
            self.reconcile_repairs.clone(),
        );
        r.register(
            "heartbeats",
            "Heart-beats of this worker, by result",
            self.heartbeats.clone(),
        );
        let last = self.heartbeat_at_ms.load(Ordering::Relaxed);
        if last > 0 {
            let age: Gauge<f64, AtomicU64> = Gauge::default();
            age.set((now_ms - last).max(0) as f64 / 1000.0);
            r.register_with_unit(
                "heartbeat_age",
                "Time since this worker's last successful heart-beat",
                Unit::Seconds,
                age,
            );
            r.register(
                "live_workers",
                "Live workers this worker saw at its last heart-beat",
                self.live_workers.clone(),
            );
            r.register_with_unit(
                "clock_skew",
                "This worker's clock minus the database's, measured at each heart-beat",
                Unit::Seconds,
                self.clock_skew.clone(),
            );
        }
        r.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status",
            self.http_requests.clone(),
        );
        r.register_with_unit(
            "http_request_duration",
            "HTTP request latency, by route template and method",
            Unit::Seconds,
            self.http_duration.clone(),
        );
        r.register(
            "trace_spans_dropped",
            "Spans not exported, by reason: queue_full (the bounded export queue was full), export_failed",
            self.spans_dropped.clone(),
        );
    }

    /// The OpenMetrics text of everything kept here plus what `scrape`
    /// adds (values computed at scrape time).
    pub fn encode(
        &self,
        now_ms: i64,
        scrape: impl FnOnce(&mut Registry),
    ) -> Result<String, std::fmt::Error> {
        let mut registry = Registry::with_prefix("qiwu");
        self.register(&mut registry, now_ms);
        scrape(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_names_units_and_help() {
        let m = Metrics::default();
        m.fire("schedule", "claimed");
        m.fire_lag("schedule", 0.003);
        m.run_ended("demo.echo", "success");
        m.run_duration("demo.echo", 0.02);
        m.http_request("/api/jobs/{id}", "GET", 200, 0.004);
        let guard = m.running();
        let text = m
            .encode(0, |r| {
                let g: Gauge = Gauge::default();
                g.set(7);
                r.register("extra", "An extra value", g);
            })
            .expect("encode");
        drop(guard);
        for needle in [
            "# HELP qiwu_fires Fire times",
            "qiwu_fires_total{trigger=\"schedule\",outcome=\"claimed\"} 1",
            "# TYPE qiwu_fire_lag_seconds histogram",
            "# UNIT qiwu_fire_lag_seconds seconds",
            "qiwu_fire_lag_seconds_bucket{le=\"0.001\",trigger=\"schedule\"} 0",
            "qiwu_fire_lag_seconds_bucket{le=\"0.005\",trigger=\"schedule\"} 1",
            "qiwu_fire_lag_seconds_bucket{le=\"60.0\",trigger=\"schedule\"} 1",
            "qiwu_runs_total{handler=\"demo.echo\",status=\"success\"} 1",
            "qiwu_run_duration_seconds_count{handler=\"demo.echo\"} 1",
            "qiwu_runs_running 1",
            "qiwu_http_requests_total{route=\"/api/jobs/{id}\",method=\"GET\",status=\"200\"} 1",
            "qiwu_extra 7",
            "# EOF",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        // No heart-beat yet: no heart-beat age, skew or live workers.
        assert!(!text.contains("heartbeat_age"), "{text}");
        assert_eq!(m.runs_running.get(), 0);
    }

    #[test]
    fn heartbeat_age_is_computed_at_scrape() {
        let m = Metrics::default();
        m.heartbeat(true, 10_000);
        m.clock_skew_ms(-250);
        let text = m.encode(12_500, |_| {}).expect("encode");
        assert!(text.contains("qiwu_heartbeat_age_seconds 2.5"), "{text}");
        assert!(text.contains("qiwu_clock_skew_seconds -0.25"), "{text}");
        m.set_in_flight_source(|| 3);
        let text = m.encode(12_500, |_| {}).expect("encode");
        assert!(text.contains("qiwu_fires_in_flight 3"), "{text}");
    }
}
