//! Where a browser may be sent back to once it is signed in: only psbx's
//! own pages, never an open redirect. A sign-in link (`psbx login-link`)
//! returns to the authorize page or the app page the sign-in started from
//! ([`after_link`]); the app's sign-in page to an app page ([`is_app_path`],
//! [`sign_in_url`]). The OAuth pages and the app keep one policy here.

/// Whether `path` may be returned to after a sign-in link: the authorize
/// page (with its query) or an app page.
pub fn after_link(path: &str) -> bool {
    path.starts_with("/oauth/authorize?") || is_app_path(path)
}

/// Whether `path` is a page of the app: `/app`, `/app/...` or `/app?...`,
/// without a scheme, host or backslash (the only places a sign-in sends a
/// browser back to, besides the authorize page: never an open redirect).
pub fn is_app_path(path: &str) -> bool {
    let rest = match path.strip_prefix("/app") {
        Some(rest) => rest,
        None => return false,
    };
    (rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
        && !path.contains("//")
        && !path.contains('\\')
        && !path.contains("/../")
        && path.chars().all(|c| c.is_ascii_graphic())
}

/// The sign-in page's URL, coming back to `next`.
pub fn sign_in_url(next: &str) -> String {
    if next == "/app" || !is_app_path(next) {
        "/app/sign-in".to_owned()
    } else {
        let encoded: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
        format!("/app/sign-in?next={encoded}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_app_paths_are_places_to_return_to() {
        for good in ["/app", "/app/", "/app/reviews/rev_1", "/app?x=1"] {
            assert!(is_app_path(good), "{good}");
        }
        for bad in [
            "/apple",
            "//evil.example/app",
            "/app//evil.example",
            "/app/\\evil",
            "https://evil.example/app",
            "/oauth/authorize?x",
            "/app/../v1/boxes",
            "/app/a b",
            "",
        ] {
            assert!(!is_app_path(bad), "{bad}");
        }
    }

    #[test]
    fn the_sign_in_page_comes_back_to_app_pages_only() {
        assert_eq!(sign_in_url("/app"), "/app/sign-in");
        assert_eq!(
            sign_in_url("/app/reviews/rev_1"),
            "/app/sign-in?next=%2Fapp%2Freviews%2Frev_1"
        );
        assert_eq!(sign_in_url("//evil"), "/app/sign-in");
        assert!(after_link("/oauth/authorize?client_id=x"));
        assert!(!after_link("/oauth/token"));
    }
}
