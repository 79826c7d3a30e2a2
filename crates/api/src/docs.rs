//! The Swagger UI's initializer, served instead of the bundled one so the
//! page works offline: `validatorUrl: null` keeps the browser from sending
//! the document's URL to the public validator (a leak, and a broken badge
//! on networks without the internet). Everything else the page loads is
//! served from the binary.

use actix_web::HttpResponse;
use actix_web::http::header;

/// The page's configuration: our document, relative to `/docs/` so the
/// page also works behind a path prefix.
const INITIALIZER: &str = r##"window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: "../openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: "StandaloneLayout"
  });
};
"##;

/// `GET /docs/swagger-initializer.js`.
pub async fn initializer() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((
            header::CONTENT_TYPE,
            "application/javascript; charset=utf-8",
        ))
        .body(INITIALIZER)
}
