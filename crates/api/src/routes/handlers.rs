//! The handler whitelist.

use actix_web::{HttpResponse, get, web};

use crate::auth::{Need, perm};
use crate::dto::HandlerDto;
use crate::error::{ApiError, Problem};
use crate::state::AppState;

/// Lists the registered handlers with their params schemas and defaults.
#[utoipa::path(
    tag = "handlers",
    summary = "List registered handlers",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every registered handler", body = Vec<HandlerDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/handlers")]
pub async fn list_handlers(
    state: web::Data<AppState>,
    who: Need<perm::TaskBrowse>,
) -> Result<HttpResponse, ApiError> {
    let items: Vec<HandlerDto> = state
        .catalog
        .iter()
        .map(|d| HandlerDto::new(d, who.lang))
        .collect();
    Ok(HttpResponse::Ok().json(items))
}
