//! The middleware every request passes: its request id, its span, its
//! metrics.
//!
//! - The request id is the caller's `X-Request-Id` when it is valid (1–128
//!   characters from `A-Z a-z 0-9 - _ . ~`), else a new one; it is
//!   answered in `X-Request-Id`, carried by the request's span (so every
//!   log line of the request has it), and set as `instance` in 5xx problem
//!   bodies.
//! - The request's language (`Accept-Language`) is kept for the request,
//!   so an error is rendered in it however deep it was built
//!   (`current_lang`).
//! - The span (`http.request`, named `METHOD /route/{template}` in traces)
//!   continues the caller's W3C `traceparent` when tracing is on; probes
//!   and `/metrics` get a span that is logged but never exported.
//! - `qiwu_http_requests_total` and `qiwu_http_request_duration_seconds`
//!   count it by route template, method and status.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use qiwu_domain::Lang;
use tracing::Instrument;
use tracing::field::Empty;

/// The request id header, read and answered.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
const MAX_REQUEST_ID: usize = 128;

tokio::task_local! {
    static REQUEST_ID: String;
    static REQUEST_LANG: Lang;
}

/// The id of the request being handled, inside the middleware.
pub fn current_request_id() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The language the request being handled asked for; outside the
/// middleware, the default (Chinese), as for a request that names none.
pub fn current_lang() -> Lang {
    REQUEST_LANG.try_with(|lang| *lang).unwrap_or_default()
}

/// The caller's id when it is usable: short, and only URI-unreserved
/// characters, so it is safe in logs, headers and as a problem's
/// `instance` (a relative URI reference).
fn valid_request_id(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_REQUEST_ID
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
}

/// A new id: 16 random bytes as hex.
fn new_request_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The method as a bounded label.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// The middleware (`actix_web::middleware::from_fn(observe::middleware)`).
pub async fn middleware(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| valid_request_id(v))
        .map_or_else(new_request_id, str::to_string);
    let method = method_label(req.method());
    let span = if is_probe(req.path()) {
        tracing::info_span!(
            "http.probe",
            request_id = %request_id,
            http.request.method = method,
            url.path = %req.path(),
        )
    } else {
        tracing::info_span!(
            "http.request",
            otel.name = method,
            otel.kind = "server",
            request_id = %request_id,
            http.request.method = method,
            url.path = %req.path(),
            http.route = Empty,
            http.response.status_code = Empty,
            otel.status_code = Empty,
        )
    };
    if qiwu_telemetry::trace::enabled() {
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        if let Some(parent) = header("traceparent") {
            qiwu_telemetry::trace::set_parent(&span, parent, header("tracestate"));
        }
    }
    let lang = crate::error::request_lang(req.request());
    let result = REQUEST_ID
        .scope(
            request_id.clone(),
            REQUEST_LANG.scope(lang, next.call(req).instrument(span.clone())),
        )
        .await;
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(mut res) => {
            let status = res.status().as_u16();
            let route = res
                .request()
                .match_pattern()
                .unwrap_or_else(|| "unmatched".to_string());
            span.record("http.route", route.as_str());
            qiwu_telemetry::trace::rename(&span, format!("{method} {route}"));
            span.record("http.response.status_code", status);
            if status >= 500 {
                span.record("otel.status_code", "ERROR");
            }
            qiwu_telemetry::metrics().http_request(&route, method, status, seconds);
            if let Ok(value) = HeaderValue::from_str(&request_id) {
                res.headers_mut()
                    .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
            }
            Ok(res)
        }
        Err(e) => {
            let status = e.as_response_error().status_code().as_u16();
            qiwu_telemetry::metrics().http_request("unmatched", method, status, seconds);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids() {
        for ok in ["abc", "A-1_b.c~d", &"x".repeat(128)] {
            assert!(valid_request_id(ok), "{ok}");
        }
        for bad in ["", "has space", "a/b", "ünï", "a:b", &"x".repeat(129)] {
            assert!(!valid_request_id(bad), "{bad}");
        }
        let id = new_request_id();
        assert_eq!(id.len(), 32);
        assert!(valid_request_id(&id));
        assert_ne!(id, new_request_id());
    }
}
