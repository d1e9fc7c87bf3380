//! `GET /metrics`: Prometheus text format, for scrapers. It holds no account
//! data, but counts and pool sizes are the operator's business, so it is
//! served only to peers in `metrics.allow` (default loopback: a scraper on the
//! host), and, when `metrics.token` is set, only with `Authorization: Bearer
//! <token>` as well. Anyone else gets 403 `metrics_forbidden`.
//!
//! The peer is the TCP peer: behind a reverse proxy on the same host, every
//! client looks local, so such a setup sets `metrics.token` (or does not
//! forward `/metrics`).

use crate::auth::bearer_token;
use crate::config::MetricsConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use ipnet::IpNet;
use psbx_actors::store::Store;
use sha2::{Digest, Sha256};
use std::net::IpAddr;

/// Who may scrape, from the configuration.
#[derive(Debug, Clone)]
pub struct MetricsAccess {
    allow: Vec<IpNet>,
    /// The SHA-256 of the token, when one is required.
    token: Option<[u8; 32]>,
}

impl MetricsAccess {
    pub fn from_config(config: &MetricsConfig) -> anyhow::Result<Self> {
        let allow = config
            .allow
            .iter()
            .map(|net| {
                net.parse::<IpNet>()
                    .or_else(|_| net.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "metrics.allow: {net:?} is not a network (CIDR such as 10.0.0.0/8): {e}"
                        )
                    })
            })
            .collect::<anyhow::Result<_>>()?;
        let token = match config.token.as_deref().map(str::trim) {
            Some("") => {
                anyhow::bail!("metrics.token is empty: set a long random token, or leave it unset")
            }
            Some(t) => Some(Sha256::digest(t.as_bytes()).into()),
            None => None,
        };
        Ok(Self { allow, token })
    }

    /// Whether a request from `peer` with these headers may scrape.
    pub fn admits(&self, peer: Option<IpAddr>, req: &HttpRequest) -> Result<(), ApiError> {
        let peer = peer.map(|ip| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        });
        if !peer.is_some_and(|ip| self.allow.iter().any(|net| net.contains(&ip))) {
            return Err(forbidden("this address is not allowed to read the metrics"));
        }
        if let Some(want) = &self.token {
            let sent = bearer_token(req.headers()).map(|t| Sha256::digest(t.as_bytes()));
            if sent.is_none_or(|got| got.as_slice() != want) {
                return Err(forbidden(
                    "the metrics need the scrape token (`metrics.token`)",
                ));
            }
        }
        Ok(())
    }
}

fn forbidden(message: &str) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "metrics_forbidden", message).hint(
        "scrape from an address in `metrics.allow` (default loopback), with \
         `Authorization: Bearer <metrics.token>` when a token is configured",
    )
}

pub async fn scrape(
    req: HttpRequest,
    access: web::Data<MetricsAccess>,
    metrics: web::Data<Metrics>,
    store: web::Data<Store>,
) -> Result<HttpResponse, ApiError> {
    access.admits(req.peer_addr().map(|a| a.ip()), &req)?;
    let text = metrics
        .render(store.pool_use())
        .map_err(ApiError::internal)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn loopback_by_default_and_the_token_when_set() {
        let req = TestRequest::default().to_http_request();
        let local = MetricsAccess::from_config(&MetricsConfig::default()).unwrap();
        assert!(
            local
                .admits(Some("127.0.0.1".parse().unwrap()), &req)
                .is_ok()
        );
        assert!(local.admits(Some("::1".parse().unwrap()), &req).is_ok());
        assert!(
            local
                .admits(Some("::ffff:127.0.0.1".parse().unwrap()), &req)
                .is_ok()
        );
        assert!(
            local
                .admits(Some("10.0.2.15".parse().unwrap()), &req)
                .is_err()
        );
        assert!(local.admits(None, &req).is_err());

        let scraper = MetricsAccess::from_config(&MetricsConfig {
            allow: vec!["10.0.0.0/8".into(), "192.0.2.9".into()],
            token: Some("s3cret-scrape".into()),
        })
        .unwrap();
        let peer = Some("10.1.2.3".parse().unwrap());
        assert_eq!(
            scraper.admits(peer, &req).unwrap_err().code(),
            "metrics_forbidden"
        );
        let with_token = TestRequest::default()
            .insert_header(("authorization", "Bearer s3cret-scrape"))
            .to_http_request();
        assert!(scraper.admits(peer, &with_token).is_ok());
        assert!(
            scraper
                .admits(Some("192.0.2.9".parse().unwrap()), &with_token)
                .is_ok()
        );
        assert!(
            scraper
                .admits(Some("127.0.0.1".parse().unwrap()), &with_token)
                .is_err()
        );
        assert!(
            MetricsAccess::from_config(&MetricsConfig {
                allow: vec!["nope".into()],
                token: None
            })
            .is_err()
        );
    }
}
