//! The super administrators' shared inbox (SPEC §8): list, mark one read,
//! mark all read. Users live in the platform, so every super admin reads
//! the same inbox and its read state.

use actix_web::{HttpResponse, get, post, web};
use chrono::Utc;
use qiwu_domain::notify::SUPER_ADMINS;
use qiwu_storage::NotificationCursor;

use crate::auth::{Need, perm};
use crate::error::{ApiError, Noun, Problem};
use crate::notify_dto::{NotificationDto, NotificationPage, NotificationQuery, ReadAllDto};
use crate::query::{self, Id};
use crate::state::AppState;

/// Lists the inbox, newest first, a page at a time.
#[utoipa::path(
    tag = "notifications",
    summary = "List notifications",
    security(("bearer" = [])),
    params(NotificationQuery),
    responses(
        (status = 200, description = "A page of the inbox, newest first, with the unread count", body = NotificationPage),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[get("/api/notifications")]
pub async fn list_notifications(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
    query: web::Query<NotificationQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let unread = query::boolean("unread", q.unread)?.unwrap_or(false);
    let limit = query::limit(q.limit)?;
    let cursor = match query::text(q.cursor).as_deref() {
        None => None,
        Some(c) => Some(NotificationCursor::parse(c).ok_or_else(|| {
            ApiError::field(
                "cursor",
                "cursor 无效：请使用上一页返回的 nextCursor",
                "Invalid cursor: pass the nextCursor of the previous page",
            )
        })?),
    };
    let inbox = state.store.notifications();
    let page = inbox.list(SUPER_ADMINS, unread, limit, cursor).await?;
    let unread_count = inbox.count_unread(SUPER_ADMINS).await?;
    Ok(HttpResponse::Ok().json(NotificationPage {
        items: page.items.into_iter().map(NotificationDto::from).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
        unread_count,
    }))
}

/// Marks one notification read (for every super admin; the inbox is shared).
#[utoipa::path(
    tag = "notifications",
    summary = "Mark a notification read",
    security(("bearer" = [])),
    params(("id" = i64, Path, minimum = 1, maximum = 9007199254740991_i64, description = "Notification id")),
    responses(
        (status = 200, description = "The notification, now read", body = NotificationDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/notifications/{id}/read")]
pub async fn read_notification(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
    id: web::Path<Id>,
) -> Result<HttpResponse, ApiError> {
    let id = id.into_inner().0;
    let read = state
        .store
        .notifications()
        .mark_read(SUPER_ADMINS, id, Utc::now())
        .await?
        .ok_or_else(|| ApiError::missing(Noun::NOTIFICATION, id))?;
    Ok(HttpResponse::Ok().json(NotificationDto::from(read)))
}

/// Marks every unread notification read.
#[utoipa::path(
    tag = "notifications",
    summary = "Mark all notifications read",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "How many notifications were marked read", body = ReadAllDto),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 403, body = Problem, content_type = "application/problem+json"),
    )
)]
#[post("/api/notifications/read-all")]
pub async fn read_all_notifications(
    state: web::Data<AppState>,
    _who: Need<perm::SuperAdmin>,
) -> Result<HttpResponse, ApiError> {
    let count = state
        .store
        .notifications()
        .mark_all_read(SUPER_ADMINS, Utc::now())
        .await?;
    Ok(HttpResponse::Ok().json(ReadAllDto { count }))
}
