//! Job writes, one function each: validate, then store the change and its
//! audit entries in one transaction (so a job change is never committed
//! without its audit row), then publish the change to every instance. The
//! route handlers in `routes/jobs.rs` only extract the request, call one of
//! these and shape the response.

use chrono::Utc;
use qiwu_domain::alert::{self, AlertPolicy};
use qiwu_domain::job::{self, JobSpec};
use qiwu_domain::{TimeRules, builtin};
use qiwu_storage::{BatchEnabled, EnabledOutcome, JobRecord, JobSelection, NewJob};
use serde_json::{Map, Value, json};

use crate::audit::{Action, Entry, Target};
use crate::auth::Principal;
use crate::dto::{BatchEnabledWrite, BatchTarget, EnabledWrite, IdList, job_json};
use crate::error::{ApiError, Noun, field_errors};
use crate::query::MAX_SAFE_INTEGER;
use crate::routes::calendars::calendar_codes;
use crate::state::AppState;

/// Creates a job from a body whose absent fields take their defaults.
pub async fn create(state: &AppState, who: &Principal, body: Value) -> Result<JobRecord, ApiError> {
    let body = body_object(body)?;
    let mut input = job::defaults();
    input.extend(alert::policy_defaults());
    input.extend(job::time_rule_defaults());
    input.extend(body);
    let checked = validate(state, &input).await?;
    let created = state
        .store
        .jobs()
        .create_audited(
            &to_new_job(checked, None),
            &who.actor(),
            Utc::now(),
            |job| {
                let entry = Entry {
                    action: Action::JobCreate,
                    target_type: Target::Job,
                    target_id: Some(job.id.to_string()),
                    summary: format!("创建任务「{}」", job.name),
                    before: None,
                    after: job_json(job),
                };
                vec![entry.by(who)]
            },
        )
        .await?;
    state.changes.job_changed(created.id);
    tracing::info!(job = created.id, actor = %who.sub, "job created");
    Ok(created)
}

/// Updates job `id` from a body carrying the `version` it was based on;
/// absent fields keep their current values.
pub async fn update(
    state: &AppState,
    who: &Principal,
    id: i64,
    body: Value,
) -> Result<JobRecord, ApiError> {
    let body = body_object(body)?;
    let version = edit_version(&body)?;
    let current = load(state, id).await?;
    let input = merged(state, &current, body);
    let checked = validate(state, &input).await?;
    let updated = state
        .store
        .jobs()
        .update_audited(
            id,
            version,
            &to_new_job(checked, None),
            &who.actor(),
            Utc::now(),
            |before, after| {
                let entry = Entry {
                    action: Action::JobModify,
                    target_type: Target::Job,
                    target_id: Some(id.to_string()),
                    summary: format!("修改任务「{}」", after.name),
                    before: job_json(before),
                    after: job_json(after),
                };
                vec![entry.by(who)]
            },
        )
        .await
        .map_err(ApiError::about(Noun::JOB, id))?;
    state.changes.job_changed(id);
    tracing::info!(job = id, version = updated.version, actor = %who.sub, "job updated");
    Ok(updated)
}

/// The `version` an edit's body says it was based on, or a 400 naming it.
fn edit_version(body: &Map<String, Value>) -> Result<i64, ApiError> {
    match body.get("version") {
        Some(Value::Number(n))
            if n.as_i64()
                .is_some_and(|v| (1..=MAX_SAFE_INTEGER).contains(&v)) =>
        {
            Ok(n.as_i64().unwrap_or(0))
        }
        Some(_) => Err(ApiError::field(
            "version",
            format!("version 应为 1–{MAX_SAFE_INTEGER} 的整数：修改前读到的版本号"),
            format!(
                "version must be a whole number from 1 to {MAX_SAFE_INTEGER}: the version the edit is based on"
            ),
        )),
        None => Err(ApiError::field(
            "version",
            "必填：请带上修改前读到的 version",
            "Required: send the version the edit is based on",
        )),
    }
}

/// Enables, disables or pauses job `id` as the body asks; the job before
/// and after (equal, and unaudited, when it already was as asked).
pub async fn set_enabled(
    state: &AppState,
    who: &Principal,
    id: i64,
    body: Value,
) -> Result<EnabledOutcome, ApiError> {
    let body = EnabledWrite::read(body, Utc::now())?;
    let outcome = state
        .store
        .jobs()
        .pause_audited(
            id,
            &body.request,
            body.version,
            &who.actor(),
            Utc::now(),
            |outcome| vec![enabled_entry(outcome).by(who)],
        )
        .await
        .map_err(ApiError::about(Noun::JOB, id))?;
    state.changes.job_changed(id);
    tracing::info!(job = id, enabled = body.request.enabled, until = ?body.request.until, actor = %who.sub, "job enabled state set");
    Ok(outcome)
}

/// Enables, disables or pauses several jobs, by ids or every job of a
/// group; each job written gets its own audit entry.
pub async fn batch_enabled(
    state: &AppState,
    who: &Principal,
    body: Value,
) -> Result<BatchEnabled, ApiError> {
    let (target, request) = BatchEnabledWrite::read(body, Utc::now())?;
    let selection = match &target {
        BatchTarget::Ids(ids) => JobSelection::Ids(ids),
        BatchTarget::Group(code) => {
            let known = state.store.groups().get(code).await?;
            if known.is_none() {
                let problem = job::FieldError {
                    field: "group".into(),
                    problem: job::JobProblem::UnknownGroup(code.clone()),
                };
                return Err(ApiError::validation(field_errors([&problem])));
            }
            JobSelection::Group(code)
        }
    };
    let batch = state
        .store
        .jobs()
        .pause_many_audited(selection, &request, &who.actor(), Utc::now(), |outcome| {
            vec![enabled_entry(outcome).by(who)]
        })
        .await?;
    for outcome in &batch.changed {
        state.changes.job_changed(outcome.after.id);
    }
    tracing::info!(updated = batch.changed.len(), enabled = request.enabled, actor = %who.sub, "jobs enabled state set");
    Ok(batch)
}

/// Deletes job `id`; its runs stay in the run log.
pub async fn delete(state: &AppState, who: &Principal, id: i64) -> Result<(), ApiError> {
    let deleted = state
        .store
        .jobs()
        .delete_audited(id, Utc::now(), |job| vec![delete_entry(job).by(who)])
        .await?;
    if deleted.is_none() {
        return Err(ApiError::missing(Noun::JOB, id));
    }
    state.changes.job_changed(id);
    tracing::info!(job = id, actor = %who.sub, "job deleted");
    Ok(())
}

/// Deletes the jobs a batch body lists; ids that name no job are ignored.
pub async fn batch_delete(state: &AppState, who: &Principal, body: Value) -> Result<(), ApiError> {
    let ids = IdList::read(body)?;
    let deleted = state
        .store
        .jobs()
        .delete_many_audited(&ids, Utc::now(), |job| vec![delete_entry(job).by(who)])
        .await?;
    for job in &deleted {
        state.changes.job_changed(job.id);
    }
    tracing::info!(count = deleted.len(), actor = %who.sub, "jobs deleted");
    Ok(())
}

/// The body as a JSON object, or a 400 naming the problem.
pub(crate) fn body_object(body: Value) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request(
            "请求体必须是一个 JSON 对象",
            "The request body must be a JSON object",
        )),
    }
}

/// Validates a merged job with its time rules and alert policy, turning every field error
/// into the response.
async fn validate(state: &AppState, input: &Map<String, Value>) -> Result<Checked, ApiError> {
    check(state, input)
        .await?
        .map_err(|errors| ApiError::validation(field_errors(&errors)))
}

/// A merged job, checked: its fields, time rules and alert policy.
pub(crate) struct Checked {
    pub(crate) spec: JobSpec,
    pub(crate) rules: TimeRules,
    pub(crate) alert: AlertPolicy,
}

/// Checks a merged job with its time rules and alert policy: the job, or
/// every field error.
pub(crate) async fn check(
    state: &AppState,
    input: &Map<String, Value>,
) -> Result<Result<Checked, Vec<job::FieldError>>, ApiError> {
    let groups: Vec<String> = state
        .store
        .groups()
        .list()
        .await?
        .into_iter()
        .map(|g| g.code)
        .collect();
    let channels = state.store.alert_channels().ids().await?;
    let calendars = calendar_codes(state).await?;
    let spec = job::validate_with_time_rules(input, &state.catalog, &groups, &calendars);
    let policy = alert::read_policy(input, &channels);
    Ok(match (spec, policy) {
        (Ok((spec, rules)), Ok(alert)) => Ok(Checked { spec, rules, alert }),
        (spec, policy) => {
            let mut errors = spec.err().unwrap_or_default();
            errors.extend(policy.err().unwrap_or_default());
            Err(errors)
        }
    })
}

/// A checked job as storage writes it; `builtin_key` only for a create.
pub(crate) fn to_new_job(checked: Checked, builtin_key: Option<String>) -> NewJob {
    let Checked { spec, rules, alert } = checked;
    NewJob {
        time_rules: rules,
        name: spec.name,
        group: spec.group,
        handler: spec.handler,
        params: Value::Object(spec.params),
        cron: spec.cron.as_str().to_string(),
        timezone: spec.timezone.map(|tz| tz.name().to_string()),
        enabled: spec.enabled,
        retry_count: spec.retry_count,
        retry_interval_ms: spec.retry_interval_ms,
        timeout_ms: spec.timeout_ms,
        allow_concurrent: spec.allow_concurrent,
        misfire_policy: spec.misfire_policy.as_str().to_string(),
        remark: spec.remark,
        retry_backoff: spec.retry.backoff.as_str().to_string(),
        retry_max_interval_ms: spec.retry.max_interval_ms,
        retry_jitter: spec.retry.jitter,
        overlap_policy: spec.overlap_policy.as_str().to_string(),
        builtin_key,
        alert,
    }
}

/// A stored job as the writable JSON fields, the base an update merges over.
fn writable(job: &JobRecord) -> Map<String, Value> {
    let rules = &job.time_rules;
    let Value::Object(map) = json!({
        "calendar": rules.calendar,
        "calendarRule": rules.calendar_rule.map(|r| r.as_str()),
        "activeFrom": rules.active_from.map(|t| t.to_rfc3339()),
        "activeUntil": rules.active_until.map(|t| t.to_rfc3339()),
        "misfireGraceMs": rules.misfire_grace_ms,
        "maxRuns": rules.max_runs,
        "jitterMs": rules.jitter_ms,
        "name": job.name,
        "group": job.group,
        "handler": job.handler,
        "params": job.params,
        "cron": job.cron.as_str(),
        "timezone": job.timezone.map(|tz| tz.name()),
        "enabled": job.enabled,
        "retryCount": job.retry_count,
        "retryIntervalMs": job.retry_interval_ms,
        "timeoutMs": job.timeout_ms,
        "allowConcurrent": job.allow_concurrent,
        "misfirePolicy": job.misfire_policy.as_str(),
        "remark": job.remark,
        "alertOnFailure": job.alert.on_failure,
        "alertAfterConsecutiveFailures": job.alert.after_consecutive_failures,
        "alertOnRecovery": job.alert.on_recovery,
        "alertChannels": job.alert.channels,
        "retryBackoff": job.retry_backoff,
        "retryMaxIntervalMs": job.retry_max_interval_ms,
        "retryJitter": job.retry_jitter,
        "overlapPolicy": job.overlap_policy.as_str(),
    }) else {
        return Map::new();
    };
    map
}

/// Job `id`, or a 404 naming it.
pub(crate) async fn load(state: &AppState, id: i64) -> Result<JobRecord, ApiError> {
    state
        .store
        .jobs()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::JOB, id))
}

/// An update's body merged over the stored job, as a `PUT` saves it.
pub(crate) fn merged(
    state: &AppState,
    current: &JobRecord,
    body: Map<String, Value>,
) -> Map<String, Value> {
    let mut input = writable(current);
    // An edit that sets only the compatible `allowConcurrent` means the
    // policy it stands for, except that `false` keeps a policy that does
    // not run fires in parallel (`queue_one`, `replace`).
    if !body.contains_key("overlapPolicy")
        && let Some(Value::Bool(allow)) = body.get("allowConcurrent")
        && (*allow || current.allow_concurrent)
    {
        input.remove("overlapPolicy");
    }
    input.extend(body);
    // The manual's rule for a new handler: params that are empty or still
    // the old handler's defaults become the new handler's defaults.
    if let Some(new_handler) = input.get("handler").and_then(Value::as_str)
        && let Some(params) = job::params_for_new_handler(
            input.get("params"),
            &current.handler,
            new_handler.trim(),
            &state.catalog,
        )
    {
        input.insert("params".into(), params);
    }
    // A built-in job echoed back under its translated name keeps its
    // original name, so that it keeps following the reader's language.
    if let Some(b) = current.builtin_key.as_deref().and_then(builtin::by_key)
        && current.name == b.name_zh
        && input.get("name").and_then(Value::as_str) == Some(b.name_en)
    {
        input.insert("name".into(), json!(b.name_zh));
    }
    input
}

/// The audit entry of one job enabled, disabled or paused.
fn enabled_entry(outcome: &EnabledOutcome) -> Entry {
    let job = &outcome.after;
    let (action, summary) = if job.enabled {
        (Action::JobEnable, format!("启用任务「{}」", job.name))
    } else {
        let mut summary = format!("停用任务「{}」", job.name);
        if let Some(until) = job.pause.until {
            summary.push_str(&format!("，至 {}", until.to_rfc3339()));
        }
        if let Some(reason) = &job.pause.reason {
            summary.push_str(&format!("，原因：{reason}"));
        }
        (Action::JobDisable, summary)
    };
    Entry {
        action,
        target_type: Target::Job,
        target_id: Some(job.id.to_string()),
        summary,
        before: job_json(&outcome.before),
        after: job_json(job),
    }
}

/// The audit entry of one deleted job; a batch delete writes one per job.
fn delete_entry(job: &JobRecord) -> Entry {
    Entry {
        action: Action::JobDelete,
        target_type: Target::Job,
        target_id: Some(job.id.to_string()),
        summary: format!("删除任务「{}」", job.name),
        before: job_json(job),
        after: None,
    }
}
