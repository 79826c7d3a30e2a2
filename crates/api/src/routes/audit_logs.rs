//! The audit log, for super admins.

use actix_web::{HttpResponse, get, web};
use qiwu_storage::{AuditCursor, AuditFilter};

use crate::audit::{Action, Target};
use crate::auth::{Need, perm};
use crate::dto::{AuditDto, AuditPage, AuditQuery};
use crate::error::{ApiError, Problem};
use crate::query;
use crate::state::AppState;

/// Lists audit entries newest first, a page at a time; pass `nextCursor`
/// back as `cursor` for the next page.
#[utoipa::path(
    tag = "audit",
    summary = "List the audit log (super admins)",
    security(("bearer" = [])),
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of the audit log, newest first", body = AuditPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/audit-logs")]
pub async fn list_audit_logs(
    state: web::Data<AppState>,
    who: Need<perm::SuperAdmin>,
    query: web::Query<AuditQuery>,
) -> Result<HttpResponse, ApiError> {
    let lang = who.lang;
    let q = query.into_inner();
    let actions: Vec<&str> = Action::ALL.iter().map(|a| a.code()).collect();
    let targets: Vec<&str> = Target::ALL.iter().map(|t| t.code()).collect();
    let filter = AuditFilter {
        actor: query::text(q.actor),
        action: query::one_of("action", q.action, &actions)?,
        target_type: query::one_of("targetType", q.target_type, &targets)?,
        target_id: query::text(q.target_id),
        from: query::instant("from", q.from)?,
        to: query::instant("to", q.to)?,
    };
    query::range("to", filter.from, filter.to)?;
    let limit = query::limit(q.limit)?;
    let cursor = query::text(q.cursor)
        .map(|c| AuditCursor::decode(&c))
        .transpose()?;
    let (items, next) = state.store.audit().list(&filter, limit, cursor).await?;
    Ok(HttpResponse::Ok().json(AuditPage {
        items: items.into_iter().map(|a| AuditDto::new(a, lang)).collect(),
        next_cursor: next.map(|c| c.encode()),
    }))
}
