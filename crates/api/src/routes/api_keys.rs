//! API keys of service accounts (super admins only): list, create (the key
//! is shown once), revoke.

use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use qiwu_storage::ApiKeyRecord;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, Permission, perm};
use crate::error::{ApiError, Noun, Problem, ProblemFieldText, Text};
use crate::query::Id;
use crate::state::AppState;

/// Longest key name, as wide as its column.
const NAME_CHARS: usize = 64;

/// An API key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyDto {
    pub id: i64,
    /// Who uses it; requests made with it act as `apikey:<name>`.
    pub name: String,
    /// The 8 characters after `qk_`, to tell keys apart: a key reads
    /// `qk_<prefix>_<secret>`.
    pub prefix: String,
    /// The permission codes the key grants.
    #[schema(value_type = Vec<crate::schema::PermissionCode>)]
    pub perms: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// Set once revoked; a revoked key is refused (401).
    pub revoked_at: Option<DateTime<Utc>>,
    /// The last request made with the key, to the minute.
    pub last_used_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyRecord> for ApiKeyDto {
    fn from(k: ApiKeyRecord) -> ApiKeyDto {
        ApiKeyDto {
            id: k.id,
            name: k.name,
            prefix: k.prefix,
            perms: k.perms,
            created_at: k.created_at,
            created_by: k.created_by,
            revoked_at: k.revoked_at,
            last_used_at: k.last_used_at,
        }
    }
}

/// A new API key.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the body, which is read field by field
pub struct ApiKeyCreate {
    /// 1–64 characters after trimming, such as the service's name; no
    /// control characters; need not be unique (a replacement key may share
    /// its predecessor's name).
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F-\x9F]*[^\s\x00-\x1F\x7F-\x9F][^\x00-\x1F\x7F-\x9F]*$"
    )]
    pub name: String,
    /// One or more permission codes; duplicates are dropped, and the key
    /// keeps them in the order of the permission table.
    #[schema(value_type = Vec<crate::schema::PermissionCode>, min_items = 1)]
    pub perms: Vec<String>,
}

/// A created key: the only time its plaintext is shown.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyCreated {
    /// The whole key, `qk_<prefix>_<secret>`, to send as
    /// `Authorization: Bearer <key>`. Only a hash is kept: it cannot be
    /// shown again.
    pub key: String,
    /// Says to store the key now, in the request's language.
    pub notice: String,
    #[serde(flatten)]
    pub api_key: ApiKeyDto,
}

/// A key as the audit log keeps it: the listed form, never the secret.
fn audit_json(key: &ApiKeyRecord) -> Option<Value> {
    serde_json::to_value(ApiKeyDto::from(key.clone())).ok()
}

/// Lists every API key, revoked ones included, newest first. Secrets are
/// never shown again after creation.
#[utoipa::path(
    tag = "api-keys",
    summary = "List API keys (super admins)",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every API key, revoked ones included, newest first", body = Vec<ApiKeyDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/api-keys")]
pub async fn list_api_keys(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let keys = state.store.api_keys().list().await?;
    let items: Vec<ApiKeyDto> = keys.into_iter().map(ApiKeyDto::from).collect();
    Ok(HttpResponse::Ok().json(items))
}

/// The name and the permission codes (deduplicated, in the canonical
/// order) of a create request, or a 400 naming every bad field.
fn validate(body: Value) -> Result<(String, Vec<String>), ApiError> {
    let Value::Object(mut body) = body else {
        return Err(ApiError::bad_request(
            "请求体必须是一个 JSON 对象",
            "The request body must be a JSON object",
        ));
    };
    let mut errors = Vec::new();
    let name = validate_name(body.remove("name"), &mut errors);
    let perms = validate_perms(body.remove("perms"), &mut errors);
    for field in body.keys() {
        errors.push(ProblemFieldText::new(
            field.as_str(),
            Text::new(
                "未知字段：只能填写 name 和 perms",
                "Unknown field: only name and perms are accepted",
            ),
        ));
    }
    if errors.is_empty() {
        Ok((name, perms))
    } else {
        Err(ApiError::validation(errors))
    }
}

fn validate_name(value: Option<Value>, errors: &mut Vec<ProblemFieldText>) -> String {
    let message = match value {
        None | Some(Value::Null) => Text::new("必填", "Required"),
        Some(Value::String(s)) => {
            let name = s.trim();
            let chars = name.chars().count();
            // Control characters are refused anywhere, also where trimming
            // would remove them, as in job names.
            if (1..=NAME_CHARS).contains(&chars) && !s.chars().any(char::is_control) {
                return name.to_owned();
            }
            Text::new(
                format!("名称为 1–{NAME_CHARS} 个字，不能含控制字符"),
                format!("A name has 1–{NAME_CHARS} characters and no control characters"),
            )
        }
        Some(_) => Text::new("名称应为字符串", "name must be a string"),
    };
    errors.push(ProblemFieldText::new("name", message));
    String::new()
}

fn validate_perms(value: Option<Value>, errors: &mut Vec<ProblemFieldText>) -> Vec<String> {
    let known = || {
        Permission::ALL
            .iter()
            .map(|p| p.code())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let items = match value {
        Some(Value::Array(items)) if !items.is_empty() => items,
        None | Some(Value::Null) => {
            errors.push(ProblemFieldText::new(
                "perms",
                Text::new("必填", "Required"),
            ));
            return Vec::new();
        }
        Some(_) => {
            errors.push(ProblemFieldText::new(
                "perms",
                Text::new(
                    format!("perms 应为非空的权限编码列表，可选：{}", known()),
                    format!(
                        "perms must be a non-empty list of permission codes, from: {}",
                        known()
                    ),
                ),
            ));
            return Vec::new();
        }
    };
    let mut granted = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str().and_then(Permission::from_code) {
            Some(p) => granted.push(p),
            None => errors.push(ProblemFieldText::new(
                format!("perms/{i}"),
                Text::new(
                    format!("未知的权限编码 {item}，可选：{}", known()),
                    format!("Unknown permission code {item}; one of: {}", known()),
                ),
            )),
        }
    }
    granted.sort();
    granted.dedup();
    granted.into_iter().map(|p| p.code().to_owned()).collect()
}

/// Creates an API key for a service account. The answer carries the whole
/// key in `key`, once: only its hash is stored.
#[utoipa::path(
    tag = "api-keys",
    summary = "Create an API key (super admins)",
    security(("bearer" = [])),
    request_body(content = ApiKeyCreate, example = json!({"name": "wf-service", "perms": ["scheduler.task.run", "scheduler.task.view"]})),
    responses(
        (status = 201, description = "The key, created; `key` is shown only this once", body = ApiKeyCreated),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/api-keys")]
pub async fn create_api_key(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let (name, perms) = validate(body.into_inner())?;
    let (created, key) = state
        .store
        .api_keys()
        .create(&name, &perms, &who.actor(), Utc::now())
        .await?;
    audit::record(
        &state,
        &who,
        Action::ApiKeyCreate,
        Target::ApiKey,
        Some(created.id.to_string()),
        format!("创建 API 密钥「{}」（qk_{}）", created.name, created.prefix),
        None,
        audit_json(&created),
    )
    .await;
    tracing::info!(api_key = created.id, prefix = %created.prefix, actor = %who.sub, "api key created");
    Ok(HttpResponse::Created()
        // The one answer that carries the secret must not be kept by caches.
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(ApiKeyCreated {
            key,
            notice: lang
                .pick(
                    "请立即保存此密钥：它只显示这一次",
                    "Store this key now: it is shown only this once",
                )
                .to_string(),
            api_key: created.into(),
        }))
}

/// Revokes an API key at once; requests made with it get 401 from then
/// on. Revoking a revoked key changes nothing and answers 204 again.
#[utoipa::path(
    tag = "api-keys",
    summary = "Revoke an API key (super admins)",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "API key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/api-keys/{id}")]
pub async fn revoke_api_key(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let (revoked, newly) = state
        .store
        .api_keys()
        .revoke(id, Utc::now())
        .await
        .map_err(ApiError::about(Noun::API_KEY, id))?;
    // A second revoke changes nothing, so it writes no audit entry.
    if newly {
        let before = ApiKeyRecord {
            revoked_at: None,
            ..revoked.clone()
        };
        audit::record(
            &state,
            &who,
            Action::ApiKeyRevoke,
            Target::ApiKey,
            Some(id.to_string()),
            format!("吊销 API 密钥「{}」（qk_{}）", revoked.name, revoked.prefix),
            audit_json(&before),
            audit_json(&revoked),
        )
        .await;
        tracing::info!(api_key = id, prefix = %revoked.prefix, actor = %who.sub, "api key revoked");
    }
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use qiwu_domain::Lang;
    use serde_json::json;

    fn fields(e: ApiError) -> Vec<String> {
        e.problem(Lang::Zh)
            .errors
            .into_iter()
            .map(|f| f.field)
            .collect()
    }

    #[test]
    fn valid_body_is_trimmed_deduplicated_and_ordered() {
        let (name, perms) = validate(json!({"name": "  wf service ", "perms": ["scheduler.task.view", "scheduler.task.run", "scheduler.task.view"]}),
        )
        .expect("valid");
        assert_eq!(name, "wf service");
        assert_eq!(perms, vec!["scheduler.task.view", "scheduler.task.run"]);
    }

    #[test]
    fn every_bad_field_is_named() {
        let e = validate(
            json!({"name": "", "perms": ["scheduler.task.run", "superAdmin", 3], "scope": 1}),
        )
        .expect_err("invalid");
        assert_eq!(fields(e), vec!["name", "perms/1", "perms/2", "scope"]);
        let e = validate(json!({})).expect_err("invalid");
        assert_eq!(fields(e), vec!["name", "perms"]);
        let e = validate(json!({"name": "x".repeat(65), "perms": []})).expect_err("invalid");
        assert_eq!(fields(e), vec!["name", "perms"]);
        let e = validate(json!({"name": "a\u{7}b", "perms": "scheduler.task.run"}))
            .expect_err("invalid");
        assert_eq!(fields(e), vec!["name", "perms"]);
        assert!(
            validate(json!({"name": "名".repeat(64), "perms": ["scheduler.run.view"]})).is_ok()
        );
        assert!(validate(json!([1])).is_err());
    }
}
