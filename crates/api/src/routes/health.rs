//! Liveness and readiness probes.

use actix_web::{HttpResponse, get, web};

use crate::dto::Health;
use crate::state::AppState;

/// What `/healthz` says.
pub const LIVE: &str = "ok";
/// What `/readyz` says when the database answers.
pub const READY: &str = "ready";
/// What `/readyz` says when it does not.
pub const UNREACHABLE: &str = "database unreachable";

/// The process is up.
#[utoipa::path(tag = "ops", summary = "Liveness probe", responses((status = 200, description = "The process is up", body = Health)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    healthz_plain().await
}

/// The liveness answer, for routers without OpenAPI registration.
pub async fn healthz_plain() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: LIVE.into(),
    })
}

/// The process can reach its database.
#[utoipa::path(
    tag = "ops",
    summary = "Readiness probe",
    responses(
        (status = 200, description = "The database answers", body = Health),
        (status = 503, description = "The database does not answer", body = Health)
    )
)]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    match state.store.ping().await {
        Ok(()) => HttpResponse::Ok().json(Health {
            status: READY.into(),
        }),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            HttpResponse::ServiceUnavailable().json(Health {
                status: UNREACHABLE.into(),
            })
        }
    }
}
