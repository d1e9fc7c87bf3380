//! `GET /v1/connect`: where connectors connect (environments.txt,
//! "Connector"). The WebSocket upgrade is authenticated with the
//! connection's token (`Authorization: Bearer psbx_conn_...`, looked up by
//! its hash); then every binary message is one wire frame of a session in
//! which this server opens a stream per box connection. The session is
//! registered with the connector hub ([`psbx_actors::connectors::Hub`]) under its connection until it ends; rotating
//! the token or deleting the connection closes it at once (also when the
//! rotation comes between the token check and the connector's hello), and
//! each heartbeat checks the token again.
//!
//! Only the server opens streams on a connector session: a connector's
//! `OPEN` is refused at once and nothing is kept for it
//! ([`Config::tunnel_server`]). A connection and an account hold a limited
//! number of sessions on this server (`connectors.max_sessions_per_connection`
//! and `..._per_account`, counted from the upgrade); above it the upgrade is
//! answered 429 `too_many_sessions`.
//!
//! actix-ws's message stream and session are not `Send`: the wire session's
//! driver runs on the worker's own task over them
//! ([`Session::over_local_messages`]; WebSocket pings are answered there), with
//! no task or channel between the WebSocket and the session, and the session's
//! work (the hub, the heartbeat) runs on tokio's scheduler.

use crate::auth::bearer_token;
use crate::error::ApiError;
use crate::server_info::ServerInfo;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, get, web};
use actix_ws::Message;
use bytes::Bytes;
use futures_util::StreamExt;
use psbx_actors::connectors::session::{self, ConnectorSecret, SessionOf};
use psbx_actors::connectors::{Full, HubLimits};
use psbx_actors::environments::Environments;
use psbx_actors::store::Store;
use psbx_wire::Hello;
use psbx_wire::mux::{Config, Role, Session};

/// Largest WebSocket message taken (a wire frame is at most 64 KiB + header).
const MAX_MESSAGE: usize = 1 << 20;

fn refused(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).hint(
        "give the connector the token of its connection (POST /v1/environments/{env}/connections, \
         or .../connections/{id}/token to rotate it)",
    )
}

fn too_many(full: Full, limits: HubLimits) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_sessions",
        full.to_string(),
    )
    .hint(format!(
        "each connection may hold {} connector sessions and each account {} on a server: \
         run fewer connector copies or a lower PSBX_SESSIONS, or stop connectors that are \
         not needed; the operator sets the limits (connectors.max_sessions_per_connection, \
         connectors.max_sessions_per_account)",
        limits.sessions_per_connection, limits.sessions_per_account
    ))
}

#[utoipa::path(
    tag = "environments",
    operation_id = "connect",
    responses(
        (status = 101, description = "WebSocket: wire frames, one per binary message"),
        (status = 400, description = "Not a WebSocket upgrade (`not_websocket`)", body = crate::error::ErrorBody),
        (status = 401, description = "No connector token, or one that was rotated or whose connection was deleted (`unauthorized`)", body = crate::error::ErrorBody),
        (status = 429, description = "The connection or the account has as many connector sessions as it may (`too_many_sessions`)", body = crate::error::ErrorBody),
        (status = 503, description = "The database does not answer (`database_unavailable`)", body = crate::error::ErrorBody),
    )
)]
#[get("/v1/connect")]
pub async fn connect(
    req: HttpRequest,
    body: web::Payload,
    envs: web::Data<Environments>,
    store: web::Data<Store>,
    info: web::Data<ServerInfo>,
) -> Result<HttpResponse, ApiError> {
    let token = bearer_token(req.headers())
        .filter(|t| t.starts_with("psbx_conn_"))
        .ok_or_else(|| refused("a connector token (psbx_conn_...) is required"))?
        .to_owned();
    let hub = envs.hub().clone();
    // Before the token check: a rotation after it refuses the session at
    // its registration.
    let epoch = hub.epoch();
    let (connection, env) = envs.connection_for_token(&token).await?.ok_or_else(|| {
        refused("the connector token is not valid: it was rotated, or its connection deleted")
    })?;
    let slot = hub
        .reserve(&env.account_id, &connection.record.id, epoch)
        .map_err(|full| {
            tracing::warn!(environment = %env.name, connection = %connection.record.name,
                error = %full, "connector session refused");
            too_many(full, hub.limits())
        })?;
    let (response, ws, messages) = actix_ws::handle(&req, body)
        .map_err(|e| ApiError::bad_request("not_websocket", e.to_string()))?;
    let store = store.get_ref().clone();
    let of = SessionOf {
        connection: connection.record.id,
        connection_name: connection.record.name,
        environment_name: env.name,
        server: info.server_id.clone(),
        token: ConnectorSecret(token),
    };
    actix_web::rt::spawn(run(
        ws,
        messages.max_frame_size(MAX_MESSAGE),
        slot,
        store,
        of,
    ));
    Ok(response)
}

/// Runs a connector's session over its WebSocket on this worker's task until
/// either side ends: binary messages are the session's frames, pings are
/// answered, a close or an error ends it; the session itself is served on
/// tokio's scheduler.
async fn run(
    ws: actix_ws::Session,
    messages: actix_ws::MessageStream,
    slot: psbx_actors::connectors::Slot,
    store: Store,
    of: SessionOf,
) {
    let sink = Box::pin(futures_util::sink::unfold(
        ws.clone(),
        |mut ws, frame: Bytes| async move { ws.binary(frame).await.map(|()| ws) },
    ));
    let pong = ws.clone();
    let stream = Box::pin(
        messages
            .take_while(|m| std::future::ready(!matches!(m, Ok(Message::Close(_)))))
            .filter_map(move |m| {
                let mut pong = pong.clone();
                async move {
                    match m {
                        Ok(Message::Binary(frame)) => Some(Ok(frame)),
                        Ok(Message::Ping(payload)) => {
                            let _ = pong.pong(&payload).await;
                            None
                        }
                        Ok(_) => None,
                        Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
                    }
                }
            }),
    );
    let hello = Hello::new(format!("psbx {}", env!("CARGO_PKG_VERSION")));
    let config = Config::tunnel_server();
    match Session::over_local_messages(sink, stream, Role::Server, config, hello).await {
        Ok((session, driver)) => {
            tokio::spawn(session::serve(slot, store, of, session));
            let _ = driver.await;
        }
        Err(e) => {
            tracing::warn!(environment = %of.environment_name, connection = %of.connection_name,
                error = %e, "connector session failed to start");
        }
    }
    let _ = ws.close(None).await;
}
