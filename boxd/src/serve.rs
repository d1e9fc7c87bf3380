//! boxd's side of the box channel: one wire session at a time over the
//! virtio-serial port (a new one whenever the server reconnects), and a task
//! per stream that serves the service its target names (`services`).
//! Before the first session, it restores what an earlier boxd of this boot
//! took from a claim or started: the environment's addresses (`privnet`), the
//! commands' environment and the background commands (`kept`).

use crate::exec::Processes;
use crate::privnet::PrivateNet;
use crate::services::{self, Boxd, health};
use crate::uplink::Uplink;
use crate::{kept, port};
use psbx_wire::Hello;
use psbx_wire::boxd::{BoxInfo, Service};
use psbx_wire::mux::{Config, Role, Session};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Sets up again what an earlier boxd of this boot kept (the commands'
/// environment, the background commands, the environment's addresses), then
/// serves the channel forever.
pub async fn run(path: PathBuf) -> std::io::Result<()> {
    match crate::net::up().await {
        Ok(Some(nic)) => println!(
            "boxd: network card up: {}/{} via {}",
            nic.address, nic.prefix, nic.gateway
        ),
        Ok(None) => println!("boxd: no network card"),
        Err(e) => eprintln!("boxd: {e}"),
    }
    let uplink = Uplink::default();
    let state = Arc::new(Boxd {
        info: BoxInfo {
            protocol: psbx_wire::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            boot_id: health::boot_id(),
            features: [
                Service::Health,
                Service::Exec,
                Service::Sync,
                Service::Processes,
                Service::Logs,
                Service::Clock,
                Service::Port(1),
                Service::Pty,
                Service::Shot,
                Service::Wire,
            ]
            .map(|s| s.feature().to_owned())
            .into_iter()
            .chain([psbx_wire::boxd::TAKE_OVER_FEATURE.to_owned()])
            .collect(),
        },
        env: RwLock::new(services::restore_env()),
        processes: Processes::kept_at(PathBuf::from(kept::PROCESSES)),
        work: PathBuf::from("/work"),
        private: PrivateNet::new(&uplink),
        shots: crate::shot::Shooter::new(crate::shot::display::BOX_DISPLAY),
        uplink,
    });
    state.private.start().await;
    state.private.restore(&state.uplink, &state.work).await;
    if let Some(aws) = crate::aws::restore() {
        match crate::aws::start(&aws, &state.uplink).await {
            Ok(()) => println!("boxd: restored the AWS role from {}", crate::aws::KEPT),
            Err(e) => eprintln!("boxd: cannot restore the AWS role: {e}"),
        }
    }
    loop {
        let io = match port::PortIo::open(&path) {
            Ok(io) => io,
            // The previous session's driver may still hold the port.
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let hello = Hello::new(format!("boxd {}", env!("CARGO_PKG_VERSION")));
        match Session::over_io(io, Role::Server, Config::default(), hello).await {
            Ok(session) => {
                state.uplink.set(session.clone());
                serve_session(&session, &state).await;
                state.uplink.clear();
                session.close();
            }
            // No server on the other end yet: try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn serve_session(session: &Session, state: &Arc<Boxd>) {
    loop {
        tokio::select! {
            incoming = session.accept() => match incoming {
                Some(incoming) => {
                    let state = state.clone();
                    tokio::spawn(services::handle(incoming, state));
                }
                None => return,
            },
            // The server sends no control messages once connected: one means it
            // restarted and is saying hello on a new connection.
            _ = session.recv_control::<serde_json::Value>() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::testing::state;
    use psbx_wire::boxd::{self as proto, Record, SyncDone};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> Session {
        let (client, boxd) =
            psbx_wire::testing::session_pair(Config::default(), Config::default(), 1 << 16)
                .await
                .unwrap();
        tokio::spawn(async move { serve_session(&boxd, &state()).await });
        client
    }

    async fn fetch(session: &Session, target: &str, body: &[u8]) -> Vec<u8> {
        let mut stream = session.open(target).await.unwrap();
        stream.write_all(body).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn answers_info_and_runs_commands_with_the_configured_env() {
        let session = pair().await;
        let info: BoxInfo = serde_json::from_slice(&fetch(&session, "info", b"").await).unwrap();
        assert_eq!(info.boot_id, "b");
        let request = serde_json::to_vec(&proto::ExecRequest {
            cmd: "echo $SECRET; echo err >&2; exit 4".into(),
            cwd: "/tmp".into(),
            env: vec![],
            timeout_s: Some(10),
            background: false,
        })
        .unwrap();
        let mut bytes = fetch(&session, "exec", &request).await;
        let mut records = Vec::new();
        while let Some(r) = Record::decode(&mut bytes).unwrap() {
            records.push(r);
        }
        assert!(
            records.contains(&Record::Stdout(b"s3cr3t-value\n".to_vec())),
            "{records:?}"
        );
        assert!(
            records.contains(&Record::Stderr(b"err\n".to_vec())),
            "{records:?}"
        );
        assert_eq!(
            records.last(),
            Some(&Record::Exit(proto::Exit {
                code: Some(4),
                signal: None,
                timed_out: false,
                private_endpoint_errors: Vec::new(),
            }))
        );
    }

    #[tokio::test]
    async fn a_target_that_names_no_service_is_refused_with_404() {
        let session = pair().await;
        match session.open("nonsense").await {
            Err(psbx_wire::OpenError::Refused { code, reason }) => {
                assert_eq!(code, 404);
                assert_eq!(reason, "boxd has no service \"nonsense\"");
            }
            other => panic!("{other:?}"),
        }
        // The session goes on serving.
        let info: BoxInfo = serde_json::from_slice(&fetch(&session, "info", b"").await).unwrap();
        assert_eq!(info.boot_id, "b");
    }

    #[tokio::test]
    async fn unpacks_a_sync_and_says_so() {
        let session = pair().await;
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o644);
        h.set_path("hello.txt").unwrap();
        h.set_cksum();
        tar.append(&h, &b"hi\n"[..]).unwrap();
        let dest = format!("psbx-sync-test-{}", std::process::id());
        let mut body = format!("{{\"dest\":\"{dest}\"}}\n").into_bytes();
        body.extend(tar.into_inner().unwrap());
        let done: SyncDone = serde_json::from_slice(&fetch(&session, "sync", &body).await).unwrap();
        assert!(done.ok, "{done:?}");
        assert_eq!(done.files, 1);
        let written = std::env::temp_dir().join(&dest).join("hello.txt");
        assert_eq!(std::fs::read(&written).unwrap(), b"hi\n");
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&dest));
        let refused: SyncDone =
            serde_json::from_slice(&fetch(&session, "sync", b"{\"dest\":\"../x\"}\n").await)
                .unwrap();
        assert!(!refused.ok && refused.error.unwrap().contains("relative path"));
    }
}
