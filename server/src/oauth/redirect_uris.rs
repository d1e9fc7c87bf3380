//! Which redirect URIs a client may register: `https://` anywhere, or `http://`
//! on a loopback host (`localhost`, `127.0.0.1`, `[::1]`, any port and path)
//! for a native client's local listener (RFC 8252 §7.3). Nothing else: no
//! plain-http hosts, no custom schemes, no fragments.

use url::{Host, Url};

/// Longest redirect URI accepted.
pub const MAX_LEN: usize = 2000;

/// Checks one redirect URI; the error says which and why, for the client's developer.
pub fn check(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_LEN {
        return Err(format!(
            "redirect URI {:?}... is longer than {MAX_LEN} characters",
            uri.chars().take(60).collect::<String>()
        ));
    }
    let url = Url::parse(uri).map_err(|e| format!("redirect URI {uri:?} is not a URL: {e}"))?;
    if url.fragment().is_some() {
        return Err(format!(
            "redirect URI {uri:?} has a fragment (#...), which OAuth forbids"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "redirect URI {uri:?} carries user credentials, which are not allowed"
        ));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" => match url.host() {
            Some(Host::Domain("localhost")) => Ok(()),
            Some(Host::Ipv4(ip)) if ip == std::net::Ipv4Addr::LOCALHOST => Ok(()),
            Some(Host::Ipv6(ip)) if ip == std::net::Ipv6Addr::LOCALHOST => Ok(()),
            _ => Err(format!(
                "redirect URI {uri:?} is plain http:// to a host that is not this machine: \
                 http:// is only accepted for localhost, 127.0.0.1 or [::1] (a local \
                 listener); use https:// for anything else"
            )),
        },
        scheme => Err(format!(
            "redirect URI {uri:?} uses the scheme {scheme:?}: only https:// URIs, or http:// \
             to localhost, 127.0.0.1 or [::1], are accepted"
        )),
    }
}

/// Checks a client's list: at least one URI, at most ten, each acceptable.
pub fn check_all(uris: &[String]) -> Result<(), String> {
    if uris.is_empty() {
        return Err("redirect_uris is empty: register at least one redirect URI".to_owned());
    }
    if uris.len() > 10 {
        return Err("redirect_uris lists more than 10 URIs".to_owned());
    }
    uris.iter().try_for_each(|u| check(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_http_and_https_pass() {
        for ok in [
            "http://localhost:3000/callback",
            "http://127.0.0.1:49152/oauth/cb?x=1",
            "http://[::1]:8080/",
            "http://localhost/callback",
            "https://app.example.com/oauth/callback",
            "https://127.0.0.1:8443/cb",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        for (bad, why) in [
            ("http://evil.example/cb", "only accepted for localhost"),
            ("http://127.0.0.2/cb", "only accepted for localhost"),
            (
                "http://localhost.evil.example/cb",
                "only accepted for localhost",
            ),
            ("myapp://callback", "uses the scheme \"myapp\""),
            ("javascript:alert(1)", "uses the scheme"),
            ("https://app.example.com/cb#frag", "fragment"),
            ("https://user:pw@app.example.com/cb", "credentials"),
            ("/relative/cb", "not a URL"),
        ] {
            let err = check(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: the error names the URI: {err}");
        }
        assert!(check_all(&[]).is_err());
        assert!(check_all(&["http://localhost/cb".into(), "http://x.example/cb".into()]).is_err());
    }
}
