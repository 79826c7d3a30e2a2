//! "Run once": queue a fire of a job now, with its saved params.

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::{Permission, Principal};
use crate::error::{ApiError, ErrorKind, Problem, Text};

/// What a refused run-once tells the caller to wait: about the time an
/// instance takes to start queued fires (their poll runs every 5 s).
const RETRY_AFTER_SECS: u64 = 5;
use crate::query::Id;
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
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    responses(
        (status = 202, description = "Queued: the fire runs with the saved params; see the run log for the result", body = RunOnceAccepted),
        (status = 429, description = "The job already has `QIWU_MAX_PENDING_RUN_ONCE` run-once fires waiting; try again after `Retry-After` seconds",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "Seconds to wait before asking again"))),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A freeze window holds the job now: the problem names it and when it ends", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/run")]
pub async fn run_once(
    state: web::Data<AppState>,
    who: Principal,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    who.require(&[Permission::TaskRun])?;
    let lang = who.lang;
    let id = id.into_inner().0;
    let job = state
        .store
        .jobs()
        .get(id)
        .await
        .map_err(|e| ApiError::storage(lang, e))?
        .ok_or_else(|| ApiError::job_not_found(lang, id))?;
    crate::routes::freezes::refuse_if_frozen(&state, lang, &job, Utc::now()).await?;
    // Bound the queue: each pending fire becomes a task when an instance
    // takes it. Counting first lets a few concurrent requests pass the
    // bound together, which is harmless; an unbounded queue is not.
    let pending = state
        .store
        .fires()
        .pending_count(job.id)
        .await
        .map_err(|e| ApiError::storage(lang, e))?;
    if pending >= state.max_pending_run_once {
        let limit = state.max_pending_run_once;
        return Err(ApiError::new(
            lang,
            ErrorKind::TooManyRequests {
                text: Text::new(
                    format!(
                        "任务 {id} 已有 {pending} 次“执行一次”在排队（上限 {limit}）：请等它们开始后再试"
                    ),
                    format!(
                        "Job {id} already has {pending} run-once fires waiting (at most {limit}): try again once they have started"
                    ),
                ),
                retry_after_secs: RETRY_AFTER_SECS,
            },
        ));
    }
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
