//! Request and response bodies, with their OpenAPI schemas.

use chrono::{DateTime, FixedOffset, Utc};
use chrono_tz::Tz;
use qiwu_domain::{HandlerDescriptor, Lang, builtin};
use qiwu_storage::{GroupRecord, JobRecord};
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

/// Jobs to delete.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdList {
    /// 1–1000 ids.
    pub ids: Vec<i64>,
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
}

/// What an expression means and when it fires.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronPreviewResponse {
    pub valid: bool,
    pub description: Option<String>,
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times: Vec<DateTime<FixedOffset>>,
    /// Why the expression is invalid.
    pub error: Option<String>,
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
