//! What the server's public URL (the issuer connector tokens name) may be:
//! plain http only on loopback. Connectors refuse a server whose token names
//! plain http on any other host unless PSBX_ALLOW_INSECURE=1, since their
//! token and every stream would cross the network unencrypted, so the
//! server warns when it starts and whenever it issues such a token.
//!
//! A module of its own, at the bottom of the crate, because two layers apply
//! this one rule: `psbx serve` when it starts (the server) and
//! `Environments` when it issues a token; it used to sit in `connectors/`,
//! which `environments/` then had to reach back into for it.

/// Whether connector tokens issued for `issuer` (the server's public URL)
/// send connectors to plain http on a host that is not loopback, where the
/// token and every stream cross the network unencrypted (connectors refuse
/// such a server unless PSBX_ALLOW_INSECURE=1).
pub fn insecure_issuer(issuer: &str) -> bool {
    let Some(rest) = issuer.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    !(host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()))
}

/// Warns that connectors given tokens naming `issuer` will refuse it (or,
/// with PSBX_ALLOW_INSECURE=1, talk to it in the clear); nothing otherwise.
pub fn warn_if_insecure(issuer: &str, when: &str) {
    if insecure_issuer(issuer) {
        tracing::warn!(public_url = %issuer,
            "{when}: the public URL is plain http on a host that is not loopback; connector tokens name it, and connectors refuse it unless PSBX_ALLOW_INSECURE=1 (their token and streams would cross the network unencrypted): serve https (tls) or set public_url to an https URL");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_issuers_off_loopback_are_insecure() {
        for insecure in [
            "http://psbx.example.com",
            "http://10.0.0.5:8080/psbx",
            "http://[2001:db8::1]:80",
        ] {
            assert!(insecure_issuer(insecure), "{insecure}");
        }
        for fine in [
            "https://psbx.example.com",
            "http://127.0.0.1:8080",
            "http://localhost:8080/",
            "http://[::1]:8080",
        ] {
            assert!(!insecure_issuer(fine), "{fine}");
        }
    }
}
