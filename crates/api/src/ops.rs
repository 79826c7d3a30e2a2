//! Operations endpoints shared by every role: `/metrics` in the Prometheus
//! text format, and the health and readiness probes of `worker` processes
//! (which serve nothing else).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use actix_web::{HttpResponse, web};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use qiwu_storage::{Coord, Store};

/// How long a readiness probe waits for the database.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the execution engine is not running (`None` while it runs).
pub type EngineReadiness = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// What the operations endpoints read.
#[derive(Clone)]
pub struct Ops {
    pub store: Store,
    pub coord: Option<Coord>,
    /// This clock minus the database's, in ms, when a worker measures it.
    pub skew_ms: Option<Arc<AtomicI64>>,
    /// Readiness fails beyond this skew.
    pub max_skew_ms: i64,
    pub role: &'static str,
    /// The engine's state, in processes that run one.
    pub engine: Option<EngineReadiness>,
}

fn render(ops: &Ops) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("qiwu");
    let up: Gauge = Gauge::default();
    up.set(1);
    registry.register("up", "1 while the process serves", up);
    if let Some(skew) = &ops.skew_ms {
        let gauge: Gauge = Gauge::default();
        gauge.set(skew.load(Ordering::Relaxed));
        registry.register(
            "clock_skew_milliseconds",
            "This worker's clock minus the database's",
            gauge,
        );
    }
    let mut out = String::new();
    encode(&mut out, &registry)?;
    Ok(out)
}

/// `GET /metrics`.
pub async fn metrics(ops: web::Data<Ops>) -> HttpResponse {
    match render(&ops) {
        Ok(text) => HttpResponse::Ok()
            .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
            .body(text),
        Err(e) => {
            tracing::error!(error = %e, "cannot render metrics");
            HttpResponse::InternalServerError().finish()
        }
    }
}

/// `GET /readyz` of a worker: the engine runs, and database, Redis and
/// clock are all usable.
pub async fn worker_ready(ops: web::Data<Ops>) -> HttpResponse {
    use crate::routes::health::{READY, UNREADY};
    let problems = readiness_problems(&ops).await;
    if problems.is_empty() {
        HttpResponse::Ok()
            .json(serde_json::json!({"status": READY, "reasons": problems, "role": ops.role}))
    } else {
        HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({"status": UNREADY, "reasons": problems, "role": ops.role}))
    }
}

/// Everything that keeps this process from doing its work, in words; empty
/// when it is ready.
pub async fn readiness_problems(ops: &Ops) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(reason) = ops.engine.as_ref().and_then(|engine| engine()) {
        problems.push(format!("engine not running: {reason}"));
    }
    // A probe answers within its own timeout even while the database
    // does not.
    match actix_web::rt::time::timeout(PROBE_TIMEOUT, ops.store.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness: database unreachable");
            problems.push("database unreachable".to_string());
        }
        Err(_) => problems.push("database unreachable (no answer within 2 s)".to_string()),
    }
    if let Some(coord) = &ops.coord
        && let Err(e) = coord.ping().await
    {
        tracing::warn!(error = %e, "readiness: redis unreachable");
        problems.push("redis unreachable".to_string());
    }
    if let Some(skew) = &ops.skew_ms {
        let skew = skew.load(Ordering::Relaxed);
        if skew.abs() > ops.max_skew_ms {
            problems.push(format!(
                "clock skew {skew} ms exceeds {} ms",
                ops.max_skew_ms
            ));
        }
    }
    problems
}

/// The routes of a `worker`: health, readiness and metrics only.
pub fn configure_worker(ops: Ops) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::new(ops))
            .route(
                "/healthz",
                web::get().to(crate::routes::health::healthz_plain),
            )
            .route("/readyz", web::get().to(worker_ready))
            .route("/metrics", web::get().to(metrics))
            .default_service(web::to(crate::error::not_found));
    }
}
