//! The takeover page's files, compiled into the binary: xterm.js and its
//! fit addon from npm (installed by `build.rs` into `$OUT_DIR/web`), and the
//! page's own script and style (`server/web/`). Served with the page's
//! security headers and a short cache (the URLs carry no version).

use super::page_headers;
use actix_web::http::header;
use actix_web::{HttpResponse, web};

const XTERM_JS: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/web/node_modules/@xterm/xterm/lib/xterm.js"
));
const XTERM_CSS: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/web/node_modules/@xterm/xterm/css/xterm.css"
));
const FIT_JS: &[u8] = include_bytes!(concat!(
    env!("OUT_DIR"),
    "/web/node_modules/@xterm/addon-fit/lib/addon-fit.js"
));
const TAKEOVER_JS: &str = include_str!("../../../web/takeover.js");
const TAKEOVER_CSS: &str = include_str!("../../../web/takeover.css");

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// A file by name, and its type.
fn file(name: &str) -> Option<(&'static [u8], &'static str)> {
    Some(match name {
        "xterm.js" => (XTERM_JS, JS),
        "xterm.css" => (XTERM_CSS, CSS),
        "addon-fit.js" => (FIT_JS, JS),
        "takeover.js" => (TAKEOVER_JS.as_bytes(), JS),
        "takeover.css" => (TAKEOVER_CSS.as_bytes(), CSS),
        _ => return None,
    })
}

/// `GET /takeover/assets/{file}`.
pub async fn asset(name: web::Path<String>) -> HttpResponse {
    match file(&name) {
        Some((body, kind)) => page_headers(&mut HttpResponse::Ok())
            .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
            .content_type(kind)
            .body(body),
        None => page_headers(&mut HttpResponse::NotFound())
            .content_type("text/plain; charset=utf-8")
            .body("no such takeover asset\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_packages_are_there() {
        for name in [
            "xterm.js",
            "xterm.css",
            "addon-fit.js",
            "takeover.js",
            "takeover.css",
        ] {
            let (body, _) = file(name).unwrap();
            assert!(body.len() > 100, "{name} is {} bytes", body.len());
        }
        assert!(file("../Cargo.toml").is_none());
    }
}
