//! Freeze windows (issue 11, part 4; super admins): list, create, detail,
//! update and delete. A window is editable and deletable only until it
//! starts (409 after). A "run once" of a job that a window holds now is
//! refused with 409 naming the window ([`refuse_if_frozen`]).

use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use qiwu_domain::freeze::{self, FreezeScope, FreezeSpec};
use qiwu_storage::{FreezeRecord, FreezeRefusal, JobRecord};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::error::{ApiError, ErrorKind, Noun, Problem, ProblemFieldText, Text, field_errors};
use crate::query::Id;
use crate::routes::calendars::{body_object, version_of};
use crate::state::AppState;

/// The jobs a window covers.
#[derive(ToSchema)]
#[allow(dead_code)] // the schema of `scope`
pub enum FreezeScopeKind {
    #[schema(rename = "all")]
    All,
    #[schema(rename = "group")]
    Group,
    #[schema(rename = "handler")]
    Handler,
    #[schema(rename = "jobIds")]
    JobIds,
}

/// Where a window stands at the time of the answer.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // the schema of `status`
pub enum FreezeStatus {
    /// Not started: editable and deletable.
    Scheduled,
    /// Started, not ended.
    Active,
    Ended,
}

/// A freeze window: the fire times in `[from, to)` of the jobs in its scope
/// are not run; each job gets one skipped record for the window, and at its
/// end the job's misfire policy applies.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FreezeDto {
    pub id: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    #[schema(value_type = FreezeScopeKind)]
    pub scope: String,
    /// With `scope: group`: the group's code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// With `scope: handler`: the handler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// With `scope: jobIds`: the jobs, ascending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_ids: Option<Vec<i64>>,
    pub reason: String,
    #[schema(value_type = FreezeStatus)]
    pub status: String,
    /// Bumped by every change; send it back with updates.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl FreezeDto {
    fn new(f: FreezeRecord, now: DateTime<Utc>) -> FreezeDto {
        let status = if now < f.from {
            "scheduled"
        } else if now < f.to {
            "active"
        } else {
            "ended"
        };
        let (group, handler, job_ids) = match &f.scope {
            FreezeScope::All => (None, None, None),
            FreezeScope::Group(g) => (Some(g.clone()), None, None),
            FreezeScope::Handler(h) => (None, Some(h.clone()), None),
            FreezeScope::JobIds(ids) => (None, None, Some(ids.clone())),
        };
        FreezeDto {
            id: f.id,
            from: f.from,
            to: f.to,
            scope: f.scope.kind().to_string(),
            group,
            handler,
            job_ids,
            reason: f.reason,
            status: status.to_string(),
            version: f.version,
            created_at: f.created_at,
            created_by: f.created_by,
            updated_at: f.updated_at,
            updated_by: f.updated_by,
        }
    }
}

/// A new window. `from < to`, `to` in the future; the scope's own field
/// (`group`, `handler` or `jobIds`) names what exists.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the body, which is read field by field
pub struct FreezeCreate {
    /// RFC 3339 with an offset.
    #[schema(format = DateTime)]
    pub from: String,
    /// RFC 3339 with an offset; after `from` and in the future.
    #[schema(format = DateTime)]
    pub to: String,
    #[schema(value_type = FreezeScopeKind)]
    pub scope: String,
    /// Only with `scope: group`, required there.
    #[schema(required = false, max_length = 64)]
    pub group: String,
    /// Only with `scope: handler`, required there.
    #[schema(required = false, max_length = 128)]
    pub handler: String,
    /// Only with `scope: jobIds`, required there (1–1000 ids).
    #[schema(required = false, min_items = 1, max_items = 1000)]
    pub job_ids: Vec<i64>,
    /// Why (a release, a migration): shown in every skipped record.
    #[schema(max_length = 500)]
    pub reason: String,
}

/// A window's new definition (the whole of it) with the `version` read.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the body, which is read field by field
pub struct FreezeUpdate {
    #[schema(minimum = 1, maximum = 9007199254740991_i64)]
    pub version: i64,
    #[schema(format = DateTime)]
    pub from: String,
    #[schema(format = DateTime)]
    pub to: String,
    #[schema(value_type = FreezeScopeKind)]
    pub scope: String,
    #[schema(required = false, max_length = 64)]
    pub group: String,
    #[schema(required = false, max_length = 128)]
    pub handler: String,
    #[schema(required = false, min_items = 1, max_items = 1000)]
    pub job_ids: Vec<i64>,
    #[schema(max_length = 500)]
    pub reason: String,
}

fn started(f: &FreezeRecord) -> ApiError {
    ApiError::new(ErrorKind::Conflict(Text::new(
        format!(
            "冻结窗口 {} 已于 {} 开始：开始后不能再修改或删除",
            f.id,
            f.from.to_rfc3339()
        ),
        format!(
            "Freeze {} started at {}: a freeze cannot be changed or deleted once it has started",
            f.id,
            f.from.to_rfc3339()
        ),
    )))
}

fn audit_json(f: &FreezeRecord) -> Option<Value> {
    serde_json::to_value(FreezeDto::new(f.clone(), Utc::now())).ok()
}

/// Checks what the scope names exists (400 naming the field otherwise).
async fn check_scope(state: &AppState, spec: &FreezeSpec) -> Result<(), ApiError> {
    let missing = match &spec.scope {
        FreezeScope::All => None,
        FreezeScope::Group(code) => state
            .store
            .groups()
            .get(code)
            .await?
            .is_none()
            .then(|| ("group", Noun::GROUP.missing(code))),
        FreezeScope::Handler(name) => {
            (!state.catalog.contains(name)).then(|| ("handler", Noun::HANDLER.missing(name)))
        }
        FreezeScope::JobIds(ids) => {
            let found = state.store.jobs().get_many(ids).await?;
            let unknown: Vec<String> = ids
                .iter()
                .filter(|id| !found.contains_key(id))
                .take(10)
                .map(i64::to_string)
                .collect();
            (!unknown.is_empty()).then(|| {
                let list = unknown.join(", ");
                (
                    "jobIds",
                    Text::new(
                        format!("这些任务不存在：{list}"),
                        format!("These jobs do not exist: {list}"),
                    ),
                )
            })
        }
    };
    match missing {
        None => Ok(()),
        Some((field, text)) => Err(ApiError::validation(vec![ProblemFieldText::new(
            field, text,
        )])),
    }
}

/// A run-once request for a job that a freeze window holds now is refused
/// (409 naming the window): a freeze is declared so that nothing of its
/// scope runs, and a click during a release or a migration is exactly what
/// it guards against.
pub(crate) async fn refuse_if_frozen(
    state: &AppState,
    job: &JobRecord,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let freezes = state
        .store
        .freezes()
        .ending_after(now)
        .await?
        .into_iter()
        .map(|r| r.to_freeze())
        .collect::<Vec<_>>();
    let Some(f) = freeze::freezing(&freezes, job.id, &job.group, &job.handler, now) else {
        return Ok(());
    };
    Err(ApiError::new(ErrorKind::Conflict(Text::new(
        format!(
            "任务 {} 处于冻结窗口 {}（{}）中，直到 {}：冻结期间不能执行一次",
            job.id,
            f.id,
            f.reason,
            f.to.to_rfc3339()
        ),
        format!(
            "Job {} is frozen by freeze {} ({}) until {}: it cannot be run once during the freeze",
            job.id,
            f.id,
            f.reason,
            f.to.to_rfc3339()
        ),
    ))))
}

/// Every freeze window, the latest-starting first (windows are few; no
/// paging).
#[utoipa::path(
    tag = "freezes",
    summary = "List freeze windows (super admins)",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every freeze window, the latest-starting first", body = Vec<FreezeDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/freezes")]
pub async fn list_freezes(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let now = Utc::now();
    let items = state.store.freezes().list().await?;
    let items: Vec<FreezeDto> = items.into_iter().map(|f| FreezeDto::new(f, now)).collect();
    Ok(HttpResponse::Ok().json(items))
}

/// Declares a freeze window.
#[utoipa::path(
    tag = "freezes",
    summary = "Create a freeze window (super admins)",
    description = "Fire times in `[from, to)` of the jobs in scope are not run: each job gets one skipped record for the window (naming the freeze, its reason and the count), and at `to` its misfire policy applies as after a downtime (`run_once` catches up once, within `misfireGraceMs`). Audited as `freeze.create`.",
    security(("bearer" = [])),
    request_body(
        content = FreezeCreate,
        example = json!({"from": "2026-12-12T22:00:00+08:00", "to": "2026-12-13T02:00:00+08:00", "scope": "group", "group": "finance", "reason": "核心库迁移"})
    ),
    responses(
        (status = 201, description = "The window, created; `Location` names it", body = FreezeDto),
        (status = 400, description = "A field is invalid, or names no group, handler or job: `errors` names each", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/freezes")]
pub async fn create_freeze(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let now = Utc::now();
    let body = body_object(body.into_inner())?;
    let spec = freeze::validate(&body, now).map_err(|e| ApiError::validation(field_errors(&e)))?;
    check_scope(&state, &spec).await?;
    let created = state
        .store
        .freezes()
        .create(&spec, &who.actor(), now)
        .await?;
    state.changes.freezes_changed(created.id);
    audit::record(
        &state,
        &who,
        Action::FreezeCreate,
        Target::Freeze,
        Some(created.id.to_string()),
        format!("创建冻结窗口 {}（{}）", created.id, created.reason),
        None,
        audit_json(&created),
    )
    .await;
    tracing::info!(freeze = created.id, actor = %who.sub, "freeze created");
    Ok(HttpResponse::Created()
        .insert_header((header::LOCATION, format!("/api/freezes/{}", created.id)))
        .json(FreezeDto::new(created, now)))
}

/// One freeze window.
#[utoipa::path(
    tag = "freezes",
    summary = "Freeze window detail (super admins)",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Freeze id")),
    responses(
        (status = 200, description = "The window", body = FreezeDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/freezes/{id}")]
pub async fn get_freeze(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let found = state
        .store
        .freezes()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::FREEZE, id))?;
    Ok(HttpResponse::Ok().json(FreezeDto::new(found, Utc::now())))
}

/// Redefines a freeze window that has not started.
#[utoipa::path(
    tag = "freezes",
    summary = "Update a freeze window (super admins)",
    description = "The whole definition, with the `version` read. Only until the window starts. Audited as `freeze.modify`.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Freeze id")),
    request_body(
        content = FreezeUpdate,
        example = json!({"version": 1, "from": "2026-12-12T23:00:00+08:00", "to": "2026-12-13T02:00:00+08:00", "scope": "all", "reason": "核心库迁移（推迟一小时）"})
    ),
    responses(
        (status = 200, description = "The window as saved, with its new version", body = FreezeDto),
        (status = 400, description = "A field is invalid: `errors` names each", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The window has started, or a stale version", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/freezes/{id}")]
pub async fn update_freeze(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let now = Utc::now();
    let body = body_object(body.into_inner())?;
    let version = version_of(&body);
    let fields: Map<String, Value> = body
        .iter()
        .filter(|(k, _)| k.as_str() != "version")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (version, spec) = match (version, freeze::validate(&fields, now)) {
        (Ok(version), Ok(spec)) => (version, spec),
        (version, spec) => {
            let mut errors: Vec<ProblemFieldText> = version.err().into_iter().collect();
            errors.extend(field_errors(&spec.err().unwrap_or_default()));
            return Err(ApiError::validation(errors));
        }
    };
    check_scope(&state, &spec).await?;
    let (before, after) = state
        .store
        .freezes()
        .update(id, version, &spec, &who.actor(), now)
        .await?
        .map_err(|refusal| refused(id, refusal))?;
    state.changes.freezes_changed(id);
    audit::record(
        &state,
        &who,
        Action::FreezeModify,
        Target::Freeze,
        Some(id.to_string()),
        format!("修改冻结窗口 {id}（{}）", after.reason),
        audit_json(&before),
        audit_json(&after),
    )
    .await;
    tracing::info!(freeze = id, version = after.version, actor = %who.sub, "freeze updated");
    Ok(HttpResponse::Ok().json(FreezeDto::new(after, now)))
}

/// Deletes a freeze window that has not started.
#[utoipa::path(
    tag = "freezes",
    summary = "Delete a freeze window (super admins)",
    description = "Only until the window starts. Audited as `freeze.delete`.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Freeze id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The window has started", body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/freezes/{id}")]
pub async fn delete_freeze(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let deleted = state
        .store
        .freezes()
        .delete(id, Utc::now())
        .await?
        .map_err(|refusal| refused(id, refusal))?;
    state.changes.freezes_changed(id);
    audit::record(
        &state,
        &who,
        Action::FreezeDelete,
        Target::Freeze,
        Some(id.to_string()),
        format!("删除冻结窗口 {id}（{}）", deleted.reason),
        audit_json(&deleted),
        None,
    )
    .await;
    tracing::info!(freeze = id, actor = %who.sub, "freeze deleted");
    Ok(HttpResponse::NoContent().finish())
}

fn refused(id: i64, refusal: FreezeRefusal) -> ApiError {
    match refusal {
        FreezeRefusal::NotFound => ApiError::missing(Noun::FREEZE, id),
        FreezeRefusal::Started(f) => started(&f),
        FreezeRefusal::StaleVersion { current } => {
            ApiError::new(ErrorKind::StaleVersion { current })
        }
    }
}
