//! Where a state-changing form POST (`POST /oauth/authorize`, `POST
//! /oauth/login/{token}`) comes from. Besides the double-submit CSRF token,
//! the browser's own word is checked:
//!
//! * an `Origin` header must be this server's origin (the issuer's, compared
//!   normalised: scheme, host and port, a default port or none being the
//!   same), or the same scheme and port on a loopback name;
//! * `Origin: null` says only that the browser hid the origin: the Fetch
//!   standard ("serializing a request origin") sends `null` on every form POST
//!   of a page whose `Referrer-Policy` is `no-referrer` (a same-origin one
//!   included), and so do sandboxed frames and some privacy settings. Then
//!   `Sec-Fetch-Site`, which the browser sets itself and no page can change,
//!   decides: `same-origin` passes, anything else or nothing is refused;
//! * without `Origin`, a `Sec-Fetch-Site` header must be `same-origin`;
//! * with neither, the request is not from a current browser (every browser
//!   sends `Origin` on a cross-origin POST, and `Sec-Fetch-Site` since 2020–23):
//!   it is let through to the CSRF check. Such a client (a script, a test)
//!   holds its own cookies, so there is no victim whose cookies it could ride.
//!
//! This stops a page on a same-site host (a box URL under the same registrable
//! domain) that tossed a CSRF cookie: its POST carries its own `Origin`.

use actix_web::HttpRequest;
use url::Url;

/// `scheme://host[:port]` with the port left out when it is the scheme's default.
pub fn normalise(origin: &str) -> Option<String> {
    let url = Url::parse(origin).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let serialised = url.origin().ascii_serialization();
    (serialised != "null").then_some(serialised)
}

/// The origins a form of this server may be posted from: the issuer's, and
/// the loopback names with the same scheme and port.
pub fn allowed_origins(issuer: &str) -> Vec<String> {
    let Ok(url) = Url::parse(issuer) else {
        return Vec::new();
    };
    let mut origins: Vec<String> = normalise(issuer).into_iter().collect();
    for loopback in ["127.0.0.1", "localhost", "[::1]"] {
        let mut other = url.clone();
        if other.set_host(Some(loopback)).is_ok()
            && let Some(o) = normalise(other.as_str())
            && !origins.contains(&o)
        {
            origins.push(o);
        }
    }
    origins
}

/// Whether the request may change state here; `Err` says why not (for the
/// log; the person sees a generic page).
pub fn check(req: &HttpRequest, allowed: &[String]) -> Result<(), String> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("(not text)").trim().to_owned())
    };
    let fetch_site = header("sec-fetch-site");
    if let Some(origin) = header("origin") {
        if origin == "null" {
            return match fetch_site.as_deref() {
                Some("same-origin") => Ok(()),
                Some(other) => Err(format!(
                    "Origin is \"null\" and Sec-Fetch-Site is {other:?}, not same-origin"
                )),
                None => Err(
                    "Origin is \"null\" and no Sec-Fetch-Site says where the form came from"
                        .to_owned(),
                ),
            };
        }
        return match normalise(&origin) {
            Some(o) if allowed.contains(&o) => Ok(()),
            _ => Err(format!("Origin {origin:?} is not this server's")),
        };
    }
    match fetch_site.as_deref() {
        None | Some("same-origin") => Ok(()),
        Some(other) => Err(format!("Sec-Fetch-Site is {other:?}, not same-origin")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn with(headers: &[(&'static str, &'static str)]) -> HttpRequest {
        let mut req = TestRequest::post();
        for h in headers {
            req = req.insert_header(*h);
        }
        req.to_http_request()
    }

    #[test]
    fn default_ports_are_the_same_origin() {
        assert_eq!(
            normalise("https://h.example:443").as_deref(),
            Some("https://h.example")
        );
        assert_eq!(
            normalise("https://H.example").as_deref(),
            Some("https://h.example")
        );
        assert_eq!(normalise("http://h:8080").as_deref(), Some("http://h:8080"));
        assert_eq!(normalise("null"), None);
        let allowed = allowed_origins("https://psbx.example.com:443");
        assert_eq!(allowed[0], "https://psbx.example.com");
        assert!(allowed.contains(&"https://localhost".to_owned()));
    }

    #[test]
    fn only_this_origin_or_no_browser_at_all() {
        let allowed = allowed_origins("https://api.example.com");
        assert!(check(&with(&[("origin", "https://api.example.com")]), &allowed).is_ok());
        assert!(
            check(
                &with(&[("origin", "https://api.example.com:443")]),
                &allowed
            )
            .is_ok()
        );
        assert!(check(&with(&[("origin", "https://x.box.example.com")]), &allowed).is_err());
        assert!(check(&with(&[("origin", "null")]), &allowed).is_err());
        assert!(check(&with(&[("origin", "http://api.example.com")]), &allowed).is_err());
        assert!(check(&with(&[("sec-fetch-site", "same-origin")]), &allowed).is_ok());
        assert!(check(&with(&[("sec-fetch-site", "same-site")]), &allowed).is_err());
        assert!(check(&with(&[("sec-fetch-site", "cross-site")]), &allowed).is_err());
        assert!(check(&with(&[]), &allowed).is_ok());
        // Origin decides when both are there.
        let both = with(&[
            ("origin", "https://x.box.example.com"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(check(&both, &allowed).is_err());
    }

    #[test]
    fn a_hidden_origin_is_judged_by_sec_fetch_site() {
        let allowed = allowed_origins("https://api.example.com");
        // What Chromium sends for a same-origin form on a no-referrer page.
        let hidden = with(&[("origin", "null"), ("sec-fetch-site", "same-origin")]);
        assert!(check(&hidden, &allowed).is_ok());
        // A sandboxed frame, or a cross-site page that hides its origin.
        for site in ["cross-site", "same-site", "none"] {
            let refused = with(&[("origin", "null"), ("sec-fetch-site", site)]);
            assert!(check(&refused, &allowed).is_err(), "{site}");
        }
        assert!(check(&with(&[("origin", "null")]), &allowed).is_err());
    }
}
