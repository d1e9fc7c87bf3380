//! Box URLs (`actors::box_urls` makes and reads them): requests whose Host is
//! under `box_domain` never reach psbx's own routes; they are answered here,
//! on the main listener, by a middleware ([`route`]) that takes them before
//! the router does (a scope registered for them would also stand in the
//! route map, where it hides the patterns of requests answered before
//! routing, such as 401s).
//!
//! In order: the host is read as a box address and its key checked (the
//! same constant [`pages::not_found`] for a host that is no box URL, a wrong
//! key, an unknown or a stopped box: nothing is read before the key is
//! right); the box's account's allowlist (`PUT /v1/box-access`) is checked
//! against the client's address (the socket's, or `X-Forwarded-For` from a
//! trusted proxy: [`client_ip`]): 403, and the box is not woken; the request
//! takes a place among the box's and its client's open box-URL requests
//! (`box_urls.max_requests_per_box`, `box_urls.max_requests_per_client`:
//! the rest of the box's channel stays for exec, shots, DNS and the
//! environment), or is answered 503 at once ([`pages::crowded`]); the box is
//! thawed if frozen (this counts as activity) and a `port:<n>` stream opened
//! to the port in the box ([`pages::nothing_listens`] when nothing listens
//! there); the request is forwarded on it (`crate::proxy`).
//!
//! Box-URL request lines are logged without their path ([`is_box_request`]):
//! a box app's paths may carry its own tokens.

pub mod pages;
mod site;

pub use site::warn_if_shared_site;

use crate::client_addr::{TrustedProxies, client_ip};
use crate::proxy::{Forwarding, Hop};
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{RequestHead, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use psbx_actors::box_access::BoxAccess;
use psbx_actors::box_urls::{UrlLimits, port_in_box};
use psbx_actors::boxd_link::LinkError;
use psbx_actors::boxes::{Awake, Boxes, Traffic};
use psbx_actors::error::BoxError;
use psbx_wire::frame::code;

/// Answers every request for a box host; passes the others on.
pub async fn route<B: MessageBody>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let host = req
        .app_data::<web::Data<Boxes>>()
        .and_then(|boxes| boxes.urls())
        .and_then(|urls| host_of(req.head()).filter(|h| urls.is_box_host(h)))
        .map(str::to_owned);
    let Some(host) = host else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    let (req, mut payload) = req.into_parts();
    let payload = web::Payload::from_request(&req, &mut payload).await?;
    let res = match (
        req.app_data::<web::Data<Boxes>>(),
        req.app_data::<web::Data<BoxAccess>>(),
        req.app_data::<web::Data<TrustedProxies>>(),
    ) {
        (Some(boxes), Some(access), Some(trusted)) => {
            serve(&req, host, payload, boxes, access, trusted).await
        }
        _ => pages::not_found(),
    };
    Ok(ServiceResponse::new(req, res).map_into_right_body())
}

/// Whether a request is for a box URL (its path is the box's business, not
/// the log's).
pub fn is_box_request(req: &ServiceRequest) -> bool {
    req.app_data::<web::Data<Boxes>>()
        .and_then(|boxes| boxes.urls())
        .is_some_and(|urls| host_of(req.head()).is_some_and(|h| urls.is_box_host(h)))
}

/// The host a request names: its `Host` header, or over HTTP/2 its
/// `:authority`. Never `Forwarded`/`X-Forwarded-Host`, which a client sets.
fn host_of(head: &RequestHead) -> Option<&str> {
    head.headers
        .get(actix_web::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            head.uri
                .authority()
                .map(actix_web::http::uri::Authority::as_str)
        })
}

/// Answers a request whose `host` is under the box domain.
async fn serve(
    req: &HttpRequest,
    host: String,
    payload: web::Payload,
    boxes: &Boxes,
    access: &BoxAccess,
    trusted: &TrustedProxies,
) -> HttpResponse {
    let Some(address) = boxes.urls().and_then(|urls| urls.parse(&host)) else {
        return pages::not_found();
    };
    let record = match boxes.for_url(&address).await {
        Ok(Some(record)) => record,
        Ok(None) => return pages::not_found(),
        Err(e) => return unavailable(&e),
    };
    let Some(account) = record.account_id.clone() else {
        return pages::not_found();
    };
    // A port the box's URL does not reach is as if there were no such box.
    if !psbx_actors::box_urls::reaches(
        &address,
        &record.spec.services,
        record.spec.url_ports.as_deref(),
    ) {
        return pages::not_found();
    }
    // Checked before anything wakes the box. An address psbx cannot tell
    // (a trusted proxy that forwarded none it can read) is no listed one.
    let client = client_ip(req, trusted);
    let allowed = match client {
        Some(ip) => access.allows(&account, ip).await,
        None => {
            access
                .allows(&account, std::net::Ipv4Addr::UNSPECIFIED.into())
                .await
        }
    };
    match allowed {
        Ok(true) => {}
        Ok(false) => return pages::forbidden(client),
        Err(e) => {
            tracing::warn!(error = %e, "reading a box URL's allowlist");
            return pages::unavailable("psbx cannot check who may open this box right now");
        }
    }
    let peer = req.peer_addr().map(|a| a.ip());
    let port = port_in_box(&address, &record.spec.services);
    let box_id = record.id.as_str();
    let counted_as = client
        .or(peer)
        .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
    let slot = match boxes.url_slot(&record.id, counted_as) {
        Ok(slot) => slot,
        Err(crowded) => return pages::crowded(crowded),
    };
    let (stream, awake) = match boxes.open_port(&record, port, slot).await {
        Ok(opened) => opened,
        Err(BoxError::Boxd(LinkError::Refused {
            code: Some(code::BAD_GATEWAY),
            ..
        })) => return pages::nothing_listens(box_id, port),
        Err(BoxError::Over { .. } | BoxError::NotFound(_)) => return pages::not_found(),
        Err(e) => return unavailable(&e),
    };
    // Forwarded by another node: its forwarding headers are the client's.
    let from_node = req
        .conn_data::<crate::cluster::forward::PeerConnection>()
        .is_some();
    let who = Forwarding {
        peer_is_proxy: from_node || peer.is_some_and(|p| trusted.contains(p)),
        peer,
        secure: req.app_config().secure(),
        host,
    };
    let hop = BoxHop {
        awake,
        box_id: box_id.to_owned(),
        port,
        limits: boxes.url_limits(),
    };
    crate::proxy::forward(req, payload, stream, &who, hop).await
}

/// A box URL's hop: the box held awake while bytes flow, its time limits,
/// the box's cookies kept to its host, and the box URL's error pages.
struct BoxHop {
    awake: Awake,
    box_id: String,
    port: u16,
    limits: UrlLimits,
}

impl Hop for BoxHop {
    fn traffic(&self) -> Option<Traffic> {
        self.awake.traffic()
    }

    fn idle(&self) -> (std::time::Duration, std::time::Duration) {
        (self.limits.body_idle, self.limits.websocket_idle)
    }

    fn own_cookies(&self) -> bool {
        true
    }

    fn bad_answer(&self) -> HttpResponse {
        pages::bad_answer(&self.box_id, self.port)
    }

    fn body_stalled(&self) -> HttpResponse {
        pages::body_stalled(self.limits.body_idle)
    }
}

/// A failure on psbx's side, logged with its cause; the page says only what
/// helps the visitor.
fn unavailable(e: &BoxError) -> HttpResponse {
    tracing::warn!(error = %e, "a box URL request failed");
    pages::unavailable("psbx cannot reach this box right now")
}
