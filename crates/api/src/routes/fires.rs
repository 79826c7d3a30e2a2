//! "Run once": queue a fire of a job now, with its saved params.

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::{Permission, Principal};
use crate::error::{ApiError, Problem};
use crate::state::AppState;

/// The queued fire.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunOnceAccepted {
    pub fire_id: i64,
    pub message: String,
}

/// Runs a job once, now, with its saved params (no override), obeying its
/// timeout, retry and concurrency rules; disabled jobs can be run too. The
/// result appears in the run log. While tracing is on, the fire's trace is
/// a child of this request's, which continues the caller's W3C
/// `traceparent` header when one is sent.
#[utoipa::path(
    tag = "jobs",
    summary = "Run a job once",
    security(("bearer" = [])),
    params(("id" = i64, Path, description = "Job id")),
    responses(
        (status = 202, body = RunOnceAccepted),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/run")]
pub async fn run_once(
    state: web::Data<AppState>,
    who: Principal,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    who.require(&[Permission::TaskRun])?;
    let lang = who.lang;
    let id = id.into_inner();
    let job = state
        .store
        .jobs()
        .get(id)
        .await
        .map_err(|e| ApiError::storage(lang, e))?
        .ok_or_else(|| ApiError::job_not_found(lang, id))?;
    let fire_id = state
        .store
        .fires()
        // The fire's trace continues this request's.
        .create_manual_traced(
            job.id,
            Utc::now(),
            qiwu_telemetry::trace::traceparent(&tracing::Span::current()).as_deref(),
        )
        .await
        .map_err(|e| ApiError::storage(lang, e))?;
    state.changes.fire_queued(fire_id);
    tracing::info!(job = id, fire = fire_id, actor = %who.sub, "run once queued");
    crate::audit::record(
        &state,
        &who,
        crate::audit::Action::JobRun,
        crate::audit::Target::Job,
        Some(id.to_string()),
        format!("执行一次任务 {}（触发 {fire_id}）", job.name),
        None,
        Some(serde_json::json!({"fireId": fire_id, "jobId": id, "jobName": job.name})),
    )
    .await;
    Ok(HttpResponse::Accepted().json(RunOnceAccepted {
        fire_id,
        message: lang
            .pick(
                "已开始执行，结果见执行日志",
                "Started: see the run log for the result",
            )
            .to_string(),
    }))
}
