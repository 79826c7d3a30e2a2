//! The job export: the jobs matching the list's filters as an Excel file.

use std::collections::HashMap;

use actix_web::{HttpResponse, get, web};
use chrono::Utc;
use qiwu_domain::builtin;
use qiwu_storage::JobFilter;
use serde_json::json;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::dto::{JobExportQuery, XlsxFile};
use crate::error::{ApiError, Problem};
use crate::export::{self, JobRow, MAX_EXPORT_ROWS};
use crate::query;
use crate::state::AppState;

/// Exports the jobs matching the filters (by id, at most 100 000) as an
/// Excel workbook.
#[utoipa::path(
    tag = "jobs",
    summary = "Export jobs to Excel",
    security(("bearer" = [])),
    params(JobExportQuery),
    responses(
        (status = 200, description = "The workbook; `X-Export-Truncated: true` when more than 100 000 jobs matched",
            body = XlsxFile, content_type = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            headers(("Content-Disposition" = String, description = "attachment; filename=\"jobs-YYYYMMDD-HHMMSS.xlsx\""))),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/jobs/export")]
pub async fn export_jobs(
    state: web::Data<AppState>,
    who: Need<perm::TaskExport>,
    query: web::Query<JobExportQuery>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let q = query.into_inner();
    let filter = JobFilter {
        name: query::text(q.name),
        group: query::text(q.group),
        handler: query::text(q.handler),
        enabled: query::boolean("enabled", q.enabled)?,
    };
    let (jobs, total) = state.store.jobs().list(&filter, 1, MAX_EXPORT_ROWS).await?;
    let labels: HashMap<String, String> = state
        .store
        .groups()
        .list()
        .await?
        .into_iter()
        .map(|g| (g.code, lang.pick(g.label_zh, g.label_en)))
        .collect();
    let rows: Vec<JobRow> = jobs
        .into_iter()
        .map(|job| JobRow {
            name: builtin::display_name(&job.name, job.builtin_key.as_deref(), lang).to_string(),
            group_label: labels
                .get(&job.group)
                .cloned()
                .unwrap_or_else(|| job.group.clone()),
            job,
        })
        .collect();
    let count = rows.len();
    let truncated = total > MAX_EXPORT_ROWS;
    let tz = state.timezone;
    let bytes = web::block(move || export::jobs_workbook(&rows, lang, tz))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    let filters = json!({
        "name": filter.name,
        "group": filter.group,
        "handler": filter.handler,
        "enabled": filter.enabled,
    });
    audit::record(
        &state,
        &who,
        Action::JobExport,
        Target::Job,
        None,
        format!("导出任务 {count} 个"),
        None,
        Some(json!({"filters": filters, "rows": count, "truncated": truncated})),
    )
    .await;
    tracing::info!(rows = count, actor = %who.sub, "jobs exported");
    Ok(export::xlsx_response(
        bytes,
        "jobs",
        Utc::now(),
        tz,
        truncated,
    ))
}
