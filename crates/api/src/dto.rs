//! Request and response bodies, with their OpenAPI schemas.

use chrono::{DateTime, FixedOffset, Utc};
use chrono_tz::Tz;
use qiwu_domain::calendar::CalendarRule;
use qiwu_domain::pause::{self, PauseRequest};
use qiwu_domain::{HandlerDescriptor, Lang, builtin};
use qiwu_storage::{AuditRecord, GroupRecord, JobRecord, RunRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::body::Fields;
use crate::error::ApiError;
use crate::query::MAX_SAFE_INTEGER;
use crate::schema;

/// A run's status: `running` until its attempt ends; `cancelled` when
/// someone stopped it (`cancelledBy` names who).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Success,
    Failed,
    Skipped,
    Timeout,
    Cancelled,
}

/// What started a fire: its schedule, a person or service ("run once"),
/// the catch-up of a missed time, or a backfill of a past range.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum RunTrigger {
    Schedule,
    Manual,
    Misfire,
    Backfill,
}

/// What a fire does while an earlier fire of its job still runs: `skip`
/// records it `skipped`; `allow` runs both; `queue_one` lets one fire wait
/// and start when the running one ends (a further one is skipped);
/// `replace` stops the running fire (`cancelled`) and starts once it has
/// really stopped. `allowConcurrent` is the compatible view (true ⇔
/// `allow`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum OverlapPolicy {
    Skip,
    Allow,
    QueueOne,
    Replace,
}

/// The wait between attempts: `fixed` waits `retryIntervalMs` every time;
/// `exponential` waits `retryIntervalMs` × 2^(n−1) before retry n, at most
/// `retryMaxIntervalMs`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum RetryBackoff {
    Fixed,
    Exponential,
}

/// What to do with fire times missed while no instance ran: `skip`
/// records one skipped run, `run_once` runs once now.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum MisfirePolicy {
    Skip,
    RunOnce,
}

/// A registered handler.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandlerDto {
    /// Dotted name, such as `audit.purge`.
    pub name: String,
    pub title: String,
    pub description: String,
    /// The params JSON Schema.
    #[schema(schema_with = schema::free_form_object)]
    pub params_schema: Value,
    /// The params a new job starts with.
    #[schema(schema_with = schema::free_form_object)]
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
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct GroupCreate {
    /// Lower-case letters, digits, `_` and `-`; 1–64 characters
    /// (surrounding blanks are trimmed).
    #[schema(pattern = r"^\s*[a-z0-9_-]{1,64}\s*$")]
    pub code: String,
    /// 1–64 characters, no control characters.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub label_zh: String,
    /// 1–64 characters, no control characters; absent or null: the
    /// Chinese label.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub label_en: Option<String>,
}

impl GroupCreate {
    /// Reads a create body, each bad field named.
    pub fn read(body: Value) -> Result<GroupCreate, ApiError> {
        let mut f = Fields::new(body, &["code", "labelZh", "labelEn"])?;
        let code = f.string("code", true);
        let label_zh = f.string("labelZh", true);
        let label_en = f.string("labelEn", false);
        f.finish()?;
        Ok(GroupCreate {
            code: code.unwrap_or_default(),
            label_zh: label_zh.unwrap_or_default(),
            label_en,
        })
    }
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
    /// The saved params, with the handler schema's defaults filled in.
    #[schema(schema_with = schema::free_form_object)]
    pub params: Value,
    pub cron: String,
    /// IANA zone, or null for the service's `QIWU_TIMEZONE`.
    pub timezone: Option<String>,
    pub enabled: bool,
    pub retry_count: i32,
    pub retry_interval_ms: i64,
    pub timeout_ms: i64,
    pub allow_concurrent: bool,
    #[schema(value_type = MisfirePolicy)]
    pub misfire_policy: String,
    pub remark: String,
    /// The calendar deciding the days (`cn-workdays` or a user calendar's
    /// code), or null.
    pub calendar: Option<String>,
    /// How the calendar decides the days; null without a calendar.
    #[schema(value_type = Option<CalendarRuleCode>)]
    pub calendar_rule: Option<String>,
    /// No fire time before this instant; null: no start.
    pub active_from: Option<DateTime<Utc>>,
    /// No fire time after this instant; null: no end.
    pub active_until: Option<DateTime<Utc>>,
    /// How late (ms) a `run_once` catch-up may still run; 0: however late.
    pub misfire_grace_ms: i64,
    /// After this many successful scheduled fires the job disables itself;
    /// null: no limit.
    pub max_runs: Option<i64>,
    /// Successful scheduled fires counted towards `maxRuns` (since the
    /// limit was last set).
    pub scheduled_successes: i64,
    /// Each fire starts up to this many ms after its nominal time (the
    /// same delay on every worker); 0: on time.
    pub jitter_ms: i64,
    /// What a fire does while an earlier one of the job still runs.
    #[schema(value_type = OverlapPolicy)]
    pub overlap_policy: String,
    #[schema(value_type = RetryBackoff)]
    pub retry_backoff: String,
    /// The longest wait of `exponential` back-off, in ms.
    pub retry_max_interval_ms: i64,
    /// Full jitter: each wait is a uniform random part of its delay.
    pub retry_jitter: bool,
    /// Bumped by every change; send it back with updates.
    pub version: i64,
    pub builtin: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    /// Alert when a fire ends `failed` or `timeout` after its retries.
    pub alert_on_failure: bool,
    /// Alert when this many fires in a row failed; 0 = off.
    #[schema(minimum = 0, maximum = 1000)]
    pub alert_after_consecutive_failures: u32,
    /// Alert on the first success after an alerted failure.
    pub alert_on_recovery: bool,
    /// Alert channel ids (`GET /api/alert-channels`); empty: the default
    /// channels (or the super administrators' inbox when none is default).
    pub alert_channels: Vec<i64>,
    /// Why the job was paused; null without a reason or while enabled.
    pub paused_reason: Option<String>,
    /// Who disabled the job (`system` for the engine); null while enabled.
    pub paused_by: Option<String>,
    /// When the job was disabled; null while enabled.
    pub paused_at: Option<DateTime<Utc>>,
    /// When the cluster enables the job again; null: until someone does.
    pub paused_until: Option<DateTime<Utc>>,
}

/// A job as the audit log keeps it: the API's JSON form, with the stored
/// name (not a translation).
pub fn job_json(job: &JobRecord) -> Option<Value> {
    serde_json::to_value(JobDto::new(job.clone(), Lang::Zh)).ok()
}

impl JobDto {
    pub fn new(j: JobRecord, lang: Lang) -> JobDto {
        JobDto {
            name: builtin::display_name(&j.name, j.builtin_key.as_deref(), lang).to_string(),
            id: j.id,
            group: j.group,
            handler: j.handler,
            params: j.params,
            cron: j.cron.as_str().to_string(),
            timezone: j.timezone.map(|tz| tz.name().to_string()),
            enabled: j.enabled,
            retry_count: j.retry_count,
            retry_interval_ms: j.retry_interval_ms,
            timeout_ms: j.timeout_ms,
            allow_concurrent: j.allow_concurrent,
            misfire_policy: j.misfire_policy.as_str().to_string(),
            remark: j.remark,
            calendar: j.time_rules.calendar,
            calendar_rule: j.time_rules.calendar_rule.map(|r| r.as_str().to_string()),
            active_from: j.time_rules.active_from,
            active_until: j.time_rules.active_until,
            misfire_grace_ms: j.time_rules.misfire_grace_ms,
            max_runs: j.time_rules.max_runs,
            scheduled_successes: j.scheduled_successes,
            jitter_ms: j.time_rules.jitter_ms,
            overlap_policy: j.overlap_policy.as_str().to_string(),
            retry_backoff: j.retry_backoff,
            retry_max_interval_ms: j.retry_max_interval_ms,
            retry_jitter: j.retry_jitter,
            version: j.version,
            builtin: j.builtin_key.is_some(),
            created_at: j.created_at,
            created_by: j.created_by,
            updated_at: j.updated_at,
            updated_by: j.updated_by,
            alert_on_failure: j.alert.on_failure,
            alert_after_consecutive_failures: j.alert.after_consecutive_failures,
            alert_on_recovery: j.alert.on_recovery,
            alert_channels: j.alert.channels,
            paused_reason: j.pause.reason,
            paused_by: j.pause.by,
            paused_at: j.pause.at,
            paused_until: j.pause.until,
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
    /// The next 5 fire times, in the job's zone; listed for disabled jobs too
    /// (for a job paused until a time: the first 5 after it).
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times: Vec<DateTime<FixedOffset>>,
    /// Set when the job is disabled, when its calendar has no data for
    /// this year (or, from 1 December, the next), or when its calendar is
    /// gone.
    pub notice: Option<String>,
    /// The 10 latest runs, with their errors; present only with
    /// `scheduler.run.browse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_runs: Option<Vec<RecentRunDto>>,
}

/// One of a job's latest runs, as its detail shows it: when it started,
/// how it ended, which attempt, how long, and why it failed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecentRunDto {
    #[serde(flatten)]
    pub run: RunSummaryDto,
    /// Why the attempt failed (at most 4 000 characters); empty on success.
    pub error: String,
}

impl RecentRunDto {
    pub fn new(mut r: RunRecord) -> RecentRunDto {
        let error = std::mem::take(&mut r.error);
        // The output can be 16 000 characters: the detail leaves it to
        // the run's own page.
        r.output = String::new();
        RecentRunDto {
            run: RunSummaryDto::new(r),
            error,
        }
    }
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
    #[schema(value_type = RunTrigger)]
    pub trigger: String,
    pub scheduled_at: DateTime<Utc>,
    /// 1 for the first attempt of a fire, 2, 3… for its retries.
    pub attempt: i32,
    #[schema(value_type = RunStatus)]
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
            trigger: r.trigger.as_str().to_string(),
            scheduled_at: r.scheduled_at,
            attempt: r.attempt,
            status: r.status.as_str().to_string(),
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
    /// Who asked to cancel the run (a user's `sub`, or `apikey:` and the
    /// key's name); null when nobody did. Set while a running run is being
    /// stopped, and kept once it ended `cancelled`.
    pub cancelled_by: Option<String>,
    /// Who started the fire with "run once" (a user's `sub`, or `apikey:`
    /// and the key's name); null for scheduled fires and catch-ups.
    pub started_by: Option<String>,
}

impl RunDetailDto {
    pub fn new(mut r: RunRecord) -> RunDetailDto {
        let output = std::mem::take(&mut r.output);
        let error = std::mem::take(&mut r.error);
        let trace_id = r.trace_id.take();
        let cancelled_by = r.cancelled_by.take();
        RunDetailDto {
            run: RunSummaryDto::new(r),
            output,
            error,
            trace_id,
            cancelled_by,
            started_by: None,
        }
    }
}

/// A cancel request was stored.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelAccepted {
    #[schema(minimum = 1, maximum = 9007199254740991_i64)]
    pub run_id: i64,
    /// Who asked first (a later request keeps the first one's name).
    pub cancelled_by: String,
    pub message: String,
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
    #[param(value_type = Option<i64>, minimum = 1, maximum = 9007199254740991_i64)]
    pub job_id: Option<String>,
    /// Part of the job name, case-insensitive.
    pub job_name: Option<String>,
    /// Exact, full handler name.
    pub handler: Option<String>,
    #[param(value_type = Option<RunStatus>)]
    pub status: Option<String>,
    /// What started the run (`backfill`: a backfill request).
    #[param(value_type = Option<RunTrigger>)]
    pub trigger: Option<String>,
    /// Runs that started at or after this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_from: Option<String>,
    /// Runs that started at or before this instant (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    pub started_to: Option<String>,
    /// 1–100, default 20.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// The `nextCursor` of the previous page; empty for the first page.
    #[param(pattern = "^([0-9a-f]{32})?$")]
    pub cursor: Option<String>,
}

/// Filters of the run export: those of the run list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query, rename_all = "camelCase")]
pub struct RunExportQuery {
    /// Exact job id.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 9007199254740991_i64)]
    pub job_id: Option<String>,
    /// Part of the job name, case-insensitive.
    pub job_name: Option<String>,
    /// Exact, full handler name.
    pub handler: Option<String>,
    #[param(value_type = Option<RunStatus>)]
    pub status: Option<String>,
    /// What started the run (`backfill`: a backfill request).
    #[param(value_type = Option<RunTrigger>)]
    pub trigger: Option<String>,
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
    /// Only enabled (`true`) or disabled (`false`) jobs.
    #[param(value_type = Option<bool>)]
    pub enabled: Option<String>,
}

/// An .xlsx workbook: bytes, not JSON.
pub struct XlsxFile(pub Vec<u8>);

impl utoipa::PartialSchema for XlsxFile {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        use utoipa::openapi::{KnownFormat, SchemaFormat};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .content_media_type(crate::export::XLSX_CONTENT_TYPE)
            .description(Some("An Excel workbook (.xlsx): bytes, not JSON"))
            .into()
    }
}

impl ToSchema for XlsxFile {}

/// One audit log entry.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditDto {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The `sub` of the caller who did it.
    pub actor: String,
    /// Such as `job.create`, `setting.modify`, `apikey.revoke` or
    /// `calendar.create`.
    #[schema(value_type = schema::AuditAction)]
    pub action: String,
    /// The action in the request's language.
    pub action_label: String,
    #[schema(value_type = schema::AuditTarget)]
    pub target_type: String,
    /// Null for actions on many objects (export, clear, batch delete of runs).
    pub target_id: Option<String>,
    pub summary: String,
    /// The object before the change (a job as in `JobDto`), if any.
    #[schema(schema_with = schema::nullable_free_form_object)]
    pub before: Option<Value>,
    /// The object after the change, or what an export or batch covered.
    #[schema(schema_with = schema::nullable_free_form_object)]
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
    #[param(value_type = Option<schema::AuditAction>)]
    pub action: Option<String>,
    /// What the action was done to.
    #[param(value_type = Option<schema::AuditTarget>)]
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
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// The `nextCursor` of the previous page; empty for the first page.
    #[param(pattern = "^([0-9a-f]{32})?$")]
    pub cursor: Option<String>,
}

/// A new job. Absent fields take their defaults; read-only fields a
/// client echoes back (`id`, `version`, `createdAt`…) are ignored, and any
/// other unknown field is a 400.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct JobCreate {
    /// Unique, 1–64 characters after trimming; no control characters.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    /// A job-group code (`GET /api/job-groups`); default `default`.
    #[schema(required = false, max_length = 64)]
    pub group: String,
    /// A registered handler name (`GET /api/handlers`).
    #[schema(max_length = 128)]
    pub handler: String,
    #[schema(schema_with = schema::params_input, required = false)]
    pub params: Option<Value>,
    /// 6 fields (`sec min hour dom month dow`) or 5 (`min hour dom month
    /// dow`): digits and `* , - /` only; default `0 0 0 * * *`. Check one
    /// with `POST /api/cron/preview`.
    #[schema(
        required = false,
        max_length = 255,
        pattern = r"^\s*[0-9*,/-]+(\s+[0-9*,/-]+){4,5}\s*$"
    )]
    pub cron: String,
    /// IANA zone such as `Asia/Shanghai`; null or blank: `QIWU_TIMEZONE`.
    #[schema(nullable)]
    pub timezone: Option<String>,
    /// Default true.
    #[schema(required = false)]
    pub enabled: bool,
    /// Default 0.
    #[schema(required = false, minimum = 0, maximum = 10)]
    pub retry_count: i32,
    /// Default 1000.
    #[schema(required = false, minimum = 0, maximum = 3600000)]
    pub retry_interval_ms: i64,
    /// 0 = no limit; default 60000.
    #[schema(required = false, minimum = 0, maximum = 86400000)]
    pub timeout_ms: i64,
    /// Default false; the compatible view of `overlapPolicy` (true ⇔
    /// `allow`).
    #[schema(required = false)]
    pub allow_concurrent: bool,
    /// Default `skip`.
    #[schema(value_type = MisfirePolicy, required = false)]
    pub misfire_policy: String,
    /// Default: what `allowConcurrent` stands for (`allow` when true, else
    /// `skip`); when given, it wins and `allowConcurrent` follows it.
    #[schema(value_type = OverlapPolicy, required = false, nullable)]
    pub overlap_policy: Option<String>,
    /// Default `fixed`.
    #[schema(value_type = RetryBackoff, required = false, nullable)]
    pub retry_backoff: Option<String>,
    /// The longest wait of `exponential` back-off; at least
    /// `retryIntervalMs`; default 3600000.
    #[schema(required = false, minimum = 0, maximum = 86400000, nullable)]
    pub retry_max_interval_ms: Option<i64>,
    /// Full jitter (each wait a uniform random part of its delay); default
    /// false.
    #[schema(required = false, nullable)]
    pub retry_jitter: Option<bool>,
    /// At most 500 characters; no control characters (line breaks
    /// included).
    #[schema(nullable, max_length = 500, pattern = r"^[^\x00-\x1F\x7F]*$")]
    pub remark: Option<String>,
    /// Alert when a fire ends `failed` or `timeout` after its retries; default false.
    /// Null: false.
    #[schema(required = false, nullable)]
    pub alert_on_failure: Option<bool>,
    /// Alert when this many fires in a row failed; 0 = off; default 0.
    /// Null: 0.
    #[schema(required = false, nullable, minimum = 0, maximum = 1000)]
    pub alert_after_consecutive_failures: Option<u32>,
    /// Alert on the first success after an alerted failure; default false.
    /// Null: false.
    #[schema(required = false, nullable)]
    pub alert_on_recovery: Option<bool>,
    /// Alert channel ids (at most 20); empty: the default channels; default [].
    /// Null: empty.
    #[schema(required = false, nullable, max_items = 20)]
    pub alert_channels: Option<Vec<i64>>,
    /// A calendar code (`cn-workdays` or a user calendar's, see `GET
    /// /api/calendars`); needs `calendarRule`. The cron gives the times of
    /// day, the calendar the days (the date in the job's zone). Null or
    /// blank: no calendar.
    #[schema(nullable, max_length = 64)]
    pub calendar: Option<String>,
    /// How the calendar decides the days; needs `calendar`. `workdays` and
    /// `holidays` need `*` in the cron's day-of-week field.
    #[schema(value_type = Option<CalendarRuleCode>, nullable)]
    pub calendar_rule: Option<String>,
    /// RFC 3339 with an offset: no fire time before it. Null: no start.
    #[schema(nullable)]
    pub active_from: Option<DateTime<FixedOffset>>,
    /// RFC 3339 with an offset, not before `activeFrom`: no fire time after
    /// it. Null: no end.
    #[schema(nullable)]
    pub active_until: Option<DateTime<FixedOffset>>,
    /// With `misfirePolicy: run_once`: missed times are caught up only
    /// when the last of them is at most this old (ms, up to 30 days);
    /// older ones are one skipped record saying so. 0 (default): however
    /// old.
    #[schema(required = false, minimum = 0, maximum = 2592000000_i64)]
    pub misfire_grace_ms: i64,
    /// After this many successful scheduled fires (timer fires and
    /// catch-up runs, not run-once requests) the job disables itself,
    /// audited as `system`; a new value counts from zero. Null: no limit.
    #[schema(nullable, minimum = 1, maximum = 1000000000_i64)]
    pub max_runs: Option<i64>,
    /// Each fire starts up to this many ms after its nominal time, by a
    /// delay every worker derives alike from the job and the time, so that
    /// jobs sharing a cron do not all start on second 0. Less than the
    /// cron's shortest period (and at most a day); `scheduledAt` stays the
    /// nominal time. Default 0.
    #[schema(required = false, minimum = 0, maximum = 86400000)]
    pub jitter_ms: i64,
}

/// Changes to a job. `version` is the one the edit is based on (a stale
/// one gets 409); every other field is optional and keeps its current
/// value when absent, then the merged job is checked as a whole.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct JobUpdate {
    /// The `version` read before editing.
    #[schema(minimum = 1, maximum = 9007199254740991_i64)]
    pub version: i64,
    /// Unique, 1–64 characters after trimming; no control characters.
    #[schema(
        required = false,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    /// A job-group code (`GET /api/job-groups`).
    #[schema(required = false, max_length = 64)]
    pub group: String,
    /// A registered handler name (`GET /api/handlers`).
    #[schema(required = false, max_length = 128)]
    pub handler: String,
    #[schema(schema_with = schema::params_input, required = false)]
    pub params: Option<Value>,
    /// 6 or 5 fields: digits and `* , - /` only.
    #[schema(
        required = false,
        max_length = 255,
        pattern = r"^\s*[0-9*,/-]+(\s+[0-9*,/-]+){4,5}\s*$"
    )]
    pub cron: String,
    /// IANA zone such as `Asia/Shanghai`; null or blank: `QIWU_TIMEZONE`.
    #[schema(nullable)]
    pub timezone: Option<String>,
    #[schema(required = false)]
    pub enabled: bool,
    #[schema(required = false, minimum = 0, maximum = 10)]
    pub retry_count: i32,
    #[schema(required = false, minimum = 0, maximum = 3600000)]
    pub retry_interval_ms: i64,
    /// 0 = no limit.
    #[schema(required = false, minimum = 0, maximum = 86400000)]
    pub timeout_ms: i64,
    #[schema(required = false)]
    pub allow_concurrent: bool,
    #[schema(value_type = MisfirePolicy, required = false)]
    pub misfire_policy: String,
    /// When given it wins; an edit with only `allowConcurrent` sets `allow`
    /// (true) or, from `allow`, `skip` (false).
    #[schema(value_type = OverlapPolicy, required = false, nullable)]
    pub overlap_policy: Option<String>,
    #[schema(value_type = RetryBackoff, required = false, nullable)]
    pub retry_backoff: Option<String>,
    /// At least `retryIntervalMs`.
    #[schema(required = false, minimum = 0, maximum = 86400000, nullable)]
    pub retry_max_interval_ms: Option<i64>,
    #[schema(required = false, nullable)]
    pub retry_jitter: Option<bool>,
    /// At most 500 characters; no control characters (line breaks
    /// included).
    #[schema(nullable, max_length = 500, pattern = r"^[^\x00-\x1F\x7F]*$")]
    pub remark: Option<String>,
    /// Alert when a fire ends `failed` or `timeout` after its retries.
    /// Null: false.
    #[schema(required = false, nullable)]
    pub alert_on_failure: Option<bool>,
    /// Alert when this many fires in a row failed; 0 = off.
    /// Null: 0.
    #[schema(required = false, nullable, minimum = 0, maximum = 1000)]
    pub alert_after_consecutive_failures: Option<u32>,
    /// Alert on the first success after an alerted failure.
    /// Null: false.
    #[schema(required = false, nullable)]
    pub alert_on_recovery: Option<bool>,
    /// Alert channel ids (at most 20); empty: the default channels.
    /// Null: empty.
    #[schema(required = false, nullable, max_items = 20)]
    pub alert_channels: Option<Vec<i64>>,
    /// A calendar code (`cn-workdays` or a user calendar's, see `GET
    /// /api/calendars`); needs `calendarRule`. The cron gives the times of
    /// day, the calendar the days (the date in the job's zone). Null or
    /// blank: no calendar.
    #[schema(nullable, max_length = 64)]
    pub calendar: Option<String>,
    /// How the calendar decides the days; needs `calendar`. `workdays` and
    /// `holidays` need `*` in the cron's day-of-week field.
    #[schema(value_type = Option<CalendarRuleCode>, nullable)]
    pub calendar_rule: Option<String>,
    /// RFC 3339 with an offset: no fire time before it. Null: no start.
    #[schema(nullable)]
    pub active_from: Option<DateTime<FixedOffset>>,
    /// RFC 3339 with an offset, not before `activeFrom`: no fire time after
    /// it. Null: no end.
    #[schema(nullable)]
    pub active_until: Option<DateTime<FixedOffset>>,
    /// With `misfirePolicy: run_once`: missed times are caught up only
    /// when the last of them is at most this old (ms, up to 30 days);
    /// older ones are one skipped record saying so. 0 (default): however
    /// old.
    #[schema(required = false, minimum = 0, maximum = 2592000000_i64)]
    pub misfire_grace_ms: i64,
    /// After this many successful scheduled fires (timer fires and
    /// catch-up runs, not run-once requests) the job disables itself,
    /// audited as `system`; a new value counts from zero. Null: no limit.
    #[schema(nullable, minimum = 1, maximum = 1000000000_i64)]
    pub max_runs: Option<i64>,
    /// Each fire starts up to this many ms after its nominal time, by a
    /// delay every worker derives alike from the job and the time, so that
    /// jobs sharing a cron do not all start on second 0. Less than the
    /// cron's shortest period (and at most a day); `scheduledAt` stays the
    /// nominal time. Default 0.
    #[schema(required = false, minimum = 0, maximum = 86400000)]
    pub jitter_ms: i64,
}

/// What saving an edit would do (`POST /api/jobs/{id}/preview-change`);
/// nothing is saved.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobChangePreview {
    /// True when a `PUT` of this body would be accepted as it is.
    pub valid: bool,
    /// What the `PUT` would answer 400 with, each naming its field (a stale
    /// `version` included); empty when valid.
    pub errors: Vec<crate::error::ProblemField>,
    /// The next 5 fire times as the job is saved now, in its zone.
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times_before: Vec<DateTime<FixedOffset>>,
    /// The next 5 fire times once saved, in the job's zone then (listed
    /// for a disabled job too); empty when invalid.
    #[schema(value_type = Vec<String>, format = DateTime)]
    pub next_fire_times_after: Vec<DateTime<FixedOffset>>,
    /// Saving starts a new schedule: the cron, zone, enabled state,
    /// calendar or rule, active window or jitter changes.
    pub new_schedule: bool,
    /// Whether saving makes the engine catch up missed fire times at once.
    /// Never: a new schedule starts when it is saved (times before it are
    /// not missed), and other edits leave the schedule and its pending
    /// catch-ups as they are.
    pub catch_up_on_save: bool,
    /// Why, in words.
    pub catch_up_note: String,
    /// With a calendar once saved: the dates it removed or added among
    /// `nextFireTimesAfter`, compared with the plain week.
    pub calendar_effect: Option<crate::calendar_dto::CalendarEffectDto>,
    /// Notices once saved (the job disabled, its calendar without data for
    /// a year in reach).
    pub notice: Option<String>,
}

/// A page of jobs.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPage {
    pub items: Vec<JobDto>,
    /// Jobs matching the filters, on every page.
    pub total: u64,
    pub page: u64,
    pub page_size: u64,
}

/// Filters and paging of the job list. Values are read as text so that a
/// bad one is answered with the name of its parameter.
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
    /// Only enabled (`true`) or disabled (`false`) jobs.
    #[param(value_type = Option<bool>)]
    pub enabled: Option<String>,
    /// 1-based, default 1.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 9007199254740991_i64)]
    pub page: Option<String>,
    /// 1–100, default 20.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub page_size: Option<String>,
}

/// Enable or disable a job; a disable may carry a reason and an end
/// (a pause).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct EnabledWrite {
    pub enabled: bool,
    /// When given, a stale version gets 409.
    #[schema(nullable, minimum = 1, maximum = 9007199254740991_i64)]
    pub version: Option<i64>,
    /// Why the job is paused, at most 500 characters; only with
    /// `enabled: false`. Blank means none.
    #[schema(nullable, max_length = 500)]
    pub reason: Option<String>,
    /// When the cluster enables the job again (RFC 3339 with an offset,
    /// in the future); only with `enabled: false`. Null: until someone
    /// enables it.
    #[schema(nullable)]
    pub until: Option<DateTime<FixedOffset>>,
}

/// A checked enable or disable: the request and the version to check.
pub struct EnabledRead {
    pub request: PauseRequest,
    pub version: Option<i64>,
}

impl EnabledWrite {
    /// Reads the body at `now`, each bad field named.
    pub fn read(body: Value, now: DateTime<Utc>) -> Result<EnabledRead, ApiError> {
        let mut f = Fields::new(body, &["enabled", "version", "reason", "until"])?;
        let enabled = f.boolean("enabled", true);
        let version = f.integer("version", 1, MAX_SAFE_INTEGER, false);
        let request = read_pause(&mut f, enabled, now);
        f.finish()?;
        Ok(EnabledRead {
            // Present whenever `finish` passed.
            request: request.unwrap_or(PauseRequest {
                enabled: enabled.unwrap_or_default(),
                reason: None,
                until: None,
            }),
            version,
        })
    }
}

/// Reads `reason` and `until` and checks them with `enabled` by the
/// domain's rules, each problem recorded on its field.
fn read_pause(f: &mut Fields, enabled: Option<bool>, now: DateTime<Utc>) -> Option<PauseRequest> {
    let reason = f.string("reason", false);
    let until = f.instant("until").map(|t| t.with_timezone(&Utc));
    let enabled = enabled?;
    match pause::validate(enabled, reason.as_deref(), until, now) {
        Ok(request) => Some(request),
        Err(errors) => {
            for e in errors {
                f.fail(e.field, e.message(Lang::Zh), e.message(Lang::En));
            }
            None
        }
    }
}

/// Enable or disable several jobs: by `ids` or every job of a `group`
/// (exactly one of them).
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct BatchEnabledWrite {
    #[schema(schema_with = schema::reported_id_list)]
    pub ids: Option<Vec<i64>>,
    /// A job group's code (one that exists): every job in it. Send either
    /// `ids` or `group`.
    pub group: Option<String>,
    pub enabled: bool,
    /// As for a single job: only with `enabled: false`, at most 500
    /// characters.
    #[schema(nullable, max_length = 500)]
    pub reason: Option<String>,
    /// As for a single job: in the future, only with `enabled: false`.
    #[schema(nullable)]
    pub until: Option<DateTime<FixedOffset>>,
}

/// Which jobs a checked batch request names.
pub enum BatchTarget {
    Ids(Vec<i64>),
    Group(String),
}

impl BatchEnabledWrite {
    /// Reads the body at `now`, each bad field named.
    pub fn read(body: Value, now: DateTime<Utc>) -> Result<(BatchTarget, PauseRequest), ApiError> {
        let mut f = Fields::new(body, &["ids", "group", "enabled", "reason", "until"])?;
        let has_ids = f.value("ids").is_some();
        let group = f.string("group", false);
        let target = match (has_ids, group) {
            (true, None) => Some(BatchTarget::Ids(f.ids("ids", IdList::MAX))),
            (false, Some(group)) => Some(BatchTarget::Group(group)),
            (true, Some(_)) => {
                f.fail(
                    "group",
                    "ids 与 group 只能填写一个",
                    "Send either ids or group, not both",
                );
                None
            }
            (false, None) => {
                f.fail(
                    "ids",
                    "请填写 ids 或 group（二选一）",
                    "Send ids or group (one of them)",
                );
                None
            }
        };
        let enabled = f.boolean("enabled", true);
        let request = read_pause(&mut f, enabled, now);
        f.finish()?;
        match (target, request) {
            (Some(target), Some(request)) => Ok((target, request)),
            // `finish` reports whatever left one of them out.
            _ => Err(ApiError::bad_request(
                "请求体不完整",
                "The request body is incomplete",
            )),
        }
    }
}

/// What a batch enable or disable did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchEnabledResult {
    /// Jobs written now (each audited), ascending.
    pub updated: Vec<i64>,
    /// Jobs that already were as asked, ascending.
    pub unchanged: Vec<i64>,
    /// Requested ids that name no job, ascending (always empty for a
    /// group).
    pub not_found: Vec<i64>,
}

/// Ids of jobs or runs to delete.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct IdList {
    #[schema(schema_with = schema::id_list)]
    pub ids: Vec<i64>,
}

impl IdList {
    /// Most ids one batch request may carry.
    pub const MAX: usize = 1000;

    /// The ids of a batch body, or a 400 naming `ids` (or the bad item).
    pub fn read(body: Value) -> Result<Vec<i64>, ApiError> {
        let mut f = Fields::new(body, &["ids"])?;
        let ids = f.ids("ids", IdList::MAX);
        f.finish()?;
        Ok(ids)
    }
}

/// A cron expression to explain.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct CronPreviewRequest {
    /// The expression; an invalid one is answered with `valid: false` and
    /// the reason, not a 400.
    pub cron: String,
    /// IANA zone; null or blank: `QIWU_TIMEZONE`.
    #[schema(nullable)]
    pub timezone: Option<String>,
    /// Times are strictly after this instant (RFC 3339 with an offset, on
    /// a date that exists); default now.
    #[schema(nullable)]
    pub from: Option<DateTime<FixedOffset>>,
    /// How many fire times to list, 1–50; default 5.
    #[schema(nullable, minimum = 1, maximum = 50)]
    pub count: Option<u32>,
    /// A calendar code (`cn-workdays` or a user calendar's, see `GET
    /// /api/calendars`); needs `calendarRule`. The cron gives the times of
    /// day, the calendar the days (the date in `timezone`). Null or blank:
    /// no calendar. A code no calendar has is a 400 naming `calendar`.
    #[schema(nullable, max_length = 64)]
    pub calendar: Option<String>,
    /// How the calendar decides the days; needs `calendar`. Null: no
    /// calendar.
    #[schema(value_type = Option<CalendarRuleCode>)]
    pub calendar_rule: Option<CalendarRule>,
}

/// How a calendar decides a job's days: `workdays` (Monday–Friday that are
/// not holidays, plus make-up working days), `holidays` (days off: weekends
/// not made working, plus holidays) or `exclude` (the cron's days without
/// the calendar's holidays). `workdays` and `holidays` need `*` in the
/// cron's day-of-week field.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CalendarRuleCode {
    Workdays,
    Holidays,
    Exclude,
}

/// Most fire times one preview lists.
pub const MAX_PREVIEW: i64 = 50;

impl CronPreviewRequest {
    /// Reads the body, each bad field named.
    pub fn read(body: Value) -> Result<CronPreviewRequest, ApiError> {
        let mut f = Fields::new(
            body,
            &[
                "cron",
                "timezone",
                "from",
                "count",
                "calendar",
                "calendarRule",
            ],
        )?;
        let cron = f.string("cron", true);
        let timezone = f.string("timezone", false);
        let from = f.instant("from");
        let count = f.integer("count", 1, MAX_PREVIEW, false);
        let calendar = f.string("calendar", false);
        let calendar_rule = f.one_of("calendarRule", CalendarRule::ALL, CalendarRule::as_str);
        f.finish()?;
        Ok(CronPreviewRequest {
            cron: cron.unwrap_or_default(),
            timezone,
            from,
            count: count.map(|c| c as u32),
            calendar,
            calendar_rule,
        })
    }
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
    #[schema(value_type = schema::HealthStatus)]
    pub status: String,
    /// Why the process is not ready, in words (such as `database
    /// unreachable`); empty when it is.
    pub reasons: Vec<String>,
}

impl Health {
    pub fn new(status: &'static str, reasons: Vec<String>) -> Health {
        Health {
            status: status.to_string(),
            reasons,
        }
    }
}

/// Times in a zone, as RFC 3339 with that zone's offset.
pub fn in_zone(times: Vec<DateTime<Utc>>, tz: Tz) -> Vec<DateTime<FixedOffset>> {
    times
        .into_iter()
        .map(|t| t.with_timezone(&tz).fixed_offset())
        .collect()
}
