//! Whether box URLs are separate sites. Browsers keep cookies and `SameSite`
//! apart per site: a registrable domain, one label under a public suffix.
//! Under a `box_domain` that is not itself a public suffix, every box is the
//! same site, so one tenant's box page can set cookies for another's and
//! post to it with its visitors' `SameSite` cookies (review-2 M6). The
//! forwarder strips `Domain=` from the boxes' `Set-Cookie`, but a page's
//! scripts can still set such cookies: the real fix is a `box_domain` on the
//! Public Suffix List (its private section), which [`warn_if_shared_site`]
//! checks at start-up against the list the `psl` crate compiles in.

/// Logs a warning when boxes under `box_domain` share one site; says
/// whether it did. `*.localhost` is taken as a single-user installation.
pub fn warn_if_shared_site(box_domain: &str) -> bool {
    let domain = box_domain.trim_matches('.').to_ascii_lowercase();
    if domain == "localhost" || domain.ends_with(".localhost") || is_public_suffix(&domain) {
        return false;
    }
    tracing::warn!(
        box_domain = %domain,
        "box_domain is not on the Public Suffix List: all box URLs are one site, so a page \
         in one tenant's box can set cookies for another tenant's box and send it requests \
         with its SameSite cookies. Use a domain of its own listed in the PSL's private \
         section (README \"Box URLs\")"
    );
    true
}

/// Whether `domain` is a public suffix the list names (not one it only
/// guesses, such as an unknown top-level domain).
fn is_public_suffix(domain: &str) -> bool {
    psl::suffix(domain.as_bytes())
        .is_some_and(|s| s.is_known() && s.as_bytes() == domain.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_suffixes_and_shared_sites() {
        assert!(is_public_suffix("github.io"));
        assert!(is_public_suffix("com"));
        assert!(!is_public_suffix("boxes.example"));
        assert!(!is_public_suffix("box.example.com"));
        assert!(!warn_if_shared_site("github.io."));
        assert!(!warn_if_shared_site("box.localhost"));
        assert!(warn_if_shared_site("boxes.example"));
        assert!(warn_if_shared_site("box.example.com"));
    }
}
