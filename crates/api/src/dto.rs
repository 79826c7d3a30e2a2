//! Request and response bodies, with their OpenAPI schemas.

use chrono::{DateTime, FixedOffset, Utc};
use chrono_tz::Tz;
use qiwu_domain::{HandlerDescriptor, Lang, builtin};
use qiwu_storage::{AuditRecord, GroupRecord, JobRecord, RunRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// A registered handler.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandlerDto {
    /// Dotted name, such as `audit.purge`.
    pub name: String,
    pub title: String,
    pub description: String,
    /// The params JSON Schema.
    #[schema(value_type = Object)]
    pub params_schema: Value,
    /// The params a new job starts with.
    #[schema(value_type = Object)]
    pub default_params: Value,
}

impl HandlerDto {
    pub fn new(d: &HandlerDescriptor, lang: Lang) -> HandlerDto {
        HandlerDto {
            name: d.name.clone(),
            title: d.title(lang).to_string(),
            description: d.description(lang).to_string(),
            params_schema: d.schema.raw().clone(),
            default_params: Value::Object(d.default_params()),
        }
    }
}

/// A job group from the dictionary.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupDto {
    pub code: String,
    /// The label in the request's language.
    pub label: String,
    pub label_zh: String,
    pub label_en: String,
    pub builtin: bool,
}

impl GroupDto {
    pub fn new(g: GroupRecord, lang: Lang) -> GroupDto {
        GroupDto {
            code: g.code,
            label: lang.pick(&g.label_zh, &g.label_en).clone(),
            label_zh: g.label_zh,
            label_en: g.label_en,
            builtin: g.builtin,
        }
    }
}

/// A new job group.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupCreate {
    /// Lower-case letters, digits, `_` and `-`; 1–64 characters.
    pub code: String,
    pub label_zh: String,
    /// Defaults to the Chinese label.
    #[serde(default)]
    pub label_en: Option<String>,
}

/// A job as stored.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobDto {
    pub id: i64,
    /// Built-in jobs show their name in the request's language until renamed.
    pub name: String,
    pub group: String,
    pub handler: String,
    #[schema(value_type = Object)]
    pub params: Value,
    pub cron: String,
    /// IANA zone, or null for the service's `QIWU_TIMEZONE`.
    pub timezone: Option<String>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    /// `skip` or `run_once`.
    pub misfire_policy: String,
    pub remark: String,
    /// Bumped by every change; send it back with updates.
    pub version: i64,
    pub builtin: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl JobDto {
    pub fn new(j: JobRecord, lang: Lang) -> JobDto {
        JobDto {
            name: builtin::display_name(&j.name, j.builtin_key.as_deref(), lang).to_string(),
            id: j.id,
            group: j.group,
            handler: j.handler,
            params: j.params,
            cron: j.cron,
            timezone: j.timezone,
            enabled: j.enabled,
            retry_count: j.retry_count,
            retry_interval_ms: j.retry_interval_ms,
            timeout_ms: j.timeout_ms,
            allow_concurrent: j.allow_concurrent,
            misfire_policy: j.misfire_policy,
            remark: j.remark,
            version: j.version,
            builtin: j.builtin_key.is_some(),
            created_at: j.created_at,
            created_by: j.created_by,
            updated_at: j.updated_at,
            updated_by: j.updated_by,
        }
    }
}

/// A job with what the detail page shows.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobDetailDto {
    #[serde(flatten)]
    pub job: JobDto,
    pub cron_description: String,
    /// The next 5 fire times, in the job's zone; listed for disabled jobs too.
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times: Vec<DateTime<FixedOffset>>,
    /// Set when the job is disabled.
    pub notice: Option<String>,
    /// The 10 latest runs; present only with `scheduler.run.browse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_runs: Option<Vec<RunSummaryDto>>,
}

/// One row of the run log.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSummaryDto {
    pub id: i64,
    pub fire_id: i64,
    pub job_id: i64,
    pub job_name: String,
    pub handler: String,
    /// `schedule`, `manual` or `misfire`.
    pub trigger: String,
    pub scheduled_at: DateTime<Utc>,
    pub attempt: i32,
    /// `running`, `success`, `failed`, `skipped` or `timeout`.
    pub status: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    pub instance: String,
}

impl RunSummaryDto {
    pub fn new(r: RunRecord) -> RunSummaryDto {
        RunSummaryDto {
            id: r.id,
            fire_id: r.fire_id,
            job_id: r.job_id,
            job_name: r.job_name,
            handler: r.handler,
            trigger: r.trigger,
            scheduled_at: r.scheduled_at,
            attempt: r.attempt,
            status: r.status,
            started_at: r.started_at,
            finished_at: r.finished_at,
            duration_ms: r.duration_ms,
            instance: r.instance,
        }
    }
}

/// One run with what the handler wrote.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunDetailDto {
    #[serde(flatten)]
    pub run: RunSummaryDto,
    /// Log lines the handler wrote plus its return value (at most 16 000
    /// characters).
    pub output: String,
    /// Why the attempt failed (at most 4 000 characters); empty on success.
    pub error: String,
    /// The OpenTelemetry trace the attempt ran in (32 hex digits), to look
    /// it up in Jaeger or Tempo; null when tracing was off, the trace was
    /// not sampled, or the run never started (skipped at its claim).
    pub trace_id: Option<String>,
}

impl RunDetailDto {
    pub fn new(mut r: RunRecord) -> RunDetailDto {
        let output = std::mem::take(&mut r.output);
        let error = std::mem::take(&mut r.error);
        let trace_id = r.trace_id.take();
        RunDetailDto {
            run: RunSummaryDto::new(r),
            output,
            error,
            trace_id,
        }
    }
}

/// A page of the run log.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPage {
    /// Newest first.
    pub items: Vec<RunSummaryDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Filters and paging of the run list. Values are read as text so that a
/// bad one is answered with the name of its parameter.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct RunQuery {
    /// Exact job id.
    #[param(value_type = Option<i64>)]
    pub job_id: Option<String>,
    /// Part of the job name, case-insensitive.
    pub job_name: Option<String>,
    /// Exact, full handler name.
    pub handler: Option<String>,
    /// `running`, `success`, `failed`, `skipped` or `timeout`.
    pub status: Option<String>,
    /// Runs that started at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_from: Option<String>,
    /// Runs that started at or before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_to: Option<String>,
    /// 1–100, default 20.
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// Filters of the run export: those of the run list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct RunExportQuery {
    /// Exact job id.
    #[param(value_type = Option<i64>)]
    pub job_id: Option<String>,
    /// Part of the job name, case-insensitive.
    pub job_name: Option<String>,
    /// Exact, full handler name.
    pub handler: Option<String>,
    /// `running`, `success`, `failed`, `skipped` or `timeout`.
    pub status: Option<String>,
    /// Runs that started at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_from: Option<String>,
    /// Runs that started at or before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_to: Option<String>,
}

/// Filters of the job export: those of the job list, without paging.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct JobExportQuery {
    /// Part of the name, case-insensitive.
    pub name: Option<String>,
    /// Exact group code.
    pub group: Option<String>,
    /// Exact handler name.
    pub handler: Option<String>,
    /// `true` or `false`.
    #[param(value_type = Option<bool>)]
    pub enabled: Option<String>,
}

/// An .xlsx workbook.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct XlsxFile(pub Vec<u8>);

/// One audit log entry.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditDto {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The `sub` of the caller who did it.
    pub actor: String,
    /// `job.create`, `job.modify`, `job.enable`, `job.disable`, `job.delete`,
    /// `job.export`, `job.run`, `run.delete`, `run.clear`, `run.export`,
    /// `setting.modify`, `template.modify`, `apikey.create`, `apikey.revoke`,
    /// `calendar.create`, `calendar.modify`, `calendar.delete`.
    pub action: String,
    /// The action in the request's language.
    pub action_label: String,
    /// `job`, `run`, `setting`, `notification_template`, `apikey` or
    /// `calendar`.
    pub target_type: String,
    /// Null for actions on many objects (export, clear, batch delete of runs).
    pub target_id: Option<String>,
    pub summary: String,
    /// The object before the change (a job as in `JobDto`), if any.
    #[schema(value_type = Option<Object>)]
    pub before: Option<Value>,
    /// The object after the change, or what an export or batch covered.
    #[schema(value_type = Option<Object>)]
    pub after: Option<Value>,
}

impl AuditDto {
    pub fn new(a: AuditRecord, lang: Lang) -> AuditDto {
        AuditDto {
            action_label: crate::audit::Action::from_code(&a.action)
                .map_or_else(|| a.action.clone(), |x| x.label(lang).to_string()),
            id: a.id,
            at: a.at,
            actor: a.actor,
            action: a.action,
            target_type: a.target_type,
            target_id: a.target_id,
            summary: a.summary,
            before: a.before,
            after: a.after,
        }
    }
}

/// A page of the audit log.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    /// Newest first.
    pub items: Vec<AuditDto>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Filters and paging of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct AuditQuery {
    /// Exact `sub` of the actor.
    pub actor: Option<String>,
    /// An action code, such as `job.modify`.
    pub action: Option<String>,
    /// `job`, `run` or `apikey`.
    pub target_type: Option<String>,
    /// Exact target id.
    pub target_id: Option<String>,
    /// Entries at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// Entries at or before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    /// 1–100, default 20.
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
    /// The `nextCursor` of the previous page.
    pub cursor: Option<String>,
}

/// Fields of a job a client writes. On create, absent fields take their
/// defaults; on update, absent fields keep their current values.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct JobWrite {
    /// Unique, 1–64 characters. Required on create.
    pub name: Option<String>,
    /// A job-group code; default `default`.
    pub group: Option<String>,
    /// A registered handler name. Required on create.
    pub handler: Option<String>,
    /// A JSON object (or a string holding one), at most 4000 characters;
    /// empty means `{}`; schema defaults are filled in.
    #[schema(value_type = Object)]
    pub params: Option<Value>,
    /// 5 or 6 fields; default `0 0 0 * * *`.
    pub cron: Option<String>,
    /// IANA zone or null.
    pub timezone: Option<String>,
    pub enabled: Option<bool>,
    /// 0–10, default 0.
    pub retry_count: Option<i32>,
    /// 0–3 600 000, default 1000.
    pub retry_interval_ms: Option<i64>,
    /// 0–86 400 000 (0 = no limit), default 60000.
    pub timeout_ms: Option<i64>,
    pub allow_concurrent: Option<bool>,
    /// `skip` (default) or `run_once`.
    pub misfire_policy: Option<String>,
    /// At most 500 characters.
    pub remark: Option<String>,
    /// Required on update: the version the edit is based on.
    pub version: Option<i64>,
}

/// A page of jobs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPage {
    pub items: Vec<JobDto>,
    pub total: u64,
    pub page: u64,
    pub page_size: u64,
}

/// Filters and paging of the job list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct JobQuery {
    /// Part of the name, case-insensitive.
    pub name: Option<String>,
    /// Exact group code.
    pub group: Option<String>,
    /// Exact handler name.
    pub handler: Option<String>,
    pub enabled: Option<bool>,
    /// 1-based, default 1.
    pub page: Option<u64>,
    /// 1–100, default 20.
    pub page_size: Option<u64>,
}

/// Enable or disable a job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnabledWrite {
    pub enabled: bool,
    /// When given, a stale version gets 409.
    pub version: Option<i64>,
}

/// Ids of jobs or runs to delete.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdList {
    /// 1–1000 ids.
    pub ids: Vec<i64>,
}

impl IdList {
    /// Most ids one batch request may carry.
    pub const MAX: usize = 1000;

    /// The ids, or a 400 naming `ids` when there are none or too many.
    pub fn checked(self, lang: qiwu_domain::Lang) -> Result<Vec<i64>, crate::error::ApiError> {
        if self.ids.is_empty() || self.ids.len() > IdList::MAX {
            return Err(crate::error::ApiError::field(
                lang,
                "ids",
                format!("ids 需要 1–{} 个", IdList::MAX),
                format!("ids must hold 1–{} ids", IdList::MAX),
            ));
        }
        Ok(self.ids)
    }
}

/// A cron expression to explain.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CronPreviewRequest {
    pub cron: String,
    /// IANA zone; default `QIWU_TIMEZONE`.
    pub timezone: Option<String>,
    /// Times are strictly after this instant; default now.
    pub from: Option<DateTime<FixedOffset>>,
    /// 1–50, default 5.
    pub count: Option<u32>,
    /// A calendar code (`cn-workdays` or a user calendar's); needs
    /// `calendarRule`. The cron gives the times of day, the calendar the
    /// days (the date in `timezone`).
    pub calendar: Option<String>,
    /// `workdays` (Monday–Friday that are not holidays, plus make-up working
    /// days), `holidays` (days off: weekends not made working, plus
    /// holidays) or `exclude` (the cron's days without the calendar's
    /// holidays). `workdays` and `holidays` need `*` in the day-of-week field.
    pub calendar_rule: Option<String>,
}

/// What an expression means and when it fires.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronPreviewResponse {
    pub valid: bool,
    pub description: Option<String>,
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times: Vec<DateTime<FixedOffset>>,
    /// Why the expression is invalid (or does not fit the calendar rule).
    pub error: Option<String>,
    /// With a calendar: which dates, from `from` through the last listed
    /// time, the calendar removed or added compared with the plain week.
    pub calendar_effect: Option<crate::calendar_dto::CalendarEffectDto>,
    /// With a calendar that has no data for this year or, from 1 December,
    /// the next: what is missing and what happens meanwhile.
    pub notice: Option<String>,
}

/// Health of the process.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
}

/// Times in a zone, as RFC 3339 with that zone's offset.
pub fn in_zone(times: Vec<DateTime<Utc>>, tz: Tz) -> Vec<DateTime<FixedOffset>> {
    times
        .into_iter()
        .map(|t| t.with_timezone(&tz).fixed_offset())
        .collect()
}
