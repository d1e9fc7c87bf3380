//! The services boxd serves, one file each, and the dispatcher: every stream
//! the server opens names a [`Service`] (`psbx_wire::boxd`); a target that
//! names none is refused with 404.
//!
//! The request services read one JSON request to the stream's end and answer
//! one JSON value ([`answer`], [`answer_with`]), typed by the request's
//! [`Call`] (`psbx_wire::boxd`), which the server's link uses too, so both
//! ends agree on the answer of each request; `exec` answers with
//! records, `sync` reads a request line and then a tar, `logs` answers with
//! the log's bytes. `port:<n>` splices the stream to a port of the box's
//! loopback, `pty` runs a shell on a terminal, `shot` takes a screenshot or
//! recording, `wire` replaces the box's declared services and links.

mod clock;
mod configure;
mod exec;
pub mod health;
mod info;
mod logs;
mod port;
mod processes;
mod pty;
mod shot;
mod signal;
mod sync;
mod wire;

pub use configure::restore_env;

use crate::exec::Processes;
use crate::privnet::PrivateNet;
use crate::uplink::Uplink;
use psbx_wire::boxd::{BoxInfo, Call, Done, Service};
use psbx_wire::frame::code;
use psbx_wire::mux::{Incoming, Stream};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest JSON request read from a stream.
const MAX_REQUEST: u64 = 1 << 20;

/// What every stream handler shares.
pub struct Boxd {
    pub info: BoxInfo,
    /// Account data pushed at claim: the secrets, as environment variables.
    pub env: RwLock<Vec<(String, String)>>,
    pub processes: Processes,
    pub work: PathBuf,
    /// The current session, for the streams boxd opens.
    pub uplink: Uplink,
    /// The environment's addresses, set up at claim.
    pub private: PrivateNet,
    /// Screenshots and recordings.
    pub shots: crate::shot::Shooter,
}

/// Serves one stream the server opened, to its end.
pub async fn handle(incoming: Incoming, state: Arc<Boxd>) {
    let Some(service) = Service::parse(incoming.target()) else {
        let why = format!("boxd has no service {:?}", incoming.target());
        return incoming.refuse(code::NOT_FOUND, &why);
    };
    match service {
        Service::Info => info::serve(incoming, &state).await,
        Service::Health => health::serve(incoming, &state).await,
        Service::Configure => configure::serve(incoming, &state).await,
        Service::Exec => exec::serve(incoming.accept(), &state).await,
        Service::Sync => sync::serve(incoming.accept(), &state).await,
        Service::Processes => processes::serve(incoming, &state).await,
        Service::Signal => signal::serve(incoming, &state).await,
        Service::Logs => logs::serve(incoming.accept(), &state).await,
        Service::Clock => clock::serve(incoming).await,
        Service::Port(port) => port::serve(incoming, port).await,
        Service::Pty => pty::serve(incoming.accept(), &state).await,
        Service::Shot => shot::serve(incoming.accept(), &state).await,
        Service::Wire => wire::serve(incoming, &state).await,
    }
}

async fn read_request(stream: &mut Stream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    (&mut *stream)
        .take(MAX_REQUEST)
        .read_to_end(&mut buf)
        .await?;
    Ok(buf)
}

/// Answers a request that carries no body: the request side is read to its end
/// first, so that the stream is finished both ways when it is dropped (a
/// stream dropped before the peer's FIN is reset).
async fn answer_json<T: serde::Serialize>(mut stream: Stream, value: &T) {
    let _ = read_request(&mut stream).await;
    let body = serde_json::to_vec(value).unwrap_or_default();
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

/// Answers a [`Call`] with its answer (a request without a body is read to
/// its end first, as [`answer_json`] does).
async fn answer<C: Call>(stream: Stream, value: &C::Answer) {
    answer_json(stream, value).await;
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("bad request: {e}"))
}

/// Reads a [`Call`]'s request to the stream's end.
async fn read_call<C: Call + serde::de::DeserializeOwned>(
    stream: &mut Stream,
) -> Result<C, String> {
    read_request(stream)
        .await
        .map_err(|e| e.to_string())
        .and_then(|b| parse::<C>(&b))
}

/// Reads a [`Call`] answered with [`Done`] and answers what `handle` makes
/// of it (or why the request was not understood).
async fn answer_with<C: Call<Answer = Done> + serde::de::DeserializeOwned>(
    incoming: Incoming,
    handle: impl FnOnce(C) -> Done,
) {
    let mut stream = incoming.accept();
    let done = match read_call::<C>(&mut stream).await {
        Ok(request) => handle(request),
        Err(e) => Done::failed(e),
    };
    answer::<C>(stream, &done).await;
}

/// Test aids for the services' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::Boxd;
    use crate::exec::Processes;
    use crate::privnet::PrivateNet;
    use crate::uplink::Uplink;
    use psbx_wire::boxd::BoxInfo;
    use psbx_wire::{Config, Session};
    use std::sync::{Arc, RwLock};

    /// A boxd state with one secret in its commands' environment.
    pub fn state() -> Arc<Boxd> {
        state_on(crate::shot::display::BOX_DISPLAY)
    }

    /// The same, taking shots of X display `:<display>`.
    pub fn state_on(display: u32) -> Arc<Boxd> {
        Arc::new(Boxd {
            info: BoxInfo {
                protocol: 1,
                version: "test".into(),
                boot_id: "b".into(),
                features: vec![],
            },
            env: RwLock::new(vec![("SECRET".into(), "s3cr3t-value".into())]),
            processes: Processes::default(),
            work: std::env::temp_dir(),
            uplink: Uplink::default(),
            private: PrivateNet::new(&Uplink::default()),
            shots: crate::shot::Shooter::new(display),
        })
    }

    /// The server's end of a session whose streams boxd's services serve.
    pub async fn session() -> Session {
        session_of(state()).await
    }

    /// The server's end of a session whose streams boxd serves with `state`.
    pub async fn session_of(state: Arc<Boxd>) -> Session {
        let (client, boxd) =
            psbx_wire::testing::session_pair(Config::default(), Config::default(), 1 << 16)
                .await
                .unwrap();
        tokio::spawn(async move {
            while let Some(incoming) = boxd.accept().await {
                tokio::spawn(super::handle(incoming, state.clone()));
            }
        });
        client
    }
}
