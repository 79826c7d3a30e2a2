//! Alert channels (issue 10, super admins only): list, create, detail,
//! update, delete. `url` and `secret` are write-only: answers show the
//! URL's scheme and host (`target`) and whether a secret is set.

use actix_web::http::header;
use actix_web::{HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use qiwu_domain::alert;
use qiwu_storage::{ChannelRecord, StorageError};
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::audit::{self, Action, Target};
use crate::auth::{Need, perm};
use crate::error::{ApiError, ErrorKind, Noun, Problem, ProblemFieldText, Text, field_errors};
use crate::query::Id;
use crate::routes::calendars::{body_object, version_of};
use crate::state::AppState;

/// Where an alert goes: `inbox` (the super administrators' inbox, and the
/// `notify.webhook_url` delivery), `webhook` (signed like
/// `notify.dispatch`), `dingtalk`, `wecom` or `feishu` (their robots).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // the schema of `kind`
pub enum AlertChannelKind {
    Inbox,
    Webhook,
    Dingtalk,
    Wecom,
    Feishu,
}

/// A channel as shown: never its URL's path and query, nor its secret.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertChannelDto {
    pub id: i64,
    pub name: String,
    #[schema(value_type = AlertChannelKind)]
    pub kind: String,
    /// A disabled channel gets no new alerts.
    pub enabled: bool,
    /// Used for jobs whose `alertChannels` is empty.
    pub is_default: bool,
    /// The URL's scheme and host, such as `https://oapi.dingtalk.com`;
    /// empty for the inbox.
    pub target: String,
    pub has_url: bool,
    pub has_secret: bool,
    /// Bumped by every change; send it back with updates.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

impl From<ChannelRecord> for AlertChannelDto {
    fn from(c: ChannelRecord) -> AlertChannelDto {
        AlertChannelDto {
            id: c.id,
            name: c.name,
            kind: c.kind.as_str().to_owned(),
            enabled: c.enabled,
            is_default: c.is_default,
            target: c.url.as_deref().map(alert::url_target).unwrap_or_default(),
            has_url: c.url.is_some(),
            has_secret: c.secret.is_some(),
            version: c.version,
            created_at: c.created_at,
            created_by: c.created_by,
            updated_at: c.updated_at,
            updated_by: c.updated_by,
        }
    }
}

/// A new channel.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the body, which is read field by field
pub struct AlertChannelCreate {
    /// Unique, 1–64 characters after trimming; no control characters.
    #[schema(
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    #[schema(value_type = AlertChannelKind)]
    pub kind: String,
    /// Default true.
    #[schema(required = false)]
    pub enabled: bool,
    /// Default false.
    #[schema(required = false)]
    pub is_default: bool,
    /// Write-only. Required except for `inbox` (which takes none): the
    /// receiver for `webhook`; the robot's whole webhook URL for the
    /// robots (DingTalk's with `access_token=`, WeCom's with `key=`,
    /// Feishu's `…/open-apis/bot/v2/hook/…`).
    #[schema(required = false, max_length = 2000, pattern = r"^https?://\S+$")]
    pub url: String,
    /// Write-only. The signing secret: `webhook` signs with it
    /// (`X-Qiwu-Signature`; without one, with `QIWU_WEBHOOK_SECRET`),
    /// DingTalk's and Feishu's robots with their "signature" security
    /// setting (`SEC…`). WeCom robots take none (the key is in the URL).
    #[schema(required = false, nullable, max_length = 512)]
    pub secret: Option<String>,
}

/// Changes to a channel. Absent fields keep their value (`url` and
/// `secret` included); `secret: null` removes the secret. `kind` cannot
/// change.
#[derive(Debug, ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // the schema of the body, which is read field by field
pub struct AlertChannelUpdate {
    /// The `version` read before editing.
    #[schema(minimum = 1, maximum = 9007199254740991_i64)]
    pub version: i64,
    #[schema(
        required = false,
        max_length = 64,
        pattern = r"^[^\x00-\x1F\x7F]*[^\s\x00-\x1F\x7F][^\x00-\x1F\x7F]*$"
    )]
    pub name: String,
    /// The stored kind, if sent.
    #[schema(value_type = AlertChannelKind, required = false)]
    pub kind: String,
    #[schema(required = false)]
    pub enabled: bool,
    #[schema(required = false)]
    pub is_default: bool,
    #[schema(required = false, max_length = 2000, pattern = r"^https?://\S+$")]
    pub url: String,
    #[schema(required = false, nullable, max_length = 512)]
    pub secret: Option<String>,
}

fn name_taken(name: &str) -> ApiError {
    ApiError::new(ErrorKind::NameTaken(Text::new(
        format!("告警渠道名称「{name}」已被使用：请换一个名称"),
        format!("The alert channel name “{name}” is already taken: choose another name"),
    )))
}

/// A channel as the audit log keeps it: the shown form, never the secret.
fn audit_json(c: &ChannelRecord) -> Option<Value> {
    serde_json::to_value(AlertChannelDto::from(c.clone())).ok()
}

/// Lists every alert channel, by id.
#[utoipa::path(
    tag = "alert-channels",
    summary = "List alert channels (super admins)",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every alert channel, by id; URLs and secrets are never shown", body = Vec<AlertChannelDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/alert-channels")]
pub async fn list_alert_channels(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let items = state.store.alert_channels().list().await?;
    let items: Vec<AlertChannelDto> = items.into_iter().map(AlertChannelDto::from).collect();
    Ok(HttpResponse::Ok().json(items))
}

/// Creates an alert channel.
#[utoipa::path(
    tag = "alert-channels",
    summary = "Create an alert channel (super admins)",
    description = "Audited as `alertchannel.create` (without the URL's path and query or the secret).",
    security(("bearer" = [])),
    request_body(
        content = AlertChannelCreate,
        example = json!({"name": "值班群（钉钉）", "kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=0123abcd", "secret": "SEC0123456789abcdef", "isDefault": true})
    ),
    responses(
        (status = 201, description = "The channel, created; `Location` names it", body = AlertChannelDto),
        (status = 400, description = "A field is invalid: `errors` names each", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken", body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/alert-channels")]
pub async fn create_alert_channel(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let body = body_object(body.into_inner())?;
    let spec =
        alert::validate_channel(&body, None).map_err(|e| ApiError::validation(field_errors(&e)))?;
    let created = state
        .store
        .alert_channels()
        .create(&spec, &who.actor(), Utc::now())
        .await
        .map_err(|e| match e {
            StorageError::NameTaken => name_taken(&spec.name),
            other => ApiError::from(other),
        })?;
    audit::record(
        &state,
        &who,
        Action::AlertChannelCreate,
        Target::AlertChannel,
        Some(created.id.to_string()),
        format!(
            "创建告警渠道「{}」（{}）",
            created.name,
            created.kind.as_str()
        ),
        None,
        audit_json(&created),
    )
    .await;
    tracing::info!(channel = created.id, actor = %who.sub, "alert channel created");
    Ok(HttpResponse::Created()
        .insert_header((
            header::LOCATION,
            format!("/api/alert-channels/{}", created.id),
        ))
        .json(AlertChannelDto::from(created)))
}

/// One alert channel.
#[utoipa::path(
    tag = "alert-channels",
    summary = "Alert channel detail (super admins)",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Alert channel id")),
    responses(
        (status = 200, description = "The channel; its URL and secret are never shown", body = AlertChannelDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/alert-channels/{id}")]
pub async fn get_alert_channel(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let channel = state
        .store
        .alert_channels()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::ALERT_CHANNEL, id))?;
    Ok(HttpResponse::Ok().json(AlertChannelDto::from(channel)))
}

/// Changes an alert channel.
#[utoipa::path(
    tag = "alert-channels",
    summary = "Update an alert channel (super admins)",
    description = "Absent fields keep their value, `url` and `secret` included; `secret: null` removes the secret; `kind` cannot change. Audited as `alertchannel.modify`.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Alert channel id")),
    request_body(
        content = AlertChannelUpdate,
        example = json!({"version": 1, "name": "值班群（钉钉）", "enabled": false})
    ),
    responses(
        (status = 200, description = "The channel as saved, with its new version", body = AlertChannelDto),
        (status = 400, description = "A field is invalid: `errors` names each", body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken, or a stale version", body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/alert-channels/{id}")]
pub async fn update_alert_channel(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
    body: web::Json<Value>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let body = body_object(body.into_inner())?;
    let current = state
        .store
        .alert_channels()
        .get(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::ALERT_CHANNEL, id))?;
    // Absent fields keep their value: the body goes over the stored ones.
    let mut input = Map::new();
    input.insert("name".into(), json!(current.name));
    input.insert("enabled".into(), json!(current.enabled));
    input.insert("isDefault".into(), json!(current.is_default));
    input.extend(body.clone());
    // Every bad field in one answer: the version's problem with the rest.
    let version = version_of(&body);
    let spec = alert::validate_channel(&input, Some((current.kind, current.url.is_some())));
    let (version, spec) = match (version, spec) {
        (Ok(version), Ok(spec)) => (version, spec),
        (version, spec) => {
            let mut errors: Vec<ProblemFieldText> = version.err().into_iter().collect();
            errors.extend(field_errors(&spec.err().unwrap_or_default()));
            return Err(ApiError::validation(errors));
        }
    };
    let (before, after) = state
        .store
        .alert_channels()
        .update(id, version, &spec, &who.actor(), Utc::now())
        .await
        .map_err(|e| match e {
            StorageError::NotFound => ApiError::missing(Noun::ALERT_CHANNEL, id),
            StorageError::NameTaken => name_taken(&spec.name),
            other => ApiError::from(other),
        })?;
    audit::record(
        &state,
        &who,
        Action::AlertChannelModify,
        Target::AlertChannel,
        Some(id.to_string()),
        format!("修改告警渠道「{}」", after.name),
        audit_json(&before),
        audit_json(&after),
    )
    .await;
    tracing::info!(channel = id, version = after.version, actor = %who.sub, "alert channel updated");
    Ok(HttpResponse::Ok().json(AlertChannelDto::from(after)))
}

/// Deletes an alert channel no job names.
#[utoipa::path(
    tag = "alert-channels",
    summary = "Delete an alert channel (super admins)",
    description = "A channel that jobs name in `alertChannels` is kept (409, naming them). Alerts already queued for it are given up. Audited as `alertchannel.delete`.",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Alert channel id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Jobs name the channel", body = Problem, content_type = "application/problem+json"),
    )
)]
#[delete("/api/alert-channels/{id}")]
pub async fn delete_alert_channel(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let repo = state.store.alert_channels();
    let users = repo.jobs_naming(id).await?;
    if !users.is_empty() {
        let list = users
            .iter()
            .take(10)
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::new(ErrorKind::Conflict(Text::new(
            format!(
                "还有 {} 个任务使用这个告警渠道（任务 ID：{list}）：请先从这些任务的 alertChannels 中移除",
                users.len()
            ),
            format!(
                "{} job(s) use this alert channel (job ids: {list}): remove it from their alertChannels first",
                users.len()
            ),
        ))));
    }
    let deleted = repo
        .delete(id)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::ALERT_CHANNEL, id))?;
    audit::record(
        &state,
        &who,
        Action::AlertChannelDelete,
        Target::AlertChannel,
        Some(id.to_string()),
        format!("删除告警渠道「{}」", deleted.name),
        audit_json(&deleted),
        None,
    )
    .await;
    tracing::info!(channel = id, actor = %who.sub, "alert channel deleted");
    Ok(HttpResponse::NoContent().finish())
}

#[cfg(test)]
mod tests {
    use qiwu_domain::alert::ChannelKind;

    use super::*;

    #[test]
    fn dto_never_shows_url_or_secret() {
        let now = Utc::now();
        let c = ChannelRecord {
            id: 1,
            name: "群".into(),
            kind: ChannelKind::Feishu,
            url: Some("https://open.feishu.cn/open-apis/bot/v2/hook/tok-123".into()),
            secret: Some("sec-456".into()),
            enabled: true,
            is_default: true,
            version: 1,
            created_at: now,
            created_by: "a".into(),
            updated_at: now,
            updated_by: "a".into(),
        };
        let text = serde_json::to_string(&AlertChannelDto::from(c.clone())).unwrap();
        assert!(
            !text.contains("tok-123") && !text.contains("sec-456"),
            "{text}"
        );
        assert!(
            text.contains("\"target\":\"https://open.feishu.cn\""),
            "{text}"
        );
        assert!(text.contains("\"hasSecret\":true"), "{text}");
        assert!(!format!("{c:?}").contains("tok-123"));
        assert!(!format!("{c:?}").contains("sec-456"));
    }
}
