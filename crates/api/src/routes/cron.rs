//! Cron preview: what an expression means and when it fires next.

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use chrono_tz::Tz;
use qiwu_domain::CronExpr;

use crate::auth::Principal;
use crate::dto::{CronPreviewRequest, CronPreviewResponse, in_zone};
use crate::error::{ApiError, Problem};
use crate::state::AppState;

/// Describes an expression and lists its next fire times; an invalid
/// expression is answered with `valid: false` and the reason.
#[utoipa::path(
    tag = "cron",
    summary = "Preview a cron expression",
    security(("bearer" = [])),
    request_body(
        content = CronPreviewRequest,
        example = json!({"cron": "0 0 9 * * 1-5", "timezone": "Asia/Shanghai", "count": 3})
    ),
    responses(
        (status = 200, description = "The description and next fire times, or `valid: false` and why", body = CronPreviewResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/cron/preview")]
pub async fn preview(
    state: web::Data<AppState>,
    who: Principal,
    body: web::Json<serde_json::Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let body = CronPreviewRequest::read(lang, body.into_inner())?;
    let count = body.count.unwrap_or(5);
    let tz = match body
        .timezone
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        None => state.timezone,
        Some(name) => name.parse::<Tz>().map_err(|_| {
            ApiError::field(
                lang,
                "timezone",
                format!("时区 {name} 不存在：请填写 IANA 时区名，比如 Asia/Shanghai"),
                format!("Time zone {name} does not exist: use an IANA name such as Asia/Shanghai"),
            )
        })?,
    };
    let from = body
        .from
        .map(|f| f.with_timezone(&Utc))
        .unwrap_or_else(Utc::now);
    let response = match CronExpr::parse(&body.cron) {
        Ok(cron) => CronPreviewResponse {
            valid: true,
            description: Some(cron.describe(lang)),
            next_fire_times: in_zone(cron.upcoming(from, tz, count as usize), tz),
            error: None,
        },
        Err(e) => CronPreviewResponse {
            valid: false,
            description: None,
            next_fire_times: vec![],
            error: Some(e.message(lang)),
        },
    };
    Ok(HttpResponse::Ok().json(response))
}
