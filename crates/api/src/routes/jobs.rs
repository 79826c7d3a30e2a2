//! Jobs: list, create, detail, update, enable/disable, delete. The writes
//! are `jobs_service` calls; these handlers extract the request and shape
//! the answer.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::Utc;
use chrono_tz::Tz;
use qiwu_domain::{CronExpr, Lang, Schedule};
use qiwu_storage::{JobFilter, JobRecord, NewJob};
use serde_json::Value;

use crate::auth::{Need, Permission, perm};
use crate::calendar_dto::CalendarEffectDto;
use crate::dto::{
    BatchEnabledResult, BatchEnabledWrite, EnabledWrite, IdList, JobChangePreview, JobCreate,
    JobDetailDto, JobDto, JobPage, JobQuery, JobUpdate, RecentRunDto, in_zone,
};
use crate::error::{ApiError, Problem, ProblemField, Text};
use crate::jobs_service::{self, body_object, check, load, merged, to_new_job};
use crate::query::{self, Id};
use crate::routes::calendars::find_calendar;
use crate::state::AppState;

/// Runs shown in a job's detail.
const RECENT_RUNS: u64 = 10;

/// Lists jobs matching the filters, a page at a time, ordered by id.
#[utoipa::path(
    tag = "jobs",
    summary = "List and search jobs",
    security(("bearer" = [])),
    params(JobQuery),
    responses(
        (status = 200, description = "A page of jobs, ordered by id", body = JobPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/jobs")]
pub async fn list_jobs(
    state: web::Data<AppState>,
    who: Need<perm::TaskBrowse>,
    query: web::Query<JobQuery>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let q = query.into_inner();
    let page = query::page(q.page)?;
    let page_size = query::page_size("pageSize", q.page_size)?;
    let filter = JobFilter {
        name: query::text(q.name),
        group: query::text(q.group),
        handler: query::text(q.handler),
        enabled: query::boolean("enabled", q.enabled)?,
    };
    let (items, total) = state.store.jobs().list(&filter, page, page_size).await?;
    Ok(HttpResponse::Ok().json(JobPage {
        items: items.into_iter().map(|j| JobDto::new(j, lang)).collect(),
        total,
        page,
        page_size,
    }))
}

/// Creates a job; absent fields take their defaults.
#[utoipa::path(
    tag = "jobs",
    summary = "Create a job",
    security(("bearer" = [])),
    request_body(
        content = JobCreate,
        description = "The new job; absent fields take their defaults",
        example = json!({"name": "nightly echo", "handler": "demo.echo", "cron": "0 30 3 * * *", "params": {"message": "hi"}})
    ),
    responses(
        (status = 201, description = "The job, created; `Location` names it", body = JobDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs")]
pub async fn create_job(
    state: web::Data<AppState>,
    who: Need<perm::TaskCreate>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let created = jobs_service::create(&state, &who, body.into_inner()).await?;
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/jobs/{}", created.id)))
        .json(JobDto::new(created, who.lang)))
}

/// The zone a job's times are computed in: its own, else the service's
/// (a job stored without one; storage refused a zone that does not parse).
pub(crate) fn job_zone(state: &AppState, job: &JobRecord) -> Tz {
    job.timezone.unwrap_or(state.timezone)
}

/// The job's schedule with its calendar, or why it has none (its user
/// calendar is gone: the engine does not arm it).
pub(crate) async fn job_schedule(
    state: &AppState,
    job: &JobRecord,
    cron: impl Into<Arc<CronExpr>>,
    tz: Tz,
) -> Result<Result<Schedule, Text>, ApiError> {
    let calendar = match job.time_rules.calendar.as_deref() {
        None => None,
        Some(code) => match find_calendar(state, code).await? {
            Some(calendar) => Some(calendar),
            None => {
                return Ok(Err(Text::new(
                    format!("任务使用的日历 {code} 已不存在：在改用其他日历之前，任务不会触发。"),
                    format!(
                        "The job's calendar {code} no longer exists: the job does not fire until it names another."
                    ),
                )));
            }
        },
    };
    Ok(job
        .time_rules
        .schedule(cron, tz, calendar)
        .map_err(|e| Text::same(e.to_string())))
}

/// A job with its cron description, next fire times and recent runs.
#[utoipa::path(
    tag = "jobs",
    summary = "Job detail",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    responses(
        (status = 200, description = "The job with its cron description, next fire times and recent runs", body = JobDetailDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/jobs/{id}")]
pub async fn get_job(
    state: web::Data<AppState>,
    who: Need<perm::TaskView>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let job = load(&state, id.into_inner().0).await?;
    let tz = job_zone(&state, &job);
    let now = Utc::now();
    let mut notices: Vec<String> = Vec::new();
    if let Some(max) = job.time_rules.max_runs
        && !job.enabled
        && job.scheduled_successes >= max
    {
        notices.push(match lang {
            Lang::Zh => format!(
                "任务已成功执行 {max} 次，达到最大执行次数，已自动停用；提高或清除 maxRuns 后可再启用。"
            ),
            Lang::En => format!(
                "The job succeeded {max} times, reaching its maxRuns, and disabled itself; raise or clear maxRuns to enable it again."
            ),
        });
    }
    // A pause with an end lists the fire times after it: the job is
    // enabled then by itself.
    let resumes_at = job.pause.until.filter(|until| !job.enabled && *until > now);
    if let Some(until) = resumes_at {
        let at = until.with_timezone(&tz).to_rfc3339();
        notices.push(match lang {
            Lang::Zh => format!("任务暂停至 {at}，届时自动启用：以下为那之后的触发时间。"),
            Lang::En => format!(
                "The job is paused until {at} and is enabled again then: these are the fire times after that."
            ),
        });
    } else if !job.enabled {
        notices.push(
            lang.pick(
                "任务已停用：以下为启用后的触发时间。",
                "The job is disabled: these are the fire times once it is enabled.",
            )
            .to_string(),
        );
    }
    let (cron_description, next_fire_times) = {
        let cron = job.cron.clone();
        let description = cron.describe(lang);
        match job_schedule(&state, &job, cron, tz).await? {
            Ok(schedule) => {
                if let Some(notice) = schedule.calendar_notice(now) {
                    notices.push(notice.message(lang));
                }
                let from = resumes_at.unwrap_or(now);
                (description, in_zone(schedule.upcoming(from, 5), tz))
            }
            Err(why) => {
                notices.push(why.pick(lang).to_string());
                (description, vec![])
            }
        }
    };
    let notice = (!notices.is_empty()).then(|| notices.join(" "));
    let recent_runs = if who.has(Permission::RunBrowse) {
        let runs = state
            .store
            .runs()
            .recent_for_job(job.id, RECENT_RUNS)
            .await?;
        Some(runs.into_iter().map(RecentRunDto::new).collect())
    } else {
        None
    };
    Ok(HttpResponse::Ok().json(JobDetailDto {
        job: JobDto::new(job, lang),
        cron_description,
        next_fire_times,
        notice,
        recent_runs,
    }))
}

/// Updates a job. The body carries the `version` it was based on; absent
/// fields keep their current values.
#[utoipa::path(
    tag = "jobs",
    summary = "Update a job",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    request_body(
        content = JobUpdate,
        description = "The version the edit is based on and the fields to change",
        example = json!({"version": 1, "cron": "0 */10 * * * *"})
    ),
    responses(
        (status = 200, description = "The job, changed", body = JobDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken or stale version", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/jobs/{id}")]
pub async fn update_job(
    state: web::Data<AppState>,
    who: Need<(perm::TaskModify, perm::TaskView)>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let updated = jobs_service::update(&state, &who, id.into_inner().0, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(JobDto::new(updated, who.lang)))
}

/// What saving an edit would do, with nothing saved: the next fire times
/// before and after, whether it starts a new schedule or a catch-up, the
/// calendar's effect, and the validation errors a `PUT` would answer.
#[utoipa::path(
    tag = "jobs",
    summary = "Preview an edit",
    description = "The body is the one `PUT /api/jobs/{id}` would send (`version` may be left out here; a stale one is listed among `errors`). Nothing is saved or audited. A body that is not an object is a 400; every field problem is in `errors` of a 200.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    request_body(
        content = JobUpdate,
        description = "The edit, as a `PUT` would send it",
        example = json!({"version": 1, "cron": "0 0 10 * * *", "timezone": "Asia/Shanghai", "calendar": "cn-workdays", "calendarRule": "workdays"})
    ),
    responses(
        (status = 200, description = "What saving would do; nothing was saved", body = JobChangePreview),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/{id}/preview-change")]
pub async fn preview_change(
    state: web::Data<AppState>,
    who: Need<(perm::TaskModify, perm::TaskView)>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let id = id.into_inner().0;
    let body = body_object(body.into_inner())?;
    let current = load(&state, id).await?;
    let now = Utc::now();
    let mut errors: Vec<ProblemField> = Vec::new();
    match body.get("version") {
        None => {}
        Some(Value::Number(n)) if n.as_i64() == Some(current.version) => {}
        Some(_) => errors.push(ProblemField {
            field: "version".into(),
            message: match lang {
                Lang::Zh => format!("version 应为修改前读到的版本号：当前是 {}", current.version),
                Lang::En => format!(
                    "version must be the version the edit is based on: the current one is {}",
                    current.version
                ),
            },
        }),
    }
    let before = {
        let tz = job_zone(&state, &current);
        match job_schedule(&state, &current, current.cron.clone(), tz).await? {
            Ok(schedule) => in_zone(schedule.upcoming(now, 5), tz),
            Err(_) => vec![],
        }
    };
    let input = merged(&state, &current, body);
    let checked = check(&state, &input).await?;
    let checked = match checked {
        Ok(valid) => valid,
        Err(field_errors) => {
            errors.extend(field_errors.iter().map(|e| ProblemField {
                field: e.field.clone(),
                message: e.message(lang),
            }));
            return Ok(HttpResponse::Ok().json(JobChangePreview {
                valid: false,
                errors,
                next_fire_times_before: before,
                next_fire_times_after: vec![],
                new_schedule: false,
                catch_up_on_save: false,
                catch_up_note: String::new(),
                calendar_effect: None,
                notice: None,
            }));
        }
    };
    let (new_cron, new_zone) = (checked.spec.cron.clone(), checked.spec.timezone);
    let new = to_new_job(checked, None);
    let new_schedule = starts_new_schedule(&current, &new);
    let after_record = JobRecord {
        cron: Arc::new(new_cron.clone()),
        timezone: new_zone,
        enabled: new.enabled,
        time_rules: new.time_rules.clone(),
        ..current.clone()
    };
    let tz = job_zone(&state, &after_record);
    let mut notices = Vec::new();
    if !new.enabled {
        notices.push(
            lang.pick(
                "保存后任务为停用状态：以下为启用后的触发时间。",
                "The job is disabled once saved: these are the fire times once it is enabled.",
            )
            .to_string(),
        );
    }
    let (after, calendar_effect) = match job_schedule(&state, &after_record, new_cron, tz).await? {
        Ok(schedule) => {
            if let Some(notice) = schedule.calendar_notice(now) {
                notices.push(notice.message(lang));
            }
            let times = schedule.upcoming(now, 5);
            let effect = times.last().and_then(|last| {
                schedule
                    .calendar_effect(now, *last)
                    .map(|effect| CalendarEffectDto::new(&effect, lang))
            });
            (in_zone(times, tz), effect)
        }
        Err(why) => {
            notices.push(why.pick(lang).to_string());
            (vec![], None)
        }
    };
    let catch_up_note = if new_schedule {
        lang.pick(
            "保存即开始新的触发计划：保存之前的触发时间不算错过，不会补跑。",
            "Saving starts a new schedule from that moment: fire times before it are not missed and are not caught up.",
        )
    } else {
        lang.pick(
            "保存不改变触发计划：已有的触发记录和待补跑的时间保持不变。",
            "Saving keeps the schedule: its records and any pending catch-up stay as they are.",
        )
    }
    .to_string();
    Ok(HttpResponse::Ok().json(JobChangePreview {
        valid: errors.is_empty(),
        errors,
        next_fire_times_before: before,
        next_fire_times_after: after,
        new_schedule,
        catch_up_on_save: false,
        catch_up_note,
        calendar_effect,
        notice: (!notices.is_empty()).then(|| notices.join(" ")),
    }))
}

/// True when saving `new` over `current` starts a new schedule, as
/// storage decides it (`JobRepo::update` moves `schedule_from`).
fn starts_new_schedule(current: &JobRecord, new: &NewJob) -> bool {
    current.cron.as_str() != new.cron
        || current.timezone.map(|tz| tz.name()) != new.timezone.as_deref()
        || current.enabled != new.enabled
        || current.time_rules.calendar != new.time_rules.calendar
        || current.time_rules.calendar_rule != new.time_rules.calendar_rule
        || current.time_rules.active_from != new.time_rules.active_from
        || current.time_rules.active_until != new.time_rules.active_until
        || current.time_rules.jitter_ms != new.time_rules.jitter_ms
}

/// Enables or disables a job at once on every instance; a disable may
/// carry a reason and an end, at which the cluster enables the job again.
#[utoipa::path(
    tag = "jobs",
    summary = "Enable, disable or pause a job",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    request_body(content = EnabledWrite, example = json!({"enabled": false, "reason": "下游系统维护 / downstream maintenance", "until": "2030-01-01T06:00:00+08:00"})),
    responses(
        (status = 200, description = "The job, with its new enabled state and pause", body = JobDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Stale version", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/jobs/{id}/enabled")]
pub async fn set_enabled(
    state: web::Data<AppState>,
    who: Need<perm::TaskModify>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let outcome =
        jobs_service::set_enabled(&state, &who, id.into_inner().0, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(JobDto::new(outcome.after, who.lang)))
}

/// Enables, disables or pauses several jobs at once: by ids, or every job
/// of a group. Each job written gets its own audit entry.
#[utoipa::path(
    tag = "jobs",
    summary = "Enable, disable or pause several jobs",
    security(("bearer" = [])),
    request_body(content = BatchEnabledWrite, example = json!({"ids": [4, 5], "enabled": false, "reason": "月末结账 / month-end closing", "until": "2030-01-01T06:00:00+08:00"})),
    responses(
        (status = 200, description = "Which jobs were written, which already were as asked, which ids name no job", body = BatchEnabledResult),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/batch-enabled")]
pub async fn batch_enabled(
    state: web::Data<AppState>,
    who: Need<perm::TaskModify>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let batch = jobs_service::batch_enabled(&state, &who, body.into_inner()).await?;
    Ok(HttpResponse::Ok().json(BatchEnabledResult {
        updated: batch.changed.iter().map(|o| o.after.id).collect(),
        unchanged: batch.unchanged,
        not_found: batch.not_found,
    }))
}

/// Deletes a job; its runs stay in the run log.
#[utoipa::path(
    tag = "jobs",
    summary = "Delete a job",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Job id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/jobs/{id}")]
pub async fn delete_job(
    state: web::Data<AppState>,
    who: Need<perm::TaskRemove>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    jobs_service::delete(&state, &who, id.into_inner().0).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Deletes several jobs at once; ids that do not exist are ignored.
#[utoipa::path(
    tag = "jobs",
    summary = "Delete several jobs",
    security(("bearer" = [])),
    request_body(content = IdList, example = json!({"ids": [4, 5]})),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/jobs/batch-delete")]
pub async fn batch_delete(
    state: web::Data<AppState>,
    who: Need<perm::TaskRemove>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    jobs_service::batch_delete(&state, &who, body.into_inner()).await?;
    Ok(HttpResponse::NoContent().finish())
}
