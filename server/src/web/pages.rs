//! The web app at `/app`, mounted on the main listener beside the API (not
//! under `/v1`: it signs in with the browser session, never an API key):
//!
//! * `/app` — "Ready for you" (reviews waiting, newest first), the answered
//!   and approved ones, then the account's boxes ([`super::reviews`],
//!   [`super::boxes`]);
//! * `/app/sign-in`, `/app/sign-out` ([`super::session`]);
//! * `/app/reviews/{id}` and its POSTs, `/app/shots/{id}` ([`super::reviews`]);
//! * `/app/settings`, `/app/settings/secrets` ([`super::secrets`]);
//! * `/app/assets/{file}` ([`super::assets`]).
//!
//! [`headers`] wraps the scope: every answer carries the app's
//! Content-Security-Policy (frames only from psbx and box URLs), `nosniff`,
//! `Referrer-Policy: same-origin`, no framing, and `Cache-Control: no-store`
//! unless the handler chose (assets, shot files); and it sets the
//! anti-CSRF cookie a page made ([`super::session::NewCsrf`]).

use super::session::{self, NewCsrf, Signed};
use super::{assets, boxes, layout, reviews, secrets};
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use psbx_actors::boxes::Boxes;

/// The app's Content-Security-Policy: frames from psbx itself and `frames`,
/// the box URLs' source expression (none when this server makes no box URLs).
pub fn csp(frames: Option<&str>) -> String {
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; \
         connect-src 'self'; frame-src 'self'{}; media-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
        frames.map(|f| format!(" {f}")).unwrap_or_default()
    )
}

/// The headers of every `/app` answer (see the module doc).
pub async fn headers(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let frames = req
        .app_data::<web::Data<Boxes>>()
        .and_then(|b| b.urls().map(|u| u.source_pattern()));
    let oauth = req.app_data::<web::Data<crate::oauth::OAuth>>().cloned();
    let mut response = next.call(req).await?;
    let new_csrf = response.request().extensions().get::<NewCsrf>().cloned();
    let set = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&csp(frames.as_deref())) {
        set.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    set.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    set.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    set.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !set.contains_key(header::CACHE_CONTROL) {
        set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if let (Some(NewCsrf(token)), Some(oauth)) = (new_csrf, oauth)
        && let Ok(value) = HeaderValue::from_str(&session::csrf_cookie(&oauth, &token))
    {
        set.append(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `GET /app`: what is ready for the person, then the boxes.
async fn home(
    req: HttpRequest,
    who: Signed,
    boxes: web::Data<Boxes>,
) -> Result<HttpResponse, layout::PageError> {
    let mut body = reviews::section(&req, &who).await?;
    body.push_str(&boxes::section(&boxes, &who).await?);
    Ok(layout::html(
        StatusCode::OK,
        layout::page("psbx", Some(&who), &body),
    ))
}

/// An unknown `/app` path: the app's own 404 page.
async fn not_found() -> HttpResponse {
    layout::problem(
        StatusCode::NOT_FOUND,
        "Not found",
        "there is no such page in the app",
    )
}

/// The app's routes.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/app")
            .wrap(from_fn(headers))
            .app_data(reviews::answer_json_config())
            .route("", web::get().to(home))
            .route("/", web::get().to(home))
            .route("/sign-in", web::get().to(session::show))
            .route("/sign-in", web::post().to(session::sign_in))
            .route("/sign-out", web::post().to(session::sign_out))
            .route("/assets/{file}", web::get().to(assets::asset))
            .route("/boxes/{id}/stop", web::post().to(boxes::stop))
            .route("/reviews/{id}", web::get().to(reviews::show))
            .route("/reviews/{id}/shots", web::post().to(reviews::take_shot))
            .route("/reviews/{id}/answer", web::post().to(reviews::answer))
            .route("/shots/{id}", web::get().to(reviews::shot_file))
            .route("/settings", web::get().to(secrets::settings))
            .service(
                web::resource("/settings/secrets")
                    .app_data(secrets::form_config())
                    .route(web::get().to(secrets::list))
                    .route(web::post().to(secrets::put)),
            )
            .route(
                "/settings/secrets/{name}/delete",
                web::post().to(secrets::delete),
            )
            .default_service(web::to(not_found)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_only_from_psbx_and_box_urls() {
        let policy = csp(Some("https://*.box.example"));
        assert!(
            policy.contains("frame-src 'self' https://*.box.example;"),
            "{policy}"
        );
        assert!(policy.contains("script-src 'self';"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(csp(None).contains("frame-src 'self';"));
    }
}
