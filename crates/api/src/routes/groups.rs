//! The job-group dictionary.

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::Utc;

use crate::auth::{Need, perm};
use crate::dto::{GroupCreate, GroupDto};
use crate::error::{ApiError, ErrorKind, Noun, Problem, Text};
use crate::state::AppState;

/// Lists job groups, built-in ones first.
#[utoipa::path(
    tag = "job-groups",
    summary = "List job groups",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every job group, built-in ones first", body = Vec<GroupDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/job-groups")]
pub async fn list_groups(
    state: web::Data<AppState>,
    who: Need<perm::TaskBrowse>,
) -> Result<HttpResponse, ApiError> {
    let groups = state.store.groups().list().await?;
    let items: Vec<GroupDto> = groups
        .into_iter()
        .map(|g| GroupDto::new(g, who.lang))
        .collect();
    Ok(HttpResponse::Ok().json(items))
}

fn valid_code(code: &str) -> bool {
    (1..=64).contains(&code.len())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Adds a job group (super admins only).
#[utoipa::path(
    tag = "job-groups",
    summary = "Create a job group",
    security(("bearer" = [])),
    request_body(content = GroupCreate, example = json!({"code": "ops", "labelZh": "运维", "labelEn": "Operations"})),
    responses(
        (status = 201, description = "The group, created", body = GroupDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/job-groups")]
pub async fn create_group(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    body: web::Json<serde_json::Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let body = GroupCreate::read(body.into_inner())?;
    let code = body.code.trim();
    let label_zh = body.label_zh.trim();
    let label_en = body.label_en.as_deref().map(str::trim).unwrap_or(label_zh);
    let mut errors = Vec::new();
    if !valid_code(code) {
        errors.push(crate::error::ProblemFieldText::new(
            "code",
            Text::new(
                "分组编码为 1–64 个小写字母、数字、_ 或 -",
                "A group code is 1–64 lower-case letters, digits, _ or -",
            ),
        ));
    }
    let labels = [
        ("labelZh", body.label_zh.as_str()),
        ("labelEn", body.label_en.as_deref().unwrap_or_default()),
    ];
    for (field, raw) in labels {
        if qiwu_domain::job::has_control(raw) {
            errors.push(crate::error::ProblemFieldText::new(
                field,
                Text::new(
                    "名称不能包含控制字符（换行、制表符等 U+0000–U+001F、U+007F）",
                    "A label must not contain control characters (line breaks, tabs and the rest of U+0000–U+001F, U+007F)",
                ),
            ));
        }
    }
    for (field, label) in [("labelZh", label_zh), ("labelEn", label_en)] {
        if label.is_empty() || label.chars().count() > 64 {
            errors.push(crate::error::ProblemFieldText::new(
                field,
                Text::new("名称为 1–64 个字", "A label has 1–64 characters"),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let created = state
        .store
        .groups()
        .create(code, label_zh, label_en, Utc::now())
        .await
        .map_err(|e| match e {
            qiwu_storage::StorageError::AlreadyExists => ApiError::exists(Noun::JOB_GROUP, code),
            other => ApiError::from(other),
        })?;
    Ok(HttpResponse::Created().json(GroupDto::new(created, lang)))
}

/// Deletes a job group that no job uses (super admins only).
#[utoipa::path(
    tag = "job-groups",
    summary = "Delete a job group",
    security(("bearer" = [])),
    params(("code" = String, Path, description = "Group code")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/job-groups/{code}")]
pub async fn delete_group(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
    code: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let code = code.into_inner();
    let store = &state.store;
    let group = store
        .groups()
        .get(&code)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::JOB_GROUP, &code))?;
    if group.builtin {
        return Err(ApiError::new(ErrorKind::Conflict(Text::new(
            format!("分组 {code} 是内置分组，不能删除"),
            format!("Job group {code} is built in and cannot be deleted"),
        ))));
    }
    let used = store.jobs().count_in_group(&code).await?;
    if used > 0 {
        return Err(ApiError::new(ErrorKind::Conflict(Text::new(
            format!("还有 {used} 个任务属于分组 {code}：请先移走这些任务"),
            format!("{used} jobs still belong to group {code}: move them first"),
        ))));
    }
    store.groups().delete(&code).await?;
    Ok(HttpResponse::NoContent().finish())
}
