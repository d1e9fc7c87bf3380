//! Any node answers for any box (issue 33): a request naming a box whose
//! host another node holds is forwarded to that node over the peer link
//! (`peers.rs`), as it came, and its answer streamed back; the node that
//! holds the box answers it exactly as a request of its own (it
//! authenticates it, checks the account, counts it as activity).
//!
//! Which box a request names, read before routing:
//! * `/v1/boxes/{id}` and everything under it (REST: exec streams, sync,
//!   shots, processes, terminals, reviews of a box, ...);
//! * a box URL's host;
//! * a takeover page or terminal (`/takeover/{token}`), by its link;
//! * an MCP `tools/call` whose `arguments.id` names a box (the body is read
//!   first: MCP bodies are small, and capped as every JSON body is).
//!
//! Everything else, and a box that is over, unknown, on this node's host or
//! on a host no node holds, is answered here (from the row, or with 503
//! `host_unavailable`). A request that came over a peer link is always
//! answered here: a box moves only while its host is drained, so two nodes
//! never hand a request back and forth.

use super::peers::{HTTP, Peers};
use crate::client_addr::{TrustedProxies, client_ip};
use crate::error::ApiError;
use crate::proxy::{Forwarding, Hop};
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpResponse, ResponseError, web};
use bytes::Bytes;
use psbx_actors::boxes::{Answerer, Boxes};
use psbx_actors::ids::BoxId;
use psbx_actors::store::{LinkState, Store};
use std::sync::Arc;
use std::time::Duration;

/// Set on the connections of the node's private peer socket: what comes
/// there was forwarded by a peer, whose `X-Forwarded-For` (its last entry)
/// and `X-Forwarded-Proto` say who the client is and how it came
/// (`client_addr::client_ip`).
#[derive(Clone, Copy)]
pub struct PeerConnection;

/// `on_connect` of every listener: the per-connection request cap, and the
/// mark of the private peer socket's connections.
pub fn on_connect(conn: &dyn std::any::Any, data: &mut actix_web::dev::Extensions) {
    crate::limits::streams::on_connect(conn, data);
    if conn
        .downcast_ref::<actix_web::rt::net::UnixStream>()
        .is_some()
    {
        data.insert(PeerConnection);
    }
}

/// The largest MCP body read to find the box it names.
const MCP_BODY_LIMIT: usize = 1024 * 1024;

/// The forwarding middleware (outside the box-URL one).
pub async fn route<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    let peers = req
        .app_data::<web::Data<Option<Arc<Peers>>>>()
        .and_then(|p| p.get_ref().clone());
    let (Some(peers), Some(boxes)) = (peers, req.app_data::<web::Data<Boxes>>().cloned()) else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    if req.conn_data::<PeerConnection>().is_some() {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    }
    let named = match named_box(&mut req, &boxes).await {
        Ok(named) => named,
        Err(e) => return Ok(req.into_response(e.error_response()).map_into_right_body()),
    };
    let Some(id) = named else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_left_body);
    };
    let (host, node, at) = match boxes.answered_by(&id).await {
        Ok(Answerer::Node { host, node, at }) => (host, node, at),
        Ok(Answerer::Here) | Err(_) => {
            return next
                .call(req)
                .await
                .map(ServiceResponse::map_into_left_body);
        }
    };
    let stream = match peers.open(&node, &at, HTTP).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(error = %e, box_id = %id, %host, "could not reach the node holding a box");
            let refused = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "host_unavailable",
                format!(
                    "the box's host {host} is unavailable: its node does not answer ({e}); the \
                     box is kept as it was and answers again once its node is back"
                ),
            )
            .hint("retry in a moment; `psbx hosts list` shows the operator each host's node");
            return Ok(req
                .into_response(refused.error_response())
                .map_into_right_body());
        }
    };
    let trusted = req
        .app_data::<web::Data<TrustedProxies>>()
        .map(|t| t.get_ref().clone())
        .unwrap_or_default();
    let (http, mut payload) = req.into_parts();
    let payload = web::Payload::from_request(&http, &mut payload).await?;
    // The peer reads the client from the one X-Forwarded-For entry this
    // node writes (what the client or its proxies claimed is dropped here).
    let who = Forwarding {
        peer: client_ip(&http, &trusted),
        peer_is_proxy: false,
        secure: http.app_config().secure(),
        host: http.connection_info().host().to_owned(),
    };
    let response = crate::proxy::forward(&http, payload, stream, &who, PeerHop).await;
    Ok(ServiceResponse::new(http, response).map_into_right_body())
}

/// The box a request names, if it names one (see the module doc).
async fn named_box(req: &mut ServiceRequest, boxes: &Boxes) -> Result<Option<BoxId>, ApiError> {
    let path = req.path();
    if let Some(rest) = path.strip_prefix("/v1/boxes/") {
        let id = rest.split('/').next().unwrap_or_default();
        return Ok(BoxId::parse(id).ok());
    }
    if let Some(host) = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        && let Some(urls) = boxes.urls()
        && let Some(address) = urls.parse(host)
    {
        return Ok(Some(address.id));
    }
    if let Some(rest) = path.strip_prefix("/takeover/") {
        let token = rest.split('/').next().unwrap_or_default().to_owned();
        let Some(store) = req.app_data::<web::Data<Store>>().cloned() else {
            return Ok(None);
        };
        let state = crate::error::blocking(move || store.look_takeover_link(&token)).await?;
        return Ok(match state {
            LinkState::Valid { box_id, .. } => Some(box_id),
            _ => None,
        });
    }
    if path == "/mcp" && req.method() == actix_web::http::Method::POST {
        let body = req
            .extract::<Bytes>()
            .await
            .map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))?;
        if body.len() > MCP_BODY_LIMIT {
            return Ok(None);
        }
        let named = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .filter(|v| v["method"] == "tools/call")
            .and_then(|v| v["params"]["arguments"]["id"].as_str().map(str::to_owned))
            .and_then(|id| BoxId::parse(&id).ok());
        req.set_payload(actix_web::dev::Payload::from(body));
        return Ok(named);
    }
    Ok(None)
}

/// A hop to another node: nothing held, generous time limits (the node
/// holding the box applies the box's own), answers as they came.
struct PeerHop;

impl Hop for PeerHop {
    fn traffic(&self) -> Option<psbx_actors::boxes::Traffic> {
        None
    }

    fn idle(&self) -> (Duration, Duration) {
        (Duration::from_secs(600), Duration::from_secs(24 * 3600))
    }

    fn own_cookies(&self) -> bool {
        false
    }

    fn bad_answer(&self) -> HttpResponse {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "host_unavailable",
            "the node holding this box gave no answer",
        )
        .hint("retry in a moment")
        .error_response()
    }

    fn body_stalled(&self) -> HttpResponse {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_stalled",
            "the request's body sent nothing for too long",
        )
        .error_response()
    }
}
