//! The app's own script and style (`server/web/app.js`, `app.css`),
//! compiled into the binary and served at `/app/assets/{file}`: nothing is
//! fetched from a CDN, and the pages have no inline script or style (the
//! CSP allows only `'self'`). Cached briefly (the URLs carry no version).

use actix_web::http::header;
use actix_web::{HttpResponse, web};

const APP_JS: &str = include_str!("../../web/app.js");
const APP_CSS: &str = include_str!("../../web/app.css");

/// A file by name, and its type.
fn file(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        _ => return None,
    })
}

/// `GET /app/assets/{file}`.
pub async fn asset(name: web::Path<String>) -> HttpResponse {
    match file(&name) {
        Some((body, kind)) => HttpResponse::Ok()
            .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
            .content_type(kind)
            .body(body),
        None => HttpResponse::NotFound()
            .content_type("text/plain; charset=utf-8")
            .body("no such app asset\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_there_and_nothing_else() {
        for name in ["app.js", "app.css"] {
            let (body, _) = file(name).unwrap();
            assert!(body.len() > 100, "{name} is {} bytes", body.len());
        }
        assert!(file("../Cargo.toml").is_none());
    }
}
