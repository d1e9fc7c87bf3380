//! The cookies of the sign-in pages, all `HttpOnly; SameSite=Lax; Path=/oauth`
//! (and `Secure` behind https): the browser session (`psbx_session`), the
//! anti-CSRF token of the authorize form (`psbx_csrf`), and the authorize page
//! to come back to after a sign-in link (`psbx_return`).

use actix_web::HttpRequest;
use actix_web::http::header::COOKIE;

pub const SESSION: &str = "psbx_session";
pub const CSRF: &str = "psbx_csrf";
pub const RETURN: &str = "psbx_return";

/// The value of the request's cookie `name`.
pub fn get(req: &HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get_all(COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value; `value` must be cookie-safe (letters, digits, `-_`).
pub fn set(name: &str, value: &str, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/oauth; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax{secure}")
}

/// A `Set-Cookie` value that removes the cookie.
pub fn clear(name: &str, secure: bool) -> String {
    set(name, "", 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn reads_one_cookie_among_many() {
        let req = TestRequest::default()
            .insert_header((COOKIE, "a=1; psbx_csrf=abc; b=2"))
            .to_http_request();
        assert_eq!(get(&req, CSRF).as_deref(), Some("abc"));
        assert_eq!(get(&req, SESSION), None);
        assert!(set(SESSION, "x", 60, true).ends_with("; Secure"));
        assert!(set(SESSION, "x", 60, false).contains("HttpOnly; SameSite=Lax"));
    }
}
