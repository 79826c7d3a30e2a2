//! Liveness and readiness probes.

use actix_web::{HttpResponse, get, web};

use crate::dto::Health;
use crate::ops::Ops;

/// What `/healthz` says.
pub const LIVE: &str = "ok";
/// What `/readyz` says when the process can do its work.
pub const READY: &str = "ready";
/// What `/readyz` says when it cannot (`reasons` says why).
pub const UNREADY: &str = "unready";

/// The process is up.
#[utoipa::path(tag = "ops", summary = "Liveness probe", responses((status = 200, description = "The process is up", body = Health)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    healthz_plain().await
}

/// The liveness answer, for routers without OpenAPI registration.
pub async fn healthz_plain() -> HttpResponse {
    HttpResponse::Ok().json(Health::new(LIVE, Vec::new()))
}

/// The process can do its work: its database (and Redis) answer and, in
/// `serve`, the execution engine runs. A 503 says why not.
#[utoipa::path(
    tag = "ops",
    summary = "Readiness probe",
    responses(
        (status = 200, description = "The process can do its work: `status` is `ready`, `reasons` empty", body = Health),
        (status = 503, description = "It cannot: `status` is `unready` and `reasons` says why (the database or Redis does not answer, the engine is not running, the clock is skewed)", body = Health)
    )
)]
#[get("/readyz")]
pub async fn readyz(ops: web::Data<Ops>) -> HttpResponse {
    let problems = crate::ops::readiness_problems(&ops).await;
    if problems.is_empty() {
        HttpResponse::Ok().json(Health::new(READY, problems))
    } else {
        HttpResponse::ServiceUnavailable().json(Health::new(UNREADY, problems))
    }
}
