//! Liveness and readiness probes.

use actix_web::{HttpResponse, get, web};

use crate::dto::Health;
use crate::ops::Ops;

/// The process is up.
#[utoipa::path(tag = "ops", summary = "Liveness probe", responses((status = 200, body = Health)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    healthz_plain().await
}

/// The liveness answer, for routers without OpenAPI registration.
pub async fn healthz_plain() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// The process can do its work: its database (and Redis) answer and, in
/// `serve`, the execution engine runs. A 503 says why not.
#[utoipa::path(
    tag = "ops",
    summary = "Readiness probe",
    responses((status = 200, body = Health), (status = 503, body = Health))
)]
#[get("/readyz")]
pub async fn readyz(ops: web::Data<Ops>) -> HttpResponse {
    let problems = crate::ops::readiness_problems(&ops).await;
    if problems.is_empty() {
        HttpResponse::Ok().json(Health {
            status: "ready".into(),
        })
    } else {
        HttpResponse::ServiceUnavailable().json(Health {
            status: problems.join("; "),
        })
    }
}
