//! The HTML of the sign-in pages: small, self-contained (no scripts, no
//! external assets), every interpolated value escaped, served with headers
//! that forbid framing and caching.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;background:#f4f5f7;color:#1d2330;margin:0}\
main{max-width:26rem;margin:4rem auto;background:#fff;border-radius:10px;padding:2rem;\
box-shadow:0 2px 12px rgba(0,0,0,.08)}h1{font-size:1.3rem;margin-top:0}\
label{display:block;margin:.8rem 0 .2rem;font-weight:600}\
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;\
border:1px solid #b8bfcc;border-radius:6px;font-size:1rem}\
.buttons{display:flex;gap:.6rem;margin-top:1.4rem}button{flex:1;padding:.6rem;font-size:1rem;\
border-radius:6px;border:1px solid #1d4ed8;cursor:pointer}\
button.approve{background:#1d4ed8;color:#fff}button.deny{background:#fff;color:#1d4ed8}\
.error{background:#fde8e8;color:#8a1c1c;padding:.6rem;border-radius:6px}\
.muted{color:#5b6475;font-size:.9rem}code{background:#eef0f4;padding:0 .2rem;border-radius:3px}";

/// A whole page around `body` (already HTML).
pub fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · psbx</title><style>{STYLE}</style></head>\
         <body><main>{body}</main></body></html>\n",
        escape(title)
    )
}

/// An HTML answer that is never cached or framed. `Referrer-Policy:
/// same-origin`: the client's redirect URI (another origin) gets no referrer,
/// so the page's query (state, challenge) never leaves psbx, while the form
/// posts back to psbx carry a real `Origin` (under `no-referrer`, browsers
/// send `Origin: null`, which [`crate::signin::origin::check`] can only judge by
/// `Sec-Fetch-Site`).
pub fn respond(status: StatusCode, html: String) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        ))
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .insert_header((header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
            ),
        ))
        .insert_header((
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
        .body(html)
}

/// A page that explains a problem; nothing is sent to the client.
pub fn problem(status: StatusCode, title: &str, message: &str) -> HttpResponse {
    respond(
        status,
        layout(
            title,
            &format!(
                "<h1>{}</h1><p class=\"error\">{}</p>\
                 <p class=\"muted\">Nothing was sent to the application. Start the sign-in \
                 again from your MCP client.</p>",
                escape(title),
                escape(message)
            ),
        ),
    )
}

/// What the sign-in and approval form shows.
pub struct SignIn<'a> {
    /// The name the client gave itself (at registration or in its metadata
    /// document): shown as its own claim, never as a verified name.
    pub client_name: Option<&'a str>,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// The request's parameters, carried through the form as hidden fields.
    pub hidden: &'a [(&'a str, &'a str)],
    pub csrf: &'a str,
    /// The account this browser is signed in to, if any.
    pub signed_in_as: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// The form: approve (after signing in, unless already signed in) or deny.
pub fn sign_in(form: &SignIn<'_>) -> String {
    let who = match form.client_name {
        Some(name) => format!(
            "An application that calls itself <strong>{}</strong> \
             <span class=\"muted\">(a name it chose; psbx has not checked it)</span>",
            escape(name)
        ),
        None => "An application that gave no name".to_owned(),
    };
    let mut body = format!(
        "<h1>Sign in to psbx</h1><p>{who} wants to use your psbx sandboxes \
         (start boxes and run commands in them) through MCP.</p>\
         <p class=\"muted\">Client <code>{}</code><br>Returns to <code>{}</code></p>",
        escape(form.client_id),
        escape(form.redirect_uri),
    );
    if let Some(error) = form.error {
        body.push_str(&format!("<p class=\"error\">{}</p>", escape(error)));
    }
    body.push_str("<form method=\"post\" action=\"/oauth/authorize\">");
    for (name, value) in form.hidden {
        body.push_str(&format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(value)
        ));
    }
    body.push_str(&format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(form.csrf)
    ));
    match form.signed_in_as {
        Some(account) => body.push_str(&format!(
            "<p>Signed in as <strong>{}</strong>.</p>",
            escape(account)
        )),
        None => body.push_str(
            "<label for=\"account\">Account</label>\
             <input type=\"text\" id=\"account\" name=\"account\" autocomplete=\"username\" required>\
             <label for=\"password\">Password</label>\
             <input type=\"password\" id=\"password\" name=\"password\" \
             autocomplete=\"current-password\" required>",
        ),
    }
    body.push_str(
        "<div class=\"buttons\"><button class=\"approve\" name=\"decision\" value=\"approve\">\
         Approve</button><button class=\"deny\" name=\"decision\" value=\"deny\" formnovalidate>\
         Deny</button></div></form>",
    );
    if form.signed_in_as.is_none() {
        body.push_str(
            "<p class=\"muted\">No password? On the psbx server run \
             <code>psbx account set-password</code>, or <code>psbx login-link</code> and open \
             the link it prints in this browser: you come back here signed in.</p>",
        );
    }
    layout("Sign in", &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_interpolated_is_escaped() {
        let html = sign_in(&SignIn {
            client_name: Some("<script>alert('x')</script>"),
            client_id: "client_\"><b>",
            redirect_uri: "http://localhost/cb?a=1&b=2",
            hidden: &[("state", "\"><img src=x>")],
            csrf: "tok",
            signed_in_as: Some("<i>me</i>"),
            error: Some("a & b"),
        });
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<i>me"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)"), "{html}");
        assert!(html.contains("a=1&amp;b=2"), "{html}");
        assert!(html.contains("a &amp; b"), "{html}");
        assert!(html.contains("calls itself"), "{html}");
    }
}
