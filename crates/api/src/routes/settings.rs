//! Operator settings (super admins only): the keys this service knows,
//! read and changed one at a time; every change is audited.

use actix_web::{HttpResponse, get, put, web};
use chrono::Utc;
use qiwu_domain::settings::{self, SETTINGS};
use serde_json::Value;

use crate::auth::{Need, perm};
use crate::error::{ApiError, Problem};
use crate::notify_dto::{SettingDto, SettingWrite};
use crate::state::AppState;

/// Lists every known setting with its value (or default) and meaning.
#[utoipa::path(
    tag = "settings",
    summary = "List settings",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every setting with its value or default", body = Vec<SettingDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/settings")]
pub async fn list_settings(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let mut stored = state.store.settings().list().await?;
    let items: Vec<SettingDto> = SETTINGS
        .iter()
        .map(|def| {
            let row = stored
                .iter()
                .position(|s| s.key == def.key)
                .map(|i| stored.swap_remove(i));
            SettingDto::new(def, row, lang)
        })
        .collect();
    Ok(HttpResponse::Ok().json(items))
}

/// Changes one known setting: `audit.retention_days` (an integer
/// 1–36500) or `notify.webhook_url` (empty, or an http(s) URL).
#[utoipa::path(
    tag = "settings",
    summary = "Change a setting",
    security(("bearer" = [])),
    params(("key" = crate::schema::SettingKey, Path, description = "Setting key; another is a 404")),
    request_body(content = SettingWrite, example = json!({"value": "30"})),
    responses(
        (status = 200, description = "The setting with its new value", body = SettingDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown key", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/settings/{key}")]
pub async fn update_setting(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    key: web::Path<String>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let key = key.into_inner();
    let Some(def) = settings::find(&key) else {
        return Err(ApiError::not_found(
            format!("参数 {key} 不存在：只能修改本服务认识的参数"),
            format!("There is no setting {key}: only this service's settings can be changed"),
        ));
    };
    let raw = SettingWrite::read(body.into_inner())?;
    let value = match settings::validate(def.key, &raw) {
        Some(Ok(v)) => v,
        Some(Err(problem)) => {
            return Err(ApiError::field(
                "value",
                problem.message(qiwu_domain::Lang::Zh),
                problem.message(qiwu_domain::Lang::En),
            ));
        }
        // Known keys always have a rule; reaching here is our bug.
        None => {
            return Err(ApiError::internal(std::io::Error::other(format!(
                "no validation rule for setting {key}"
            ))));
        }
    };
    let change = state
        .store
        .settings()
        .set(def.key, &value, &who.actor(), Utc::now())
        .await?;
    if change.changed {
        tracing::info!(key = def.key, actor = %who.sub, "setting changed");
    }
    Ok(HttpResponse::Ok().json(SettingDto::new(def, Some(change.record), lang)))
}
