//! The services boxd serves, one file each, and the dispatcher: every stream
//! the server opens names a [`Service`] (`psbx_wire::boxd`); a target that
//! names none is refused with 404. Only dispatching is here: the state the
//! services share and their request helpers are in `common.rs`.
//!
//! The request services answer one JSON value typed by the request's `Call`
//! (`common.rs`); `exec` answers with records, `sync` reads a request line
//! and then a tar, `logs` answers with the log's bytes. `port:<n>` splices
//! the stream to a port of the box's loopback, `pty` runs a shell on a
//! terminal, `shot` takes a screenshot or recording, `wire` replaces the
//! box's declared services and links.

mod clock;
mod common;
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

pub use common::Boxd;

use psbx_wire::boxd::Service;
use psbx_wire::frame::code;
use psbx_wire::mux::Incoming;
use std::sync::Arc;

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
        Service::Clock => clock::serve(incoming, &state).await,
        Service::Port(port) => port::serve(incoming, port).await,
        Service::Pty => pty::serve(incoming.accept(), &state).await,
        Service::Shot => shot::serve(incoming.accept(), &state).await,
        Service::Wire => wire::serve(incoming, &state).await,
    }
}

/// Test aids for the services' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::Boxd;
    use crate::exec::Processes;
    use crate::privnet::PrivateNet;
    use crate::settings::Settings;
    use crate::uplink::Uplink;
    use psbx_wire::boxd::BoxInfo;
    use psbx_wire::{Config, Session};
    use std::sync::{Arc, RwLock};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
            settings: Settings {
                work: std::env::temp_dir(),
                ..Settings::default()
            },
            env: RwLock::new(vec![("SECRET".into(), "s3cr3t-value".into())]),
            processes: Processes::default(),
            uplink: Uplink::default(),
            private: PrivateNet::new(&Uplink::default()),
            shots: crate::shot::Shooter::new(display),
        })
    }

    /// The server's end of a session whose streams boxd's services serve.
    pub async fn session() -> Session {
        session_of(state()).await
    }

    /// Opens `target`, sends `body` and half-closes; everything answered.
    pub async fn fetch(session: &Session, target: &str, body: &[u8]) -> Vec<u8> {
        let mut stream = session.open(target).await.unwrap();
        stream.write_all(body).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        out
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
