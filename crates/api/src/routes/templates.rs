//! Notification templates (super admins only): list, read, edit. Only the
//! templates this service sends exist; an edit is never overwritten by
//! seeding and is audited.

use actix_web::{HttpResponse, get, put, web};
use chrono::Utc;
use qiwu_domain::notify::{self, TemplateTexts as DomainTexts};
use qiwu_storage::TemplateTexts;

use crate::auth::{Need, perm};
use crate::error::{ApiError, Noun, Problem, field_errors};
use crate::notify_dto::{TemplateDto, TemplateWrite};
use crate::state::AppState;

/// Lists the notification templates.
#[utoipa::path(
    tag = "notification-templates",
    summary = "List notification templates",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every notification template", body = Vec<TemplateDto>),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/notification-templates")]
pub async fn list_templates(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let items: Vec<TemplateDto> = state
        .store
        .templates()
        .list()
        .await?
        .into_iter()
        .map(|t| TemplateDto::new(t, lang))
        .collect();
    Ok(HttpResponse::Ok().json(items))
}

/// One notification template.
#[utoipa::path(
    tag = "notification-templates",
    summary = "Notification template detail",
    security(("bearer" = [])),
    params(("code" = crate::schema::TemplateCode, Path, description = "Template code; another is a 404")),
    responses(
        (status = 200, description = "The template", body = TemplateDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/notification-templates/{code}")]
pub async fn get_template(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    code: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let code = code.into_inner();
    let template = state
        .store
        .templates()
        .get(&code)
        .await?
        .ok_or_else(|| ApiError::missing(Noun::TEMPLATE, &code))?;
    Ok(HttpResponse::Ok().json(TemplateDto::new(template, lang)))
}

/// Replaces a template's four texts. Texts may only use the template's own
/// `{placeholder}` names.
#[utoipa::path(
    tag = "notification-templates",
    summary = "Edit a notification template",
    security(("bearer" = [])),
    params(("code" = crate::schema::TemplateCode, Path, description = "Template code; another is a 404")),
    request_body = TemplateWrite,
    responses(
        (status = 200, description = "The template, changed", body = TemplateDto),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[put("/api/notification-templates/{code}")]
pub async fn update_template(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    code: web::Path<String>,
    body: web::Json<serde_json::Value>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let code = code.into_inner();
    // Only templates this service sends can be edited: their placeholders
    // are known, so an edit can be checked.
    let def = notify::find(&code).ok_or_else(|| ApiError::missing(Noun::TEMPLATE, &code))?;
    let body = TemplateWrite::read(body.into_inner())?;
    let texts = DomainTexts {
        title_zh: &body.title_zh,
        body_zh: &body.body_zh,
        title_en: &body.title_en,
        body_en: &body.body_en,
    };
    notify::validate_template(def, &texts)
        .map_err(|errors| ApiError::validation(field_errors(&errors)))?;
    let updated = state
        .store
        .templates()
        .update(
            &code,
            &TemplateTexts {
                title_zh: body.title_zh,
                body_zh: body.body_zh,
                title_en: body.title_en,
                body_en: body.body_en,
            },
            &who.actor(),
            Utc::now(),
        )
        .await
        .map_err(ApiError::about(Noun::TEMPLATE, &code))?;
    tracing::info!(template = %code, actor = %who.sub, "notification template changed");
    Ok(HttpResponse::Ok().json(TemplateDto::new(updated, lang)))
}
