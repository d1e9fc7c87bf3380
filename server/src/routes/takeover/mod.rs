//! Takeover: `POST /v1/boxes/{id}/takeover` answers a one-time, expiring
//! link to a web terminal in the box; the link's page and its WebSocket are
//! open routes (the token in the path is the credential, never the box key):
//!
//! * `GET /takeover/{token}`: the terminal page (404 for an unknown link,
//!   410 for a used or expired one). A GET does not spend the link: chat
//!   apps fetch links ahead of the person.
//! * `GET /takeover/{token}/ws`: spends the link and bridges the WebSocket
//!   to boxd's `pty` service ([`terminal`]).
//! * `GET /takeover/assets/{file}`: xterm.js, its fit addon and the page's
//!   own script and style, bundled at build time ([`assets`]).
//!
//! The box's owner sees and ends the terminals open in a box:
//! `GET /v1/boxes/{id}/terminals`, `DELETE /v1/boxes/{id}/terminals` (all of
//! them) and `DELETE /v1/boxes/{id}/terminals/{terminal}`.
//!
//! Every answer under `/takeover/` carries [`page_headers`]: a strict
//! Content-Security-Policy (no inline script), no referrer (the token is in
//! the path), no sniffing; the page is not cached.

mod assets;
mod terminal;

use crate::auth::Auth;
use crate::error::ApiError;
use crate::ids::IdPath;
use crate::server_info::ServerInfo;
use crate::views::paths::BoxPath;
use crate::views::takeover::{TakeoverView, TerminalList};
use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, delete, get, post, web};
use psbx_actors::boxes::{Boxes, TakeoverError};
use psbx_actors::ids::{BoxId, TerminalId};
use psbx_actors::store::LinkState;

pub use terminal::terminal;

/// The Content-Security-Policy of the page and its assets.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                       img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// What to do with a link that does not work.
const ASK_AGAIN: &str = "ask the agent for a new takeover link (each link opens one terminal, \
                         within minutes of being made)";

#[utoipa::path(
    tag = "boxes",
    operation_id = "takeoverBox",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 201, description = "A one-time link to a web terminal in the box, valid until `expiresAt` \
            (`takeover.link_ttl`, default 15 minutes); it does not rely on the box key. Opening the terminal \
            spends it and wakes a frozen box; an open terminal keeps the box awake", body = TakeoverView),
        crate::error::BoxCallErrors,
    )
)]
#[post("/boxes/{id}/takeover")]
pub async fn create(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    info: web::Data<ServerInfo>,
    id: IdPath<BoxId>,
) -> Result<HttpResponse, ApiError> {
    let link = boxes.takeover_link(&who.account_id, &id).await?;
    Ok(HttpResponse::Created().json(TakeoverView::new(link, &info)))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "listTerminals",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The takeover terminals open in the box", body = TerminalList),
        crate::error::BoxCallErrors,
    )
)]
#[get("/boxes/{id}/terminals")]
pub async fn list_terminals(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
) -> Result<HttpResponse, ApiError> {
    let open = boxes.terminals(&who.account_id, &id).await?;
    Ok(HttpResponse::Ok().json(TerminalList::of(open)))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "closeTerminals",
    params(BoxPath),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The terminals closed (none when none was open): their pages \
            lose the shell at once", body = TerminalList),
        crate::error::BoxCallErrors,
    )
)]
#[delete("/boxes/{id}/terminals")]
pub async fn close_terminals(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    id: IdPath<BoxId>,
) -> Result<HttpResponse, ApiError> {
    let closed = boxes.close_terminals(&who.account_id, &id, None).await?;
    Ok(HttpResponse::Ok().json(TerminalList::of(closed)))
}

#[utoipa::path(
    tag = "boxes",
    operation_id = "closeTerminal",
    params(
        BoxPath,
        ("terminal" = String, Path, pattern = "^term_[A-Za-z0-9]{1,64}$", description = "`term_...`, as `GET /v1/boxes/{id}/terminals` lists it"),
    ),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The terminal closed", body = TerminalList),
        (status = 400, description = "Not a terminal id (`invalid_terminal_id`)", body = crate::error::ErrorBody),
        crate::error::BoxCallErrors,
    )
)]
#[delete("/boxes/{id}/terminals/{terminal}")]
pub async fn close_terminal(
    Auth(who): Auth,
    boxes: web::Data<Boxes>,
    path: IdPath<(BoxId, TerminalId)>,
) -> Result<HttpResponse, ApiError> {
    let (id, terminal) = path.into_inner();
    let closed = boxes
        .close_terminals(&who.account_id, &id, Some(&terminal))
        .await?;
    if closed.is_empty() {
        return Err(ApiError::not_found(
            "terminal_not_found",
            format!("no terminal {terminal} is open in box {id}"),
        )
        .hint("it closed already, or it is not this box's: GET /v1/boxes/{id}/terminals lists the open ones"));
    }
    Ok(HttpResponse::Ok().json(TerminalList::of(closed)))
}

/// The open routes: the page, its WebSocket and its assets.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/takeover/assets/{file}", web::get().to(assets::asset))
        .route("/takeover/{token}/ws", web::get().to(terminal))
        .route("/takeover/{token}", web::get().to(page));
}

/// The headers every answer under `/takeover/` has.
pub fn page_headers(response: &mut HttpResponseBuilder) -> &mut HttpResponseBuilder {
    response
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
}

/// An HTML page: a title and a paragraph (already escaped where needed).
fn html(status: StatusCode, title: &str, body: &str) -> HttpResponse {
    page_headers(&mut HttpResponse::build(status))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .content_type("text/html; charset=utf-8")
        .body(format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{title}</title>\
             <link rel=\"stylesheet\" href=\"/takeover/assets/xterm.css\">\
             <link rel=\"stylesheet\" href=\"/takeover/assets/takeover.css\"></head>\n\
             <body>{body}</body></html>\n"
        ))
}

/// The page of a link that does not open a terminal.
fn unusable(status: StatusCode, why: &str) -> HttpResponse {
    html(
        status,
        "psbx takeover",
        &format!("<main class=\"notice\"><h1>{why}</h1><p>{ASK_AGAIN}.</p></main>"),
    )
}

/// Failed takeover-link lookups from one address are limited with its
/// invalid bearer tokens (`oauth::throttle`): each costs a database query.
/// `Err` when the address is past the limit (nothing is looked up); else the
/// limiter and the address, to record a link that did not work.
pub(crate) fn lookup_allowed(
    req: &HttpRequest,
) -> Result<Option<(web::Data<crate::oauth::OAuth>, String)>, ApiError> {
    let Some(oauth) = req.app_data::<web::Data<crate::oauth::OAuth>>().cloned() else {
        return Ok(None);
    };
    let address = crate::oauth::throttle::address(req);
    oauth
        .throttles
        .tokens_by_address
        .check(&address)
        .map_err(|exceeded| ApiError::too_many_attempts(&exceeded))?;
    Ok(Some((oauth, address)))
}

/// Counts a takeover link that did not work against its address.
pub(crate) fn lookup_failed(limiter: Option<(web::Data<crate::oauth::OAuth>, String)>) {
    if let Some((oauth, address)) = limiter {
        oauth.throttles.tokens_by_address.record(&address);
    }
}

/// `GET /takeover/{token}`: the terminal page, without spending the link.
async fn page(req: HttpRequest, boxes: web::Data<Boxes>, token: web::Path<String>) -> HttpResponse {
    let limiter = match lookup_allowed(&req) {
        Ok(limiter) => limiter,
        Err(refused) => {
            return unusable(
                refused.status(),
                "Too many takeover links that did not work from this address: wait a minute",
            );
        }
    };
    let found = boxes.look_takeover(&token).await;
    if matches!(
        found,
        Ok(LinkState::Unknown | LinkState::Used | LinkState::Expired)
    ) {
        lookup_failed(limiter);
    }
    match found {
        Ok(LinkState::Valid { box_id, .. }) => html(
            StatusCode::OK,
            &format!("{box_id} — psbx takeover"),
            &format!(
                "<div id=\"status\" class=\"status\" role=\"status\" data-state=\"ready\">\
                 <button id=\"open\" type=\"button\">Open terminal</button> \
                 a root shell in box {box_id}; this link opens it once</div>\
                 <div id=\"terminal\" class=\"terminal\" data-box=\"{box_id}\"></div>\
                 <script src=\"/takeover/assets/xterm.js\"></script>\
                 <script src=\"/takeover/assets/addon-fit.js\"></script>\
                 <script src=\"/takeover/assets/takeover.js\"></script>"
            ),
        ),
        Ok(LinkState::Used) => unusable(StatusCode::GONE, "This takeover link was already used"),
        Ok(LinkState::Expired) => unusable(StatusCode::GONE, "This takeover link has expired"),
        Ok(LinkState::Unknown) => unusable(StatusCode::NOT_FOUND, "No such takeover link"),
        Err(e) => {
            let api = ApiError::from(e);
            unusable(api.status(), "The terminal cannot be opened right now")
        }
    }
}

impl From<TakeoverError> for ApiError {
    fn from(e: TakeoverError) -> Self {
        match e {
            TakeoverError::Used => {
                Self::new(StatusCode::GONE, "takeover_used", e.to_string()).hint(ASK_AGAIN)
            }
            TakeoverError::Expired => {
                Self::new(StatusCode::GONE, "takeover_expired", e.to_string()).hint(ASK_AGAIN)
            }
            TakeoverError::Unknown => {
                Self::not_found("takeover_not_found", e.to_string()).hint(ASK_AGAIN)
            }
            TakeoverError::NoTerminal(_) => {
                Self::new(StatusCode::CONFLICT, "no_terminal", e.to_string()).hint(
                    "the box's image has a boxd without terminals: start a box from a newer image",
                )
            }
            TakeoverError::Box(inner) => inner.into(),
        }
    }
}
