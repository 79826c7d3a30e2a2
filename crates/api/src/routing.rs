//! Answers actix's router would otherwise get wrong: a known path asked
//! with a method it does not have is a 405 naming the ones it has (actix
//! puts method guards on resources and so falls through to 404), and a
//! request target longer than the service reads is a 414. Both are
//! problem+json like every other error.

use actix_web::dev::ResourceDef;
use actix_web::guard::{self, GuardContext};
use actix_web::{HttpRequest, HttpResponse, web};
use utoipa::openapi::OpenApi;

use crate::error::{ApiError, ErrorKind, request_lang};

/// Longest request target (path and query string) the API reads, in bytes.
/// Filters are short; anything longer is a mistake or an attack.
pub const MAX_URI_BYTES: usize = 16 * 1024;

/// Paths served outside the OpenAPI document, with their methods.
const UNDOCUMENTED: [(&str, &[&str]); 3] = [
    ("/metrics", &["GET"]),
    ("/openapi.json", &["GET"]),
    ("/docs/{_:.*}", &["GET"]),
];

/// One path template and the methods it answers.
struct Known {
    template: String,
    methods: Vec<String>,
    /// Dynamic segments: literal paths are tried before templated ones, so
    /// `/api/jobs/export` is not taken for `/api/jobs/{id}`.
    dynamic: usize,
}

/// Every path the API serves, from the OpenAPI document.
fn known_paths(doc: &OpenApi) -> Vec<Known> {
    let mut known: Vec<Known> = doc
        .paths
        .paths
        .iter()
        .map(|(path, item)| {
            let methods = [
                ("GET", item.get.is_some()),
                ("PUT", item.put.is_some()),
                ("POST", item.post.is_some()),
                ("DELETE", item.delete.is_some()),
                ("PATCH", item.patch.is_some()),
            ]
            .into_iter()
            .filter(|(_, present)| *present)
            .map(|(m, _)| m.to_string())
            .collect();
            Known {
                template: path.clone(),
                methods,
                dynamic: path.matches('{').count(),
            }
        })
        .chain(UNDOCUMENTED.iter().map(|(path, methods)| Known {
            template: path.to_string(),
            methods: methods.iter().map(|m| m.to_string()).collect(),
            dynamic: 1,
        }))
        .collect();
    known.sort_by_key(|k| k.dynamic);
    known
}

/// Registers, ahead of every endpoint, the 414 for long targets and one
/// 405 resource per known path that takes only the methods the path lacks.
pub fn register_guards(cfg: &mut web::ServiceConfig, doc: &OpenApi) {
    cfg.service(
        web::resource("/{_:.*}")
            .guard(guard::fn_guard(|ctx: &GuardContext<'_>| {
                target_len(ctx) > MAX_URI_BYTES
            }))
            .to(uri_too_long),
    );
    let known = known_paths(doc);
    for (i, path) in known.iter().enumerate() {
        let methods = path.methods.clone();
        let allow = path.methods.clone();
        // A path a more specific template matches is that template's
        // (`/api/jobs/batch-delete` is not a job id).
        let before: Vec<ResourceDef> = known[..i]
            .iter()
            .map(|k| ResourceDef::new(k.template.as_str()))
            .collect();
        cfg.service(
            web::resource(path.template.as_str())
                .guard(guard::fn_guard(move |ctx: &GuardContext<'_>| {
                    let target = ctx.head().uri.path();
                    !methods.iter().any(|m| m == ctx.head().method.as_str())
                        && !before.iter().any(|def| def.is_match(target))
                }))
                .to(move |req: HttpRequest| {
                    let allow = allow.clone();
                    async move {
                        ApiError::new(ErrorKind::MethodNotAllowed { allow })
                            .render(request_lang(&req))
                    }
                }),
        );
    }
}

fn target_len(ctx: &GuardContext<'_>) -> usize {
    ctx.head()
        .uri
        .path_and_query()
        .map_or(0, |pq| pq.as_str().len())
}

async fn uri_too_long(req: HttpRequest) -> HttpResponse {
    ApiError::new(ErrorKind::UriTooLong {
        limit: MAX_URI_BYTES,
    })
    .render(request_lang(&req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_paths_come_before_templates() {
        let known = known_paths(&crate::openapi());
        let position = |t: &str| {
            known
                .iter()
                .position(|k| k.template == t)
                .unwrap_or_else(|| panic!("{t} is known"))
        };
        assert!(position("/api/jobs/export") < position("/api/jobs/{id}"));
        assert!(position("/api/runs/clear") < position("/api/runs/{id}"));
        let jobs = &known[position("/api/jobs/{id}")];
        assert_eq!(jobs.methods, ["GET", "PUT", "DELETE"]);
    }
}
