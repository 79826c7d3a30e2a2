//! Calendars (issue 11): the built-in `cn-workdays` (read-only) and user
//! calendars (super admins write them; audited).

use std::sync::Arc;

use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::Utc;
use qiwu_domain::calendar::user;
use qiwu_domain::calendar::{Calendar, builtin};
use qiwu_storage::StorageError;
use serde_json::{Map, Value};

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::calendar_dto::{CalendarCreate, CalendarDto, CalendarSummaryDto, CalendarUpdate};
use crate::error::{ApiError, ErrorKind, Noun, Problem, ProblemFieldText, Text, field_errors};
use crate::query::MAX_SAFE_INTEGER;
use crate::state::AppState;

fn read_only(code: &str) -> ApiError {
    ApiError::new(ErrorKind::Conflict(Text::new(
        format!("日历 {code} 是内置日历，不能修改或删除；需要别的日期请新建一个日历"),
        format!(
            "Calendar {code} is built in and cannot be changed or deleted; create a calendar of your own for other dates"
        ),
    )))
}

pub(crate) fn body_object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request(
            "请求体必须是一个 JSON 对象",
            "The request body must be a JSON object",
        )),
    }
}

/// The `version` of an update body: a whole number from 1 to 2^53 − 1.
pub(crate) fn version_of(body: &Map<String, Value>) -> Result<i64, ProblemFieldText> {
    let whole = |v: &Value| {
        let n = v.as_number()?;
        n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64)
                .map(|f| f as i64)
        })
    };
    match body.get("version") {
        None | Some(Value::Null) => Err(ProblemFieldText::new(
            "version",
            Text::new(
                "version 必填：请带上修改前读到的 version",
                "version is required: send the version the edit is based on",
            ),
        )),
        Some(v) => whole(v)
            .filter(|n| (1..=MAX_SAFE_INTEGER).contains(n))
            .ok_or_else(|| {
                ProblemFieldText::new(
                    "version",
                    Text::new(
                        format!("version 应为 1–{MAX_SAFE_INTEGER} 的整数"),
                        format!("version must be a whole number from 1 to {MAX_SAFE_INTEGER}"),
                    ),
                )
            }),
    }
}

/// The calendar a code names, built-in or stored; `None` when there is none.
pub async fn find_calendar(
    state: &AppState,
    code: &str,
) -> Result<Option<Arc<Calendar>>, ApiError> {
    if let Some(cal) = builtin::find(code) {
        return Ok(Some(cal));
    }
    // No calendar has another code; looking one up (U+0000 included, which
    // PostgreSQL refuses even in a comparison) would only find nothing.
    if !user::valid_code(code) {
        return Ok(None);
    }
    let Some(record) = state.store.calendars().get(code).await? else {
        return Ok(None);
    };
    Ok(Some(Arc::new(record.to_calendar()?)))
}

/// Every calendar code a job may name: the built-in ones, then the stored.
pub async fn calendar_codes(state: &AppState) -> Result<Vec<String>, ApiError> {
    let mut codes: Vec<String> = builtin::BUILTIN_CODES
        .iter()
        .map(|c| c.to_string())
        .collect();
    codes.extend(state.store.calendars().codes().await?);
    Ok(codes)
}

/// A calendar as the audit log keeps it (Chinese names).
fn calendar_json(dto: &CalendarDto) -> Option<Value> {
    serde_json::to_value(dto).ok()
}

/// Lists calendars: the built-in ones first, then user calendars by code.
#[utoipa::path(
    tag = "calendars",
    summary = "List calendars",
    description = "The built-in `cn-workdays` (China's statutory holidays and make-up working days, read-only) and the user calendars, without their dates. Job editors read this list to pick a calendar.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every calendar without its dates: the built-in ones, then user calendars by code", body = Vec<CalendarSummaryDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/calendars")]
pub async fn list_calendars(
    state: web::Data<AppState>,
    who: Need<perm::TaskBrowse>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let mut items: Vec<CalendarSummaryDto> = builtin::BUILTIN_CODES
        .iter()
        .filter_map(|code| builtin::find(code))
        .map(|cal| CalendarSummaryDto::builtin(&cal, lang))
        .collect();
    items.extend(
        state
            .store
            .calendars()
            .list()
            .await?
            .into_iter()
            .map(CalendarSummaryDto::user),
    );
    Ok(HttpResponse::Ok().json(items))
}

/// One calendar with every date (and, for the built-in one, the notices it
/// is made of).
#[utoipa::path(
    tag = "calendars",
    summary = "Get a calendar",
    security(("bearer" = [])),
    params(("code" = String, Path, description = "Calendar code, such as cn-workdays: 1–64 lower-case letters, digits, `_` or `-`; another names no calendar (404)", pattern = r"^[a-z0-9_-]{1,64}$", max_length = 64)),
    responses(
        (status = 200, description = "The calendar with every date, and for the built-in one the notices it is made of", body = CalendarDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/calendars/{code}")]
pub async fn get_calendar(
    state: web::Data<AppState>,
    who: Need<perm::TaskBrowse>,
    code: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let code = code.into_inner();
    if let Some(cal) = builtin::find(&code) {
        return Ok(HttpResponse::Ok().json(CalendarDto::builtin(&cal, lang)));
    }
    if !user::valid_code(&code) {
        return Err(ApiError::missing(Noun::CALENDAR, &code));
    }
    let record = state
        .store
        .calendars()
        .get(&code)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::CALENDAR, &code))?;
    Ok(HttpResponse::Ok().json(CalendarDto::user(record)))
}

/// Creates a user calendar (super admins only).
#[utoipa::path(
    tag = "calendars",
    summary = "Create a calendar",
    description = "A named list of dates, each a `holiday` (a day off, even on a weekday) or a `workday` (a working day, even on a weekend). Without firstYear/lastYear the calendar has data for the years of its first and last date. Audited as `calendar.create`.",
    security(("bearer" = [])),
    request_body(
        content = CalendarCreate,
        example = json!({
            "code": "acme-2026",
            "name": "公司日历",
            "description": "Company days off and the Saturday made up for them",
            "firstYear": 2026,
            "lastYear": 2026,
            "dates": [
                {"date": "2026-12-24", "kind": "holiday", "name": "平安夜"},
                {"date": "2026-12-26", "kind": "workday", "name": "平安夜调休"}
            ]
        })
    ),
    responses(
        (status = 201, description = "The calendar, created (version 1)", body = CalendarDto),
        (status = 400, description = "A field is invalid: `errors` names each (`code`, `name`, `dates[3].kind`, …) and says what is allowed; dates must be distinct and inside `firstYear`–`lastYear`, given both or neither, and the code must not be a built-in one", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The code is taken", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/calendars")]
pub async fn create_calendar(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let body = body_object(body.into_inner())?;
    let spec = user::validate(&body, None).map_err(|e| ApiError::validation(field_errors(&e)))?;
    let created = state
        .store
        .calendars()
        .create(&spec, &who.actor(), Utc::now())
        .await
        .map_err(|e| match e {
            StorageError::AlreadyExists => ApiError::exists(Noun::CALENDAR, &spec.code),
            other => ApiError::from(other),
        })?;
    let dto = CalendarDto::user(created);
    audit::record(
        &state,
        &who,
        Action::CalendarCreate,
        Target::Calendar,
        Some(dto.code.clone()),
        format!("创建日历「{}」（{}）", dto.name, dto.code),
        None,
        calendar_json(&dto),
    )
    .await;
    tracing::info!(calendar = %dto.code, actor = %who.sub, "calendar created");
    Ok(HttpResponse::Created().json(dto))
}

/// Replaces a user calendar: name, description, years and every date
/// (super admins only).
#[utoipa::path(
    tag = "calendars",
    summary = "Replace a calendar",
    description = "The body is a whole calendar, as for `POST`, without `code` but with the `version` it was based on (409 when stale). Absent optional fields become empty. Built-in calendars are read-only (409). The jobs naming the calendar follow the new dates at once (their next fire times are computed again; times before the edit are not revisited). Audited as `calendar.modify`.",
    security(("bearer" = [])),
    params(("code" = String, Path, description = "Calendar code, such as cn-workdays: 1–64 lower-case letters, digits, `_` or `-`; another names no calendar (404)", pattern = r"^[a-z0-9_-]{1,64}$", max_length = 64)),
    request_body(
        content = CalendarUpdate,
        example = json!({
            "version": 1,
            "name": "公司日历",
            "firstYear": 2026,
            "lastYear": 2026,
            "dates": [
                {"date": "2026-12-24", "kind": "holiday", "name": "平安夜"},
                {"date": "2026-12-31", "kind": "holiday", "name": "年末"}
            ]
        })
    ),
    responses(
        (status = 200, description = "The calendar as saved, with its new version", body = CalendarDto),
        (status = 400, description = "A field is invalid: `errors` names each (`version`, `name`, `dates[3].kind`, …) and says what is allowed", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Built in, or a stale version", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/calendars/{code}")]
pub async fn update_calendar(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    code: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let code = code.into_inner();
    if builtin::is_builtin(&code) {
        return Err(read_only(&code));
    }
    if !user::valid_code(&code) {
        return Err(ApiError::missing(Noun::CALENDAR, &code));
    }
    let body = body_object(body.into_inner())?;
    // Every bad field in one answer: the version's problem with the rest.
    let version = version_of(&body);
    let spec = user::validate(&body, Some(&code));
    let (version, spec) = match (version, spec) {
        (Ok(version), Ok(spec)) => (version, spec),
        (version, spec) => {
            let mut errors: Vec<ProblemFieldText> = version.err().into_iter().collect();
            errors.extend(field_errors(&spec.err().unwrap_or_default()));
            return Err(ApiError::validation(errors));
        }
    };
    let (before, after, jobs) = state
        .store
        .calendars()
        .update(version, &spec, &who.actor(), Utc::now())
        .await
        .map_err(ApiError::about(Noun::CALENDAR, &code))?;
    // The jobs naming it start a new schedule with the new dates.
    for id in jobs {
        state.changes.job_changed(id);
    }
    let (before, after) = (CalendarDto::user(before), CalendarDto::user(after));
    audit::record(
        &state,
        &who,
        Action::CalendarModify,
        Target::Calendar,
        Some(code.clone()),
        format!("修改日历「{}」（{code}）", after.name),
        calendar_json(&before),
        calendar_json(&after),
    )
    .await;
    tracing::info!(calendar = %code, version = ?after.version, actor = %who.sub, "calendar updated");
    Ok(HttpResponse::Ok().json(after))
}

/// Deletes a user calendar (super admins only).
#[utoipa::path(
    tag = "calendars",
    summary = "Delete a calendar",
    description = "Built-in calendars are read-only (409), and so is a calendar jobs name (409 listing their ids: change those jobs first). Audited as `calendar.delete`.",
    security(("bearer" = [])),
    params(("code" = String, Path, description = "Calendar code, such as cn-workdays: 1–64 lower-case letters, digits, `_` or `-`; another names no calendar (404)", pattern = r"^[a-z0-9_-]{1,64}$", max_length = 64)),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Built in, or named by jobs (the message lists their ids)", body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/calendars/{code}")]
pub async fn delete_calendar(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    code: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let code = code.into_inner();
    if builtin::is_builtin(&code) {
        return Err(read_only(&code));
    }
    if !user::valid_code(&code) {
        return Err(ApiError::missing(Noun::CALENDAR, &code));
    }
    // A calendar a job names is refused, as a job group still in use is:
    // the job would otherwise stop firing without anyone deciding it.
    let deleted = state
        .store
        .calendars()
        .delete(&code)
        .await
        .map_err(|e| match e {
            StorageError::InUse(jobs) => in_use(&code, &jobs),
            other => ApiError::from(other),
        })?
        .ok_or_else(|| ApiError::missing(Noun::CALENDAR, &code))?;
    let dto = CalendarDto::user(deleted);
    audit::record(
        &state,
        &who,
        Action::CalendarDelete,
        Target::Calendar,
        Some(code.clone()),
        format!("删除日历「{}」（{code}）", dto.name),
        calendar_json(&dto),
        None,
    )
    .await;
    tracing::info!(calendar = %code, actor = %who.sub, "calendar deleted");
    Ok(HttpResponse::NoContent().finish())
}

/// 409: jobs still name the calendar.
fn in_use(code: &str, jobs: &[i64]) -> ApiError {
    const SHOWN: usize = 20;
    let mut ids: Vec<String> = jobs.iter().take(SHOWN).map(i64::to_string).collect();
    if jobs.len() > SHOWN {
        ids.push("…".into());
    }
    let ids = ids.join(", ");
    let n = jobs.len();
    ApiError::new(ErrorKind::Conflict(Text::new(
        format!(
            "还有 {n} 个任务使用日历 {code}（任务 {ids}）：请先让这些任务改用其他日历或不用日历"
        ),
        format!("{n} jobs still use calendar {code} (jobs {ids}): change their calendar first"),
    )))
}
