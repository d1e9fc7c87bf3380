//! The pages box URLs answer when the request does not reach a program in
//! the box: small HTML pages that say what happened and what to do. The 404
//! is one constant page, whatever the reason (no such box, a wrong key, a
//! stopped box, a host that is no box URL): its body and headers are the same
//! byte for byte, the `Date` header aside.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{CACHE_CONTROL, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use psbx_actors::box_urls::Crowded;
use std::net::IpAddr;

const NOT_FOUND: &str = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width\"><title>No box here</title></head>\
<body><h1>No box here</h1><p>There is no box at this address. Its URL may be mistyped or \
incomplete, or the box was stopped: a stopped box's URLs stop working, and a new box has \
new URLs. Ask for the box's current URL.</p></body></html>\n";

/// The 404's headers, made once: a header map's order of iteration (which
/// is the order on the wire) follows its hasher's random seed, so a map made
/// anew per answer would order the same headers differently. A clone keeps
/// the order.
static NOT_FOUND_HEADERS: std::sync::LazyLock<actix_web::http::header::HeaderMap> =
    std::sync::LazyLock::new(|| page(StatusCode::NOT_FOUND, String::new()).headers().clone());

/// The one answer for everything that is not a live box with this key.
pub fn not_found() -> HttpResponse {
    let mut res = HttpResponse::with_body(StatusCode::NOT_FOUND, NOT_FOUND.to_owned());
    *res.headers_mut() = NOT_FOUND_HEADERS.clone();
    res.map_into_boxed_body()
}

/// The client's address is not on the account's allowlist.
pub fn forbidden(client: Option<IpAddr>) -> HttpResponse {
    let who = client.map_or_else(|| "your address".to_owned(), |ip| ip.to_string());
    page(
        StatusCode::FORBIDDEN,
        html(
            "Not from this address",
            &format!(
                "This box opens only to the addresses its account allows, and {} is not \
                 one of them. Connect from an allowed network (a company VPN, say), or ask \
                 the account's owner to add your address.",
                escape(&who)
            ),
        ),
    )
}

/// Nothing listens on the port in the box.
pub fn nothing_listens(box_id: &str, port: u16) -> HttpResponse {
    page(
        StatusCode::BAD_GATEWAY,
        html(
            "Nothing listens here yet",
            &format!(
                "Nothing listens on port {port} in box {}. Start the service in the box \
                 (listening on 0.0.0.0:{port} or 127.0.0.1:{port}) and reload this page.",
                escape(box_id)
            ),
        ),
    )
}

/// The program on the port answered with something that is not HTTP, or
/// closed the connection without an answer.
pub fn bad_answer(box_id: &str, port: u16) -> HttpResponse {
    page(
        StatusCode::BAD_GATEWAY,
        html(
            "No answer from the box",
            &format!(
                "The program on port {port} in box {} closed the connection without an \
                 HTTP answer. Check that it speaks HTTP on that port (its log is in the box).",
                escape(box_id)
            ),
        ),
    )
}

/// The box, or this client, has as many box-URL requests open as allowed:
/// answered at once, before anything is opened in the box.
pub fn crowded(crowded: Crowded) -> HttpResponse {
    let why = match crowded {
        Crowded::Box(n) => format!(
            "This box has {n} requests open through its URLs, as many as it may have. \
             Its owner's own calls are not affected"
        ),
        Crowded::Client(n) => format!(
            "Your address has {n} requests open to this box, as many as one address may \
             have. Close some of its pages or connections"
        ),
    };
    let mut res = page(
        StatusCode::SERVICE_UNAVAILABLE,
        html(
            "Too many open requests",
            &format!("{}. Try again in a few seconds.", escape(&why)),
        ),
    );
    res.headers_mut().insert(
        actix_web::http::header::RETRY_AFTER,
        actix_web::http::header::HeaderValue::from_static("5"),
    );
    // A body the request may carry is not read: the connection ends here.
    res.head_mut()
        .set_connection_type(actix_web::http::ConnectionType::Close);
    res
}

/// The request's body sent nothing for `idle`: the request is cut.
pub fn body_stalled(idle: std::time::Duration) -> HttpResponse {
    let mut res = page(
        StatusCode::REQUEST_TIMEOUT,
        html(
            "The request's body stopped",
            &format!(
                "Nothing of this request's body arrived for {} seconds, so it was cut. \
                 Send the request again.",
                idle.as_secs()
            ),
        ),
    );
    // The rest of the body is not read: the connection ends here.
    res.head_mut()
        .set_connection_type(actix_web::http::ConnectionType::Close);
    res
}

/// The box cannot be reached right now (it is starting, or psbx cannot reach
/// it); `why` says what psbx knows.
pub fn unavailable(why: &str) -> HttpResponse {
    let mut res = page(
        StatusCode::SERVICE_UNAVAILABLE,
        html(
            "The box cannot answer right now",
            &format!(
                "{}. Try again in a few seconds.",
                escape(why.trim_end_matches('.'))
            ),
        ),
    );
    res.headers_mut().insert(
        actix_web::http::header::RETRY_AFTER,
        actix_web::http::header::HeaderValue::from_static("5"),
    );
    res
}

fn page(status: StatusCode, body: String) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((CACHE_CONTROL, "no-store"))
        .insert_header((X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(body)
}

fn html(title: &str, text: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>{text}</p></body></html>\n"
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
