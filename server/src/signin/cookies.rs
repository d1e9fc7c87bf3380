//! The cookies of the sign-in pages and the web app (`/app`), all `HttpOnly;
//! SameSite=Lax`: the browser session (`psbx_session`, one session for the
//! OAuth pages and the app), the anti-CSRF token of the forms (`psbx_csrf`;
//! the app's forms have their own, `psbx_app_csrf`), and the page to come
//! back to after a sign-in link (`psbx_return`: an authorize page or an app
//! page, [`super::return_path`]).
//!
//! Behind https they are `__Host-` cookies (`__Host-psbx_session`, `Secure`,
//! `Path=/`, no `Domain`): a page on a sibling subdomain (a box URL) cannot
//! set or overwrite them ("cookie tossing"), and a cookie without the prefix is
//! not read. Over plain http (loopback, tests) browsers refuse the prefix, so
//! they keep their plain names, with `Path=/` too (the app under `/app` reads
//! the session the OAuth pages opened).

use actix_web::HttpRequest;
use actix_web::http::header::COOKIE;

pub const SESSION: &str = "psbx_session";
pub const CSRF: &str = "psbx_csrf";
pub const RETURN: &str = "psbx_return";

/// How this server names and sets its cookies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cookies {
    /// The public URL is https: `__Host-` names, `Secure`, `Path=/`.
    pub secure: bool,
}

impl Cookies {
    /// The cookie's name on the wire: `__Host-psbx_csrf` behind https.
    pub fn name(&self, base: &str) -> String {
        if self.secure {
            format!("__Host-{base}")
        } else {
            base.to_owned()
        }
    }

    /// The value of the request's cookie `base` (under its wire name).
    pub fn get(&self, req: &HttpRequest, base: &str) -> Option<String> {
        let name = self.name(base);
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
    pub fn set(&self, base: &str, value: &str, max_age_secs: i64) -> String {
        let name = self.name(base);
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{name}={value}; Path=/; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax{secure}")
    }

    /// A `Set-Cookie` value that removes the cookie.
    pub fn clear(&self, base: &str) -> String {
        self.set(base, "", 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    const PLAIN: Cookies = Cookies { secure: false };
    const HTTPS: Cookies = Cookies { secure: true };

    #[test]
    fn reads_one_cookie_among_many() {
        let req = TestRequest::default()
            .insert_header((COOKIE, "a=1; psbx_csrf=abc; b=2"))
            .to_http_request();
        assert_eq!(PLAIN.get(&req, CSRF).as_deref(), Some("abc"));
        assert_eq!(PLAIN.get(&req, SESSION), None);
        assert_eq!(
            PLAIN.set(SESSION, "x", 60),
            "psbx_session=x; Path=/; Max-Age=60; HttpOnly; SameSite=Lax"
        );
    }

    #[test]
    fn https_cookies_are_host_prefixed_secure_and_for_the_whole_origin() {
        for base in [SESSION, CSRF, RETURN] {
            let set = HTTPS.set(base, "x", 60);
            assert!(
                set.starts_with(&format!("__Host-{base}=x; Path=/;")),
                "{set}"
            );
            assert!(set.ends_with("; Secure"), "{set}");
            assert!(!set.contains("Domain"), "{set}");
            assert!(HTTPS.clear(base).contains("Max-Age=0"));
        }
        // A tossed cookie without the prefix (set from a sibling subdomain) is not read.
        let req = TestRequest::default()
            .insert_header((COOKIE, "psbx_csrf=tossed; __Host-psbx_session=s"))
            .to_http_request();
        assert_eq!(HTTPS.get(&req, CSRF), None);
        assert_eq!(HTTPS.get(&req, SESSION).as_deref(), Some("s"));
    }
}
