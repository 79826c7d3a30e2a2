//! Backfill (issue 11, part 3): fire the times of a job's schedule in a
//! past range that have no record, oldest first, with trigger `backfill`;
//! follow one and cancel it as a whole.

use actix_web::{HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use qiwu_domain::backfill::{self, BackfillError, MAX_FIRES, PlannedTime, TimeState};
use qiwu_storage::{BackfillFire, BackfillRecord};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::body::Fields;
use crate::error::{ApiError, ErrorKind, Noun, Problem, ProblemFieldText, Text};
use crate::query::Id;
use crate::routes::jobs::{job_schedule, job_zone};
use crate::state::AppState;

/// A backfill request.
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct BackfillRequest {
    /// The first instant of the range (RFC 3339 with an offset), included.
    pub from: DateTime<Utc>,
    /// The last instant of the range, included; not in the future.
    pub to: DateTime<Utc>,
    /// Only list the times (nothing is written). Default false.
    pub dry_run: Option<bool>,
    /// Most times to fire, 1–1000 (default 1000): a range with more
    /// missing times is refused (400 naming the count), never truncated.
    #[schema(minimum = 1, maximum = 1000)]
    pub max_fires: Option<i64>,
}

/// What a backfill does with one fire time of the range.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum BackfillTimeState {
    /// No record: fired (or, in a dry run, would be).
    Missing,
    /// A record exists (a run, a skip, or a catch-up standing for it).
    Recorded,
    /// After the start of the job's current schedule while it is
    /// enabled: the schedule records it itself.
    Scheduled,
}

/// One fire time of the range.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackfillTimeDto {
    pub scheduled_at: DateTime<Utc>,
    #[schema(value_type = BackfillTimeState)]
    pub state: &'static str,
}

/// The answer to a backfill request.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackfillAccepted {
    /// The backfill to follow and cancel; absent in a dry run.
    pub backfill_id: Option<i64>,
    pub dry_run: bool,
    /// The times fired (or, in a dry run, that would be), oldest first.
    pub fires: Vec<DateTime<Utc>>,
    /// Every fire time of the schedule in the range and what the backfill
    /// does with it.
    pub times: Vec<BackfillTimeDto>,
    pub message: String,
}

/// One fire of a backfill.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackfillFireDto {
    pub fire_id: i64,
    pub scheduled_at: DateTime<Utc>,
    /// `queued` (waiting its turn), `pending` (released to the
    /// instances), `claimed` (running or ended) or `done`.
    pub state: String,
    /// The latest run of the fire (its last attempt), once it has one.
    pub run_id: Option<i64>,
    #[schema(value_type = Option<crate::dto::RunStatus>)]
    pub run_status: Option<String>,
}

/// A backfill and its progress.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackfillDto {
    pub id: i64,
    pub job_id: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// `running`, `done` or `cancelled`.
    pub status: String,
    /// Fires written when it was asked for.
    pub total: i32,
    /// Fires whose run has ended.
    pub finished: usize,
    /// Fires not started yet (dropped when cancelled).
    pub remaining: usize,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub cancelled_by: Option<String>,
    /// Its fires, oldest first (a cancel drops those not started).
    pub fires: Vec<BackfillFireDto>,
}

impl BackfillDto {
    fn new(record: BackfillRecord, fires: Vec<BackfillFire>) -> BackfillDto {
        let ended = |f: &BackfillFire| {
            f.run_status
                .as_deref()
                .is_some_and(|status| status != "running")
        };
        BackfillDto {
            id: record.id,
            job_id: record.job_id,
            from: record.from,
            to: record.to,
            status: record.status,
            total: record.total,
            finished: fires.iter().filter(|f| ended(f)).count(),
            remaining: fires.iter().filter(|f| f.run_id.is_none()).count(),
            requested_by: record.requested_by,
            created_at: record.created_at,
            finished_at: record.finished_at,
            cancelled_by: record.cancelled_by,
            fires: fires
                .into_iter()
                .map(|f| BackfillFireDto {
                    fire_id: f.fire_id,
                    scheduled_at: f.scheduled_at,
                    state: f.state,
                    run_id: f.run_id,
                    run_status: f.run_status,
                })
                .collect(),
        }
    }
}

/// The fields a backfill body may have.
const FIELDS: &[&str] = &["from", "to", "dryRun", "maxFires"];

/// Fires the times of the job's schedule in `[from, to]` that have no
/// record, oldest first, one at a time.
#[utoipa::path(
    tag = "jobs",
    summary = "Backfill a job's missed times",
    description = "Every fire time of the job's schedule (its cron in its zone, calendar and rule, `activeFrom`/`activeUntil`) in `[from, to]` that no record covers gets a fire with trigger `backfill`, run oldest first, one at a time, each under the job's overlap rule and recorded like any fire. A time is written under the ledger's key of the scheduled fire of that time, so it is recorded exactly once across the cluster. Times after the start of the job's current schedule while the job is enabled are the schedule's own (`scheduled`) and are never backfilled. `to` may not be in the future; more missing times than `maxFires` is a 400 naming the count. `dryRun` lists the times and writes nothing. Audited as `job.backfill`; needs `scheduler.task.run`.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    request_body(
        content = BackfillRequest,
        example = json!({"from": "2026-02-01T00:00:00+08:00", "to": "2026-02-28T23:59:59+08:00", "dryRun": true})
    ),
    responses(
        (status = 200, description = "Dry run: the times it would fire, and those already recorded", body = BackfillAccepted),
        (status = 202, description = "Accepted: the backfill runs its fires oldest first; follow it with `GET /api/jobs/{id}/backfill/{backfillId}`", body = BackfillAccepted),
        (status = 400, description = "A field is invalid (`from`, `to`, `maxFires`), `to` is in the future, or the range holds more missing times than `maxFires`", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The job has no schedule to backfill (its calendar is gone)", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/backfill")]
pub async fn create_backfill(
    state: web::Data<AppState>,
    who: Need<perm::TaskRun>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let id = id.into_inner().0;
    let now = Utc::now();
    let mut fields = Fields::new(body.into_inner(), FIELDS)?;
    let from = required_instant(&mut fields, "from");
    let to = required_instant(&mut fields, "to");
    let dry_run = fields.boolean("dryRun", false).unwrap_or(false);
    let max_fires = fields
        .integer("maxFires", 1, i64::from(MAX_FIRES), false)
        .unwrap_or(i64::from(MAX_FIRES));
    fields.finish()?;
    let (Some(from), Some(to)) = (from, to) else {
        return Err(ApiError::bad_request(
            "缺少时间范围",
            "The range is missing",
        ));
    };
    let problems = backfill::check_request(from, to, now, max_fires);
    if !problems.is_empty() {
        return Err(refused(&problems));
    }
    let job = state
        .store
        .jobs()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::JOB, id))?;
    let tz = job_zone(&state, &job);
    let schedule = job_schedule(&state, &job, job.cron.clone(), tz)
        .await?
        .map_err(|why| ApiError::new(ErrorKind::Conflict(why)))?;
    let covered = state.store.backfills().covered(id, from, to).await?;
    let owned = job.enabled.then_some(job.schedule_from);
    let max = u32::try_from(max_fires).unwrap_or(MAX_FIRES);
    let planned =
        backfill::plan(&schedule, from, to, max, &covered, owned).map_err(|e| refused(&[e]))?;
    let missing: Vec<DateTime<Utc>> = planned
        .iter()
        .filter(|p| p.state == TimeState::Missing)
        .map(|p| p.at)
        .collect();
    if dry_run {
        return Ok(HttpResponse::Ok().json(BackfillAccepted {
            backfill_id: None,
            dry_run: true,
            message: lang
                .pick("试运行：未写入任何内容", "Dry run: nothing was written")
                .to_string(),
            fires: missing,
            times: times(&planned, &[]),
        }));
    }
    let created = state
        .store
        .backfills()
        .create(id, from, to, &missing, &who.actor(), now)
        .await?;
    let backfill_id = created.record.id;
    // The first fire is released here; each next one when its
    // predecessor ends (or at an instance's pending poll).
    let first = state
        .store
        .backfills()
        .advance(backfill_id, None, &|_, _| true, now)
        .await?;
    if let Some(fire) = first {
        state.changes.fire_queued(fire);
    }
    tracing::info!(job = id, backfill = backfill_id, fires = created.times.len(), actor = %who.sub, "backfill queued");
    audit::record(
        &state,
        &who,
        Action::JobBackfill,
        Target::Job,
        Some(id.to_string()),
        format!(
            "补跑任务 {}：{} 次（补跑 {backfill_id}）",
            job.name,
            created.times.len()
        ),
        None,
        Some(json!({
            "backfillId": backfill_id,
            "jobId": id,
            "jobName": job.name,
            "from": from,
            "to": to,
            "fires": created.times.len(),
        })),
    )
    .await;
    // Times another writer recorded meanwhile are listed as recorded.
    let taken: Vec<DateTime<Utc>> = missing
        .iter()
        .copied()
        .filter(|t| !created.times.contains(t))
        .collect();
    Ok(HttpResponse::Accepted().json(BackfillAccepted {
        backfill_id: Some(backfill_id),
        dry_run: false,
        message: lang
            .pick(
                "已开始补跑，按时间先后逐个执行，结果见执行日志",
                "Started: the times run oldest first, one at a time; see the run log for the results",
            )
            .to_string(),
        times: times(&planned, &taken),
        fires: created.times,
    }))
}

/// A backfill of the job and its progress.
#[utoipa::path(
    tag = "jobs",
    summary = "A backfill's progress",
    security(("bearer" = [])),
    params(
        ("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id"),
        ("backfillId" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Backfill id"),
    ),
    responses(
        (status = 200, description = "The backfill, its status and each fire's run", body = BackfillDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/jobs/{id}/backfill/{backfillId}")]
pub async fn get_backfill(
    state: web::Data<AppState>,
    _who: Need<perm::TaskRun>,
    path: web::Path<(Id, Id)>,
) -> Result<HttpResponse, ApiError> {
    let (Id(job_id), Id(id)) = path.into_inner();
    let repo = state.store.backfills();
    let record = repo
        .get(job_id, id)
        .await?
        .ok_or_else(|| not_found(job_id, id))?;
    let fires = repo.fires(id).await?;
    Ok(HttpResponse::Ok().json(BackfillDto::new(record, fires)))
}

/// Cancels a backfill as a whole.
#[utoipa::path(
    tag = "jobs",
    summary = "Cancel a backfill",
    description = "Its fires not yet started are dropped (their times have no record again and may be backfilled later), and its running run is cancelled like `POST /api/runs/{id}/cancel` does (it ends `cancelled`, no retry). Cancelling a backfill that has ended changes nothing and answers it as it is. Audited as `job.backfill_cancel`; needs `scheduler.task.run`.",
    security(("bearer" = [])),
    params(
        ("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id"),
        ("backfillId" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Backfill id"),
    ),
    responses(
        (status = 202, description = "Cancelled (or already ended): the backfill as it is now", body = BackfillDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/backfill/{backfillId}/cancel")]
pub async fn cancel_backfill(
    state: web::Data<AppState>,
    who: Need<perm::TaskRun>,
    path: web::Path<(Id, Id)>,
) -> Result<HttpResponse, ApiError> {
    let (Id(job_id), Id(id)) = path.into_inner();
    let repo = state.store.backfills();
    let cancelled = repo
        .cancel(job_id, id, &who.actor(), Utc::now())
        .await?
        .ok_or_else(|| not_found(job_id, id))?;
    for run in &cancelled.runs {
        state.changes.run_cancel_requested(*run);
    }
    if cancelled.first {
        audit::record(
            &state,
            &who,
            Action::JobBackfillCancel,
            Target::Job,
            Some(job_id.to_string()),
            format!(
                "取消补跑 {id}（任务 {job_id}，未开始的 {} 次已放弃）",
                cancelled.dropped
            ),
            None,
            Some(json!({
                "backfillId": id,
                "jobId": job_id,
                "dropped": cancelled.dropped,
                "cancelledRuns": cancelled.runs,
            })),
        )
        .await;
        tracing::info!(job = job_id, backfill = id, dropped = cancelled.dropped, actor = %who.sub, "backfill cancelled");
    }
    let fires = repo.fires(id).await?;
    Ok(HttpResponse::Accepted().json(BackfillDto::new(cancelled.record, fires)))
}

fn required_instant(fields: &mut Fields, field: &str) -> Option<DateTime<Utc>> {
    if fields.value(field).is_none() {
        fields.fail(
            field,
            format!("{field} 必填"),
            format!("{field} is required"),
        );
        return None;
    }
    fields.instant(field).map(|t| t.with_timezone(&Utc))
}

fn times(planned: &[PlannedTime], taken: &[DateTime<Utc>]) -> Vec<BackfillTimeDto> {
    planned
        .iter()
        .map(|p| BackfillTimeDto {
            scheduled_at: p.at,
            state: if taken.contains(&p.at) {
                TimeState::Recorded.as_str()
            } else {
                p.state.as_str()
            },
        })
        .collect()
}

fn not_found(job_id: i64, id: i64) -> ApiError {
    ApiError::not_found(
        format!("任务 {job_id} 没有补跑 {id}"),
        format!("Job {job_id} has no backfill {id}"),
    )
}

/// The 400 of a refused request, each problem naming its field.
fn refused(problems: &[BackfillError]) -> ApiError {
    let errors = problems
        .iter()
        .map(|p| match p {
            BackfillError::EmptyRange => ProblemFieldText::new(
                "from",
                Text::new("from 不能晚于 to", "from must not be after to"),
            ),
            BackfillError::InFuture => ProblemFieldText::new(
                "to",
                Text::new(
                    "to 不能晚于现在：补跑只执行已经过去的时间",
                    "to must not be in the future: a backfill only fires times already past",
                ),
            ),
            BackfillError::MaxFires(n) => ProblemFieldText::new(
                "maxFires",
                Text::new(
                    format!("maxFires 应为 1–{MAX_FIRES} 的整数（收到 {n}）"),
                    format!("maxFires must be a whole number from 1 to {MAX_FIRES} (got {n})"),
                ),
            ),
            BackfillError::RangeTooWide => ProblemFieldText::new(
                "to",
                Text::new(
                    format!(
                        "范围内的触发时间超过 {} 个：请缩小范围",
                        backfill::MAX_SCAN
                    ),
                    format!(
                        "The range holds more than {} fire times: narrow it",
                        backfill::MAX_SCAN
                    ),
                ),
            ),
            BackfillError::TooMany { count, max } => ProblemFieldText::new(
                "maxFires",
                Text::new(
                    format!("范围内有 {count} 个缺少记录的时间，超过 maxFires（{max}）：请缩小范围或调高 maxFires（最多 {MAX_FIRES}）"),
                    format!("The range has {count} times without a record, more than maxFires ({max}): narrow the range or raise maxFires (at most {MAX_FIRES})"),
                ),
            ),
        })
        .collect();
    ApiError::validation(errors)
}
