//! The HTTP API of Qiwu Scheduler: thin actix handlers over the domain and
//! storage crates, bearer-JWT auth, problem+json errors and the OpenAPI
//! document generated from the handlers themselves.

pub mod audit;
pub mod auth;
pub mod body;
pub mod calendar_dto;
mod docs;
mod document;
pub mod dto;
pub mod error;
pub mod export;
mod jobs_service;
pub mod jwt;
pub mod notify_dto;
pub mod observe;
pub mod ops;
pub mod query;
pub mod routes;
pub mod routing;
pub mod schema;
pub mod state;

use actix_web::web;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};
use utoipa_actix_web::AppExt;
use utoipa_actix_web::service_config::ServiceConfig;
use utoipa_swagger_ui::SwaggerUi;

pub use auth::Permission;
pub use jwt::{Claims, JwtKeys};
pub use state::{AppState, ChangeListener, NoListener};

/// Registers every documented endpoint.
fn endpoints(cfg: &mut ServiceConfig) {
    use routes::*;
    cfg.service(health::healthz)
        .service(health::readyz)
        .service(handlers::list_handlers)
        .service(groups::list_groups)
        .service(groups::create_group)
        .service(groups::delete_group)
        .service(jobs::list_jobs)
        .service(jobs::create_job)
        .service(jobs::batch_delete)
        .service(jobs::batch_enabled)
        // Before `/api/jobs/{id}`, which would take `export` for an id.
        .service(job_export::export_jobs)
        .service(jobs::get_job)
        .service(jobs::update_job)
        .service(jobs::preview_change)
        .service(jobs::set_enabled)
        .service(jobs::delete_job)
        .service(fires::run_once)
        .service(backfill::create_backfill)
        .service(backfill::get_backfill)
        .service(backfill::cancel_backfill)
        .service(cron::preview)
        .service(runs::list_runs)
        // Before `/api/runs/{id}`, which would take `export` for an id.
        .service(runs::export_runs)
        .service(runs::batch_delete_runs)
        .service(runs::clear_runs)
        .service(runs::cancel_run)
        .service(runs::get_run)
        .service(runs::delete_run)
        .service(audit_logs::list_audit_logs);
    // Settings, the inbox and notification templates (super admins).
    cfg.service(settings::list_settings)
        .service(settings::update_setting)
        .service(notifications::list_notifications)
        .service(notifications::read_all_notifications)
        .service(notifications::read_notification)
        .service(templates::list_templates)
        .service(templates::get_template)
        .service(templates::update_template)
        .service(api_keys::list_api_keys)
        .service(api_keys::create_api_key)
        .service(api_keys::revoke_api_key);
    // Alert channels (issue 10).
    cfg.service(alert_channels::list_alert_channels)
        .service(alert_channels::create_alert_channel)
        .service(alert_channels::get_alert_channel)
        .service(alert_channels::update_alert_channel)
        .service(alert_channels::delete_alert_channel);
    // Calendars (issue 11).
    cfg.service(calendars::list_calendars)
        .service(calendars::create_calendar)
        .service(calendars::get_calendar)
        .service(calendars::update_calendar)
        .service(calendars::delete_calendar);
    // Freeze windows (issue 11).
    cfg.service(freezes::list_freezes)
        .service(freezes::create_freeze)
        .service(freezes::get_freeze)
        .service(freezes::update_freeze)
        .service(freezes::delete_freeze);
}

/// The document's fixed parts: title, version, the bearer scheme.
fn base_document() -> OpenApi {
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Qiwu Scheduler")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Scheduled jobs of the Qiwu admin platform. Errors are \
                     application/problem+json in the language of Accept-Language \
                     (zh-CN by default, or en). Every answer carries X-Request-Id: the \
                     caller's when it is 1-128 characters of A-Z a-z 0-9 - _ . ~, else a \
                     new one; a 5xx problem repeats it as instance.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    "bearer",
                    SecurityScheme::Http(
                        HttpBuilder::new()
                            .scheme(HttpAuthScheme::Bearer)
                            .bearer_format("JWT, or an API key qk_…")
                            .build(),
                    ),
                )
                // Sent by the service, not received: no operation names it.
                .schema_from::<routes::fires::RunCallbackBody>()
                .build(),
        ))
        .build()
}

/// The OpenAPI document, as `qiwu-scheduler openapi` prints it.
pub fn openapi() -> OpenApi {
    let (_, mut doc) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(base_document())
        .configure(endpoints)
        .split_for_parts();
    document::complete(&mut doc);
    doc
}

/// The document as pretty JSON with a trailing newline.
pub fn openapi_json() -> String {
    let mut json = openapi().to_pretty_json().unwrap_or_else(|e| {
        // Serialising our own document cannot fail; say so loudly if it does.
        format!("{{\"error\": \"cannot serialise the OpenAPI document: {e}\"}}")
    });
    json.push('\n');
    json
}

/// Configures an actix `App` with the state, every route, `/openapi.json`
/// and the Swagger UI at `/docs`.
pub fn configure(state: AppState, ops: ops::Ops) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg: &mut web::ServiceConfig| {
        let doc = openapi();
        // Ahead of every endpoint: 414 for long targets, 405 for a known
        // path asked with a method it lacks.
        routing::register_guards(cfg, &doc);
        cfg.app_data(web::Data::new(state))
            .app_data(web::Data::new(ops))
            .route("/metrics", web::get().to(ops::metrics))
            .app_data(error::json_config())
            .app_data(error::query_config())
            .app_data(error::path_config());
        let mut utoipa_cfg = ServiceConfig::new(cfg);
        endpoints(&mut utoipa_cfg);
        cfg.service(web::resource("/docs/swagger-initializer.js").get(docs::initializer))
            .service(SwaggerUi::new("/docs/{_:.*}").url("/openapi.json", doc))
            .service(web::redirect("/docs", "/docs/"))
            .default_service(web::to(error::not_found));
    }
}
