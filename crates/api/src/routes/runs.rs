//! The run log: list, detail, delete one or many, clear, export.

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::Utc;
use qiwu_storage::{CancelRequest, RunCursor, RunFilter};
use serde_json::json;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::dto::{
    CancelAccepted, IdList, RunDetailDto, RunExportQuery, RunPage, RunQuery, RunSummaryDto,
    XlsxFile,
};
use crate::error::{ApiError, ErrorKind, Noun, Problem, Text};
use crate::export::{self, MAX_EXPORT_ROWS};
use crate::query::{self, Id};
use crate::state::AppState;

const TRIGGERS: [&str; 4] = ["schedule", "manual", "misfire", "backfill"];

const STATUSES: [&str; 6] = [
    "running",
    "success",
    "failed",
    "skipped",
    "timeout",
    "cancelled",
];

/// The filters shared by the list and the export, each checked and named.
fn run_filter(
    job_id: Option<String>,
    job_name: Option<String>,
    handler: Option<String>,
    status: Option<String>,
    trigger: Option<String>,
    (started_from, started_to): (Option<String>, Option<String>),
) -> Result<RunFilter, ApiError> {
    let filter = RunFilter {
        job_id: query::id("jobId", job_id)?,
        job_name: query::text(job_name),
        handler: query::text(handler),
        status: query::one_of("status", status, &STATUSES)?,
        trigger: query::one_of("trigger", trigger, &TRIGGERS)?,
        started_from: query::instant("startedFrom", started_from)?,
        started_to: query::instant("startedTo", started_to)?,
    };
    query::range("startedTo", filter.started_from, filter.started_to)?;
    Ok(filter)
}

/// The filters as the audit log records them.
fn filter_json(f: &RunFilter) -> serde_json::Value {
    json!({
        "jobId": f.job_id,
        "jobName": f.job_name,
        "handler": f.handler,
        "status": f.status,
        "trigger": f.trigger,
        "startedFrom": f.started_from,
        "startedTo": f.started_to,
    })
}

/// Lists runs newest first, a page at a time; pass `nextCursor` back as
/// `cursor` for the next page.
#[utoipa::path(
    tag = "runs",
    summary = "List and search the run log",
    security(("bearer" = [])),
    params(RunQuery),
    responses(
        (status = 200, description = "A page of the run log, newest first", body = RunPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/runs")]
pub async fn list_runs(
    state: web::Data<AppState>,
    _who: Need<perm::RunBrowse>,
    query: web::Query<RunQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let filter = run_filter(
        q.job_id,
        q.job_name,
        q.handler,
        q.status,
        q.trigger,
        (q.started_from, q.started_to),
    )?;
    let limit = query::limit(q.limit)?;
    let cursor = query::text(q.cursor)
        .map(|c| RunCursor::decode(&c))
        .transpose()?;
    let (items, next) = state.store.runs().list(&filter, limit, cursor).await?;
    Ok(HttpResponse::Ok().json(RunPage {
        items: items.into_iter().map(RunSummaryDto::new).collect(),
        next_cursor: next.map(|c| c.encode()),
    }))
}

/// Exports the runs matching the filters (newest first, at most 100 000)
/// as an Excel workbook.
#[utoipa::path(
    tag = "runs",
    summary = "Export runs to Excel",
    security(("bearer" = [])),
    params(RunExportQuery),
    responses(
        (status = 200, description = "The workbook; `X-Export-Truncated: true` when more than 100 000 runs matched",
            body = XlsxFile, content_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            headers(("Content-Disposition" = String, description = "attachment; filename=\"runs-YYYYMMDD-HHMMSS.xlsx\""))),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/runs/export")]
pub async fn export_runs(
    state: web::Data<AppState>,
    who: Need<perm::RunExport>,
    query: web::Query<RunExportQuery>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let q = query.into_inner();
    let filter = run_filter(
        q.job_id,
        q.job_name,
        q.handler,
        q.status,
        q.trigger,
        (q.started_from, q.started_to),
    )?;
    // One row more than the cap tells whether the export was cut.
    let mut rows = state
        .store
        .runs()
        .export(&filter, MAX_EXPORT_ROWS + 1)
        .await?;
    let truncated = rows.len() as u64 > MAX_EXPORT_ROWS;
    rows.truncate(MAX_EXPORT_ROWS as usize);
    let count = rows.len();
    let tz = state.timezone;
    // Building 100 000 rows takes a while: keep it off the async workers.
    let bytes = web::block(move || export::runs_workbook(&rows, lang, tz))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    audit::record(
        &state,
        &who,
        Action::RunExport,
        Target::Run,
        None,
        format!("导出执行记录 {count} 条"),
        None,
        Some(json!({"filters": filter_json(&filter), "rows": count, "truncated": truncated})),
    )
    .await;
    tracing::info!(rows = count, actor = %who.sub, "runs exported");
    Ok(export::xlsx_response(
        bytes,
        "runs",
        Utc::now(),
        tz,
        truncated,
    ))
}

/// One run with its output and error.
#[utoipa::path(
    tag = "runs",
    summary = "Run detail",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Run id")),
    responses(
        (status = 200, description = "The run with its output and error", body = RunDetailDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/runs/{id}")]
pub async fn get_run(
    state: web::Data<AppState>,
    _who: Need<perm::RunView>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let run = state
        .store
        .runs()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::RUN, id))?;
    let started_by = state.store.fires().started_by(run.fire_id).await?;
    let mut detail = RunDetailDto::new(run);
    detail.started_by = started_by;
    Ok(HttpResponse::Ok().json(detail))
}

/// Stops a running run wherever it runs: its instance is told at once (and
/// finds the request in the database within a few seconds if the message
/// is lost), the handler gets its stop signal, and the run ends
/// `cancelled`, naming who cancelled it, with no retry. A non-concurrent
/// job's next fire waits until the handler has really returned. Asking
/// again while the run is still stopping answers the same.
#[utoipa::path(
    tag = "runs",
    summary = "Cancel a running run",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Run id")),
    responses(
        (status = 202, description = "The cancel is requested; the run ends `cancelled` once its instance stopped it", body = CancelAccepted),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run is not running (it has ended)", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/runs/{id}/cancel")]
pub async fn cancel_run(
    state: web::Data<AppState>,
    who: Need<perm::TaskRun>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let id = id.into_inner().0;
    let asked = state
        .store
        .runs()
        .request_cancel(id, &who.actor(), Utc::now())
        .await?;
    let (run, first) = match asked {
        CancelRequest::Requested { run, first } => (run, first),
        CancelRequest::NotFound => return Err(ApiError::missing(Noun::RUN, id)),
        CancelRequest::Finished(run) => {
            return Err(ApiError::new(ErrorKind::Conflict(Text::new(
                format!("执行记录 {id} 已结束（{}），无法取消", run.status.as_str()),
                format!(
                    "Run {id} has ended ({}): there is nothing to cancel",
                    run.status.as_str()
                ),
            ))));
        }
    };
    // Also when asked again: a message lost the first time is sent again.
    state.changes.run_cancel_requested(id);
    let cancelled_by = run.cancelled_by.clone().unwrap_or_else(|| who.actor());
    if first {
        audit::record(
            &state,
            &who,
            Action::RunCancel,
            Target::Run,
            Some(id.to_string()),
            format!("取消执行 {id}（任务「{}」）", run.job_name),
            None,
            Some(json!({"runId": id, "fireId": run.fire_id, "jobId": run.job_id, "jobName": run.job_name})),
        )
        .await;
    }
    tracing::info!(run = id, actor = %who.sub, first, "run cancel requested");
    Ok(HttpResponse::Accepted().json(CancelAccepted {
        run_id: id,
        cancelled_by,
        message: lang
            .pick(
                "已请求取消，执行结束后状态为“已取消”",
                "Cancel requested: the run ends as cancelled once its handler is told to stop",
            )
            .to_string(),
    }))
}

/// Deletes one run; it disappears from the API at once.
#[utoipa::path(
    tag = "runs",
    summary = "Delete a run",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Run id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/runs/{id}")]
pub async fn delete_run(
    state: web::Data<AppState>,
    who: Need<perm::RunRemove>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let runs = state.store.runs();
    // Read first: the audit entry keeps what was deleted.
    let run = runs
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::RUN, id))?;
    let deleted = runs.soft_delete(id, Utc::now()).await?;
    if !deleted {
        // Someone else deleted it in between.
        return Err(ApiError::missing(Noun::RUN, id));
    }
    let summary = format!("删除执行记录 {id}（任务「{}」）", run.job_name);
    let before = serde_json::to_value(RunSummaryDto::new(run)).ok();
    audit::record(
        &state,
        &who,
        Action::RunDelete,
        Target::Run,
        Some(id.to_string()),
        summary,
        before,
        None,
    )
    .await;
    tracing::info!(run = id, actor = %who.sub, "run deleted");
    Ok(HttpResponse::NoContent().finish())
}

/// Deletes several runs at once; ids that do not exist are ignored.
#[utoipa::path(
    tag = "runs",
    summary = "Delete several runs",
    security(("bearer" = [])),
    request_body(content = IdList, example = json!({"ids": [1, 2]})),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/runs/batch-delete")]
pub async fn batch_delete_runs(
    state: web::Data<AppState>,
    who: Need<perm::RunRemove>,
    body: web::Json<serde_json::Value>,
) -> Result<HttpResponse, ApiError> {
    let mut ids = IdList::read(body.into_inner())?;
    ids.sort_unstable();
    ids.dedup();
    let deleted = state
        .store
        .runs()
        .soft_delete_many(&ids, Utc::now())
        .await?;
    if deleted > 0 {
        audit::record(
            &state,
            &who,
            Action::RunDelete,
            Target::Run,
            None,
            format!("批量删除执行记录 {deleted} 条"),
            None,
            Some(json!({"ids": ids, "deleted": deleted})),
        )
        .await;
    }
    tracing::info!(count = deleted, actor = %who.sub, "runs deleted");
    Ok(HttpResponse::NoContent().finish())
}

/// Deletes every run; they disappear from the API at once.
#[utoipa::path(
    tag = "runs",
    summary = "Clear the run log",
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Cleared"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/runs/clear")]
pub async fn clear_runs(
    state: web::Data<AppState>,
    who: Need<perm::RunRemove>,
) -> Result<HttpResponse, ApiError> {
    let cleared = state.store.runs().clear(Utc::now()).await?;
    // Like the other deletes, an entry only when something was deleted.
    if cleared > 0 {
        audit::record(
            &state,
            &who,
            Action::RunClear,
            Target::Run,
            None,
            format!("清空执行记录 {cleared} 条"),
            None,
            Some(json!({"deleted": cleared})),
        )
        .await;
    }
    tracing::info!(count = cleared, actor = %who.sub, "run log cleared");
    Ok(HttpResponse::NoContent().finish())
}
