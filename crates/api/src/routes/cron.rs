//! Cron preview: what an expression means and when it fires next, with a
//! calendar and its effect when one is given.

use actix_web::{HttpResponse, post, web};
use chrono::Utc;
use chrono_tz::Tz;
use qiwu_domain::CronExpr;
use qiwu_domain::job::{FieldError, JobProblem};
use qiwu_domain::schedule::{Schedule, ScheduleError};

use crate::auth::Principal;
use crate::calendar_dto::CalendarEffectDto;
use crate::dto::{CronPreviewRequest, CronPreviewResponse, in_zone};
use crate::error::{ApiError, Problem, field_errors};
use crate::routes::calendars::find_calendar;
use crate::state::AppState;

/// A domain field error as a 400.
fn field_error(field: &str, problem: JobProblem) -> ApiError {
    let e = FieldError {
        field: field.to_string(),
        problem,
    };
    ApiError::validation(field_errors([&e]))
}

/// Describes an expression and lists its next fire times; an invalid
/// expression is answered with `valid: false` and the reason.
#[utoipa::path(
    tag = "cron",
    summary = "Preview a cron expression",
    description = "With `calendar` and `calendarRule`, the times follow the calendar (the cron gives the times of day, the calendar the days, by the date in `timezone`), and `calendarEffect` lists the dates the calendar removed or added compared with the plain week. A cron whose day-of-week field is not `*` with `workdays` or `holidays` is answered `valid: false`.",
    security(("bearer" = [])),
    request_body(
        content = CronPreviewRequest,
        examples(
            ("weekdays" = (
                summary = "9:00 Monday to Friday in Shanghai",
                value = json!({"cron": "0 0 9 * * 1-5", "timezone": "Asia/Shanghai", "count": 3})
            )),
            ("workdays" = (
                summary = "9:00 on China's working days over the 2026 Spring Festival",
                value = json!({"cron": "0 0 9 * * *", "timezone": "Asia/Shanghai", "from": "2026-02-13T00:00:00+08:00", "count": 5, "calendar": "cn-workdays", "calendarRule": "workdays"})
            ))
        )
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
    let body = CronPreviewRequest::read(body.into_inner())?;
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
                "timezone",
                format!("时区 {name} 不存在：请填写 IANA 时区名，比如 Asia/Shanghai"),
                format!("Time zone {name} does not exist: use an IANA name such as Asia/Shanghai"),
            )
        })?,
    };
    let calendar_code = body
        .calendar
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty());
    let rule = body.calendar_rule;
    let calendar = match (calendar_code, rule) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err(field_error("calendarRule", JobProblem::CalendarRuleAlone));
        }
        (Some(_), None) => {
            return Err(field_error("calendarRule", JobProblem::CalendarWithoutRule));
        }
        (Some(code), Some(rule)) => {
            let cal = find_calendar(&state, code).await?.ok_or_else(|| {
                field_error("calendar", JobProblem::UnknownCalendar(code.to_string()))
            })?;
            Some((cal, rule))
        }
    };
    let from = body
        .from
        .map(|f| f.with_timezone(&Utc))
        .unwrap_or_else(Utc::now);
    let invalid = |error: String| CronPreviewResponse {
        valid: false,
        description: None,
        next_fire_times: vec![],
        error: Some(error),
        calendar_effect: None,
        notice: None,
    };
    let cron = match CronExpr::parse(&body.cron) {
        Ok(cron) => cron,
        Err(e) => return Ok(HttpResponse::Ok().json(invalid(e.message(lang)))),
    };
    let description = cron.describe(lang);
    let mut schedule = Schedule::new(cron, tz);
    if let Some((cal, rule)) = calendar {
        schedule = match schedule.with_calendar(cal, rule) {
            Ok(s) => s,
            Err(ScheduleError::RuleNeedsEveryWeekday { rule }) => {
                let e = FieldError {
                    field: "cron".into(),
                    problem: JobProblem::RuleNeedsEveryWeekday(rule),
                };
                return Ok(HttpResponse::Ok().json(invalid(e.message(lang))));
            }
            Err(e) => return Err(ApiError::internal(e)),
        };
    }
    let times = schedule.upcoming(from, count as usize);
    let calendar_effect = times.last().and_then(|last| {
        schedule
            .calendar_effect(from, *last)
            .map(|effect| CalendarEffectDto::new(&effect, lang))
    });
    let calendar_effect = calendar_effect.or_else(|| {
        // A calendar with no fire time at all in reach still says so.
        schedule
            .calendar()
            .map(|_| CalendarEffectDto::new(&Default::default(), lang))
    });
    let notice = schedule.calendar_notice(from).map(|n| n.message(lang));
    Ok(HttpResponse::Ok().json(CronPreviewResponse {
        valid: true,
        description: Some(description),
        next_fire_times: in_zone(times, tz),
        error: None,
        calendar_effect,
        notice,
    }))
}
