//! What the services share: boxd's state ([`Boxd`]) and the request
//! helpers. A request service reads one JSON request to the stream's end and
//! answers one JSON value ([`answer`], [`answer_with`]), typed by the
//! request's [`Call`] (`psbx_wire::boxd`), which the server's link uses too,
//! so both ends agree on the answer of each request.
//!
//! Here rather than in `mod.rs`, so that the services import their helpers
//! from beside them and `mod.rs` only dispatches.

use crate::exec::Processes;
use crate::privnet::PrivateNet;
use crate::settings::Settings;
use crate::uplink::Uplink;
use psbx_wire::boxd::{BoxInfo, Call, Done};
use psbx_wire::mux::{Incoming, Stream};
use std::sync::RwLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest JSON request read from a stream.
const MAX_REQUEST: u64 = 1 << 20;

/// What every stream handler shares.
pub struct Boxd {
    pub info: BoxInfo,
    /// Where boxd keeps things and whether it owns the machine.
    pub settings: Settings,
    /// Account data pushed at claim: the secrets, as environment variables.
    pub env: RwLock<Vec<(String, String)>>,
    pub processes: Processes,
    /// The current session, for the streams boxd opens.
    pub uplink: Uplink,
    /// The environment's addresses, set up at claim.
    pub private: PrivateNet,
    /// Screenshots and recordings.
    pub shots: crate::shot::Shooter,
}

impl Boxd {
    /// boxd's state as `settings` place it, introduced by `info`, with what
    /// an earlier boxd of this boot kept under `settings.run` (the commands'
    /// environment, the background commands, which are watched again). Its
    /// network is set up later, if at all (`serve.rs`).
    pub fn restored(settings: Settings, info: BoxInfo) -> Self {
        let uplink = Uplink::default();
        Self {
            info,
            env: RwLock::new(super::configure::restore_env(&settings.env_file())),
            processes: Processes::kept_at(settings.processes_file(), settings.logs_dir()),
            private: PrivateNet::new(&uplink),
            shots: crate::shot::Shooter::new(crate::shot::display::BOX_DISPLAY),
            uplink,
            settings,
        }
    }

    /// The box's `/work` here.
    pub fn work(&self) -> &std::path::Path {
        &self.settings.work
    }

    /// Why a request that would change the machine (its clock, its network)
    /// is refused, when boxd does not own it.
    pub fn not_its_machine(&self, what: &str) -> Option<String> {
        (!self.settings.owns_machine).then(|| {
            format!("this boxd does not own its machine: it sets up no {what} (its services run in-process)")
        })
    }
}

pub(super) async fn read_request(stream: &mut Stream) -> std::io::Result<Vec<u8>> {
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
pub(super) async fn answer_json<T: serde::Serialize>(mut stream: Stream, value: &T) {
    let _ = read_request(&mut stream).await;
    let body = serde_json::to_vec(value).unwrap_or_default();
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

/// Answers a [`Call`] with its answer (a request without a body is read to
/// its end first, as [`answer_json`] does).
pub(super) async fn answer<C: Call>(stream: Stream, value: &C::Answer) {
    answer_json(stream, value).await;
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("bad request: {e}"))
}

/// Reads a [`Call`]'s request to the stream's end.
pub(super) async fn read_call<C: Call + serde::de::DeserializeOwned>(
    stream: &mut Stream,
) -> Result<C, String> {
    read_request(stream)
        .await
        .map_err(|e| e.to_string())
        .and_then(|b| parse::<C>(&b))
}

/// Reads a [`Call`] answered with [`Done`] and answers what `handle` makes
/// of it (or why the request was not understood).
pub(super) async fn answer_with<C: Call<Answer = Done> + serde::de::DeserializeOwned>(
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
