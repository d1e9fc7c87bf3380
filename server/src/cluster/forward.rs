//! Any node answers for any box (issue 33): a request naming a box whose
//! host another node holds is forwarded to that node over the peer link
//! (`peers.rs`), as it came, and its answer streamed back; the node that
//! holds the box answers it exactly as a request of its own (it
//! authenticates it, checks the account, counts it as activity).
//!
//! Which box a request names, read before routing:
//! * first, a box URL's host: whatever its path says is the box's own (a
//!   host under the box domain that names no box names nothing);
//! * `/v1/boxes/{id}` and everything under it (REST: exec streams, sync,
//!   shots, processes, terminals, reviews of a box, ...), and the web app's
//!   `/app/boxes/{id}…` (its page, stop);
//! * a review page's screenshot (`POST /app/reviews/{id}/shots`), by the
//!   review's box (the review pages themselves read the store and the
//!   shared storage: any node serves them);
//! * a takeover page or terminal (`/takeover/{token}`), by its link;
//! * a one-time upload URL (`/v1/uploads/{token}`), by its token (not spent);
//! * an MCP `tools/call` whose `arguments.id` names a box (the body is read
//!   first: MCP bodies are small, and capped as every JSON body is).
//!
//! A start (`POST /v1/boxes`, MCP `sandbox_start`) is placed first
//! (`Store::place_box`: a host with a pooled box of its size, else the most
//! free memory) and handed to the chosen host's node, which starts it as a
//! start of its own; its ledger admits the box last. With no host that has
//! room, or this node's own chosen, it starts here as on one node; a node
//! without a host then refuses it with 503 `host_full` when some host takes
//! boxes, `boxes_unavailable` when none does (`Boxes::placing_starts`).
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
use psbx_actors::store::{LinkState, Store, StoreError};
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
    let here = |req: ServiceRequest| async {
        next.call(req)
            .await
            .map(ServiceResponse::map_into_left_body)
    };
    let peers = req
        .app_data::<web::Data<Option<Arc<Peers>>>>()
        .and_then(|p| p.get_ref().clone());
    let (Some(peers), Some(boxes)) = (peers, req.app_data::<web::Data<Boxes>>().cloned()) else {
        return here(req).await;
    };
    if req.conn_data::<PeerConnection>().is_some() {
        return here(req).await;
    }
    let named = match named_box(&mut req, &boxes).await {
        Ok(named) => named,
        Err(e) => return Ok(req.into_response(e.error_response()).map_into_right_body()),
    };
    let (what, host, node, at) = match named {
        Named::Nothing => return here(req).await,
        Named::Box(id) => match boxes.answered_by(&id).await {
            Ok(Answerer::Node { host, node, at }) => (format!("box {id}"), host, node, at),
            Ok(Answerer::Here) | Err(_) => return here(req).await,
        },
        Named::Start(size) => match place(&req, &boxes, peers.me(), size).await {
            Some((host, node, at)) => ("a new box".to_owned(), host, node, at),
            None => return here(req).await,
        },
    };
    let stream = match peers.open(&node, &at, HTTP).await {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!(error = %e, %what, %host, "could not reach the node holding a box's host");
            let refused = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "host_unavailable",
                format!(
                    "the host {host} of {what} is unavailable: its node does not answer ({e}); \
                     a box there is kept as it was and answers again once its node is back"
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

/// Chooses the host of a new box (`Store::place_box`): `None` when it is
/// this node's own, when no host has room (this node answers: as one host
/// would, or, without a host, `host_full` or `boxes_unavailable`), or when
/// the store fails.
async fn place(
    req: &ServiceRequest,
    boxes: &Boxes,
    me: &psbx_actors::ids::ServerId,
    size: u32,
) -> Option<(String, psbx_actors::ids::ServerId, String)> {
    let store = req.app_data::<web::Data<Store>>()?.get_ref().clone();
    let unit = boxes.settings().resources(size);
    let placed =
        crate::error::blocking(move || store.place_box(size, unit.vcpus, unit.memory_mib, &[]))
            .await;
    match placed {
        Ok(Some(placed)) if &placed.server_id != me => {
            Some((placed.host, placed.server_id, placed.advertise?))
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = ?e, "could not place a box; starting it here");
            None
        }
    }
}

/// What a request names.
enum Named {
    Nothing,
    Box(BoxId),
    /// A start, of this size.
    Start(u32),
}

/// The size a start's JSON body asks for (1 when it names none; an
/// unreadable body is the route's to refuse).
fn size_of(body: &serde_json::Value) -> u32 {
    body["size"]
        .as_u64()
        .and_then(|s| u32::try_from(s).ok())
        .filter(|s| [1, 2, 4, 8].contains(s))
        .unwrap_or(1)
}

/// Reads a small JSON body (put back for the route), if it is one; a body
/// past the application's limit is refused as the route would (413).
async fn json_body(
    req: &mut ServiceRequest,
) -> Result<Option<serde_json::Value>, actix_web::Error> {
    let body = req.extract::<Bytes>().await?;
    let value = (body.len() <= MCP_BODY_LIMIT)
        .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
        .flatten();
    req.set_payload(actix_web::dev::Payload::from(body));
    Ok(value)
}

/// The box a request names, or the start it asks for (see the module doc).
async fn named_box(req: &mut ServiceRequest, boxes: &Boxes) -> Result<Named, actix_web::Error> {
    // A box URL's host first: its path is the box's own, whatever it says.
    if let Some(host) = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        && let Some(urls) = boxes.urls()
        && urls.is_box_host(host)
    {
        return Ok(urls
            .parse(host)
            .map_or(Named::Nothing, |address| Named::Box(address.id)));
    }
    let path = req.path().to_owned();
    let method = req.method().clone();
    if path == "/v1/boxes" && method == actix_web::http::Method::POST {
        return Ok(match json_body(req).await? {
            Some(body) => Named::Start(size_of(&body)),
            None => Named::Nothing,
        });
    }
    if let Some(rest) = path
        .strip_prefix("/v1/boxes/")
        .or_else(|| path.strip_prefix("/app/boxes/"))
    {
        let id = rest.split('/').next().unwrap_or_default();
        return Ok(BoxId::parse(id).map_or(Named::Nothing, Named::Box));
    }
    // A screenshot taken from a review page is taken of the review's box.
    if let Some(id) = path
        .strip_prefix("/app/reviews/")
        .and_then(|rest| rest.strip_suffix("/shots"))
        .filter(|_| method == actix_web::http::Method::POST)
        .and_then(|id| psbx_actors::ids::ReviewId::parse(id).ok())
    {
        return looked_up(req, move |store| store.review_box(&id)).await;
    }
    if let Some(rest) = path.strip_prefix("/takeover/") {
        let token = rest.split('/').next().unwrap_or_default().to_owned();
        return looked_up(req, move |store| {
            Ok(match store.look_takeover_link(&token)? {
                LinkState::Valid { box_id, .. } => Some(box_id),
                _ => None,
            })
        })
        .await;
    }
    if let Some(rest) = path.strip_prefix("/v1/uploads/") {
        // A token without its prefix is refused by the store unread.
        let token = rest.split('/').next().unwrap_or_default().to_owned();
        return looked_up(req, move |store| store.upload_box(&token)).await;
    }
    if path == "/mcp" && method == actix_web::http::Method::POST {
        let Some(call) = json_body(req)
            .await?
            .filter(|v| v["method"] == "tools/call")
        else {
            return Ok(Named::Nothing);
        };
        let arguments = &call["params"]["arguments"];
        if call["params"]["name"] == "sandbox_start" {
            return Ok(Named::Start(size_of(arguments)));
        }
        return Ok(arguments["id"]
            .as_str()
            .and_then(|id| BoxId::parse(id).ok())
            .map_or(Named::Nothing, Named::Box));
    }
    Ok(Named::Nothing)
}

/// The box a credential or record names, read from the store with `look`.
async fn looked_up(
    req: &ServiceRequest,
    look: impl FnOnce(&Store) -> Result<Option<BoxId>, StoreError> + Send + 'static,
) -> Result<Named, actix_web::Error> {
    let Some(store) = req.app_data::<web::Data<Store>>().cloned() else {
        return Ok(Named::Nothing);
    };
    let named = crate::error::blocking(move || look(&store)).await?;
    Ok(named.map_or(Named::Nothing, Named::Box))
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
