//! Benchmark only (`scripts/bench tunnel`, docs/BENCHMARKS.md "Tunnel"): the
//! psbx end of the tunnel, without a VM.
//!
//! Boxes enter the tunnel through boxd inside their VM; under TCG that would
//! measure the VM, not the tunnel. This program runs the server's own HTTP
//! application (`psbx_server::app::build`, as `psbx serve` builds it, boxes
//! disabled, the embedded PostgreSQL cluster under DATA_DIR) on 127.0.0.1, so
//! the REST calls and `GET /v1/connect` of the real connector are the real
//! ones, and adds TCP *entries* on 127.0.0.1 that stand where boxd stands:
//!
//! * `hub CONNECTION_ID CONNECTION_NAME HOST:PORT` — each accepted TCP
//!   connection becomes a stream opened with the server's connector hub
//!   (`Hub::open`, the session choice the router uses) and is spliced with
//!   `psbx_wire::splice::splice`, as boxd splices a box's connection. Same
//!   topology as a rathole server's service port.
//! * `box ACCOUNT_ID ENVIRONMENT HOST:PORT` — each accepted TCP connection
//!   is opened as `env:HOST:PORT` on a wire session over a Unix socket pair
//!   standing for a box link (boxd's side here, the server's side with the
//!   box link's settings), whose streams go to the real
//!   `psbx_actors::connectors::Router` (the environment lookup in the
//!   database, 403/503, tracking, egress counting, splice). That is the whole
//!   server side of a box's stream; only boxd's nftables entry in the VM is
//!   left out.
//!
//! usage: `tunnel_entry DATA_DIR` (a fresh directory; never a server's own).
//! Prints `url URL`, `key API_KEY` and `account ACCOUNT_ID`, then reads one command per line on
//! stdin and answers each with `entry PORT` (or `error ...`). End of stdin,
//! SIGTERM or SIGINT stop everything, the embedded cluster included. Nothing here is reachable
//! from `psbx serve`: it is an example binary, built only on request.

use anyhow::Context;
use psbx_actors::connectors::route::BoxRoute;
use psbx_actors::connectors::{Hub, Router};
use psbx_actors::ids::{AccountId, BoxId};
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_server::app::{self, AppState};
use psbx_server::config::{Config, LogFormat};
use psbx_server::database::{Database, Opener};
use psbx_server::host::HostChoice;
use psbx_wire::Hello;
use psbx_wire::mux::{Config as MuxConfig, Role, Session};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> anyhow::Result<()> {
    let data_dir = std::env::args_os()
        .nth(1)
        .context("usage: tunnel_entry DATA_DIR")?;
    let mut config = Config {
        data_dir: data_dir.into(),
        ..Config::default()
    };
    config.boxes.enabled = false;
    psbx_server::logging::init(
        &std::env::var("PSBX_LOG_LEVEL").unwrap_or_else(|_| "warn".to_owned()),
        LogFormat::Text,
    );
    tracing::warn!(
        "BENCHMARK ENTRY: tunnel_entry serves unauthenticated TCP entries into the connector hub on 127.0.0.1; never run it against real data"
    );
    std::fs::create_dir_all(&config.data_dir)?;
    let database = Database::open(&config, Opener::Server)?;
    let store = database.store.clone();
    let first = store
        .bootstrap()?
        .context("DATA_DIR must be fresh (its database already has an account)")?;
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let url = format!("http://{}", listener.local_addr()?);
    let vault = Vault::open_or_create(&config.master_key_path())?;
    let secrets = Secrets::new(store.clone(), vault)?;

    let result: anyhow::Result<()> = actix_web::rt::System::new().block_on(async {
        let hub = Hub::default();
        let id = psbx_actors::ids::ServerId::parse("srv_bench")?;
        let host = HostChoice::Off("boxes are disabled in the tunnel benchmark".to_owned());
        let parts = app::Parts::new(store.clone(), secrets, hub.clone(), &url, id).with_host(host);
        let state = AppState::assemble(&config, parts).await?;
        let http = actix_web::HttpServer::new(move || app::build(state.clone()))
            .disable_signals()
            .listen(listener)?
            .run();
        let handle = http.handle();
        let server = actix_web::rt::spawn(http);
        say(&format!("url {url}"));
        say(&format!("key {}", first.key.secret.expose()));
        say(&format!("account {}", first.account.id));

        let router = Router::new(hub.clone(), store.clone());
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        // SIGTERM and SIGINT stop as the end of stdin does: the embedded
        // cluster is stopped either way.
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            let line = tokio::select! {
                line = lines.next_line() => match line? {
                    Some(line) => line,
                    None => break,
                },
                _ = term.recv() => break,
                _ = int.recv() => break,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            let answer = match words.as_slice() {
                ["hub", id, name, target] => match psbx_actors::ids::ConnectionId::parse(id) {
                    Ok(id) => hub_entry(hub.clone(), id, (*name).into(), (*target).into()).await,
                    Err(e) => Err(e.into()),
                },
                ["box", account, env, target] => {
                    box_entry(router.clone(), account, env, (*target).into()).await
                }
                _ => Err(anyhow::anyhow!("unknown command {line:?}")),
            };
            match answer {
                Ok(port) => say(&format!("entry {port}")),
                Err(e) => say(&format!("error {e:#}")),
            }
        }
        handle.stop(false).await;
        let _ = server.await;
        Ok(())
    });
    drop(database);
    result
}

async fn listen() -> anyhow::Result<(TcpListener, u16)> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
    let port = listener.local_addr()?.port();
    Ok((listener, port))
}

/// Accepted connections → `Hub::open` → spliced.
async fn hub_entry(
    hub: Hub,
    id: psbx_actors::ids::ConnectionId,
    name: String,
    target: String,
) -> anyhow::Result<u16> {
    let (listener, port) = listen().await?;
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let _ = socket.set_nodelay(true);
            let (hub, id, name, target) = (hub.clone(), id.clone(), name.clone(), target.clone());
            tokio::spawn(async move {
                match hub.open(&id, &name, &target).await {
                    Ok(upstream) => {
                        let _ = psbx_wire::splice::splice(upstream, socket, "bench").await;
                    }
                    Err(refusal) => {
                        tracing::warn!(code = refusal.code, reason = %refusal.reason, "refused")
                    }
                }
            });
        }
    });
    Ok(port)
}

/// Accepted connections → `env:TARGET` on a box link → the router.
async fn box_entry(
    router: Router,
    account: &str,
    env: &str,
    target: String,
) -> anyhow::Result<u16> {
    let (boxd_io, server_io) = tokio::net::UnixStream::pair()?;
    // The box link's own settings (actors/src/boxd_link.rs) on the server's
    // side, boxd's (Config::default) on the other.
    let link = MuxConfig {
        ping_interval: Duration::from_secs(2),
        liveness_timeout: Duration::from_secs(8),
        ..MuxConfig::default()
    };
    let (boxd, server) = tokio::join!(
        Session::over_io(
            boxd_io,
            Role::Server,
            MuxConfig::default(),
            Hello::new("boxd bench")
        ),
        Session::over_io(server_io, Role::Client, link, Hello::new("psbx bench")),
    );
    let (boxd, server) = (boxd?, server?);
    let handler = router.for_box(BoxRoute {
        box_id: BoxId::generate()?,
        account: AccountId::parse(account)?,
        environment: Some(env.to_owned()),
    });
    tokio::spawn(async move {
        while let Some(incoming) = server.accept().await {
            match psbx_wire::boxd::Outbound::parse(incoming.target()) {
                Ok(psbx_wire::boxd::Outbound::Env(endpoint)) => handler.spawn(incoming, endpoint),
                _ => incoming.refuse(psbx_wire::frame::code::BAD_REQUEST, "not an env: stream"),
            }
        }
    });
    let (listener, port) = listen().await?;
    let target = format!("env:{target}");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let _ = socket.set_nodelay(true);
            tokio::spawn(box_stream(boxd.clone(), socket, target.clone()));
        }
    });
    Ok(port)
}

async fn box_stream(boxd: Session, socket: TcpStream, target: String) {
    match boxd.open(&target).await {
        Ok(stream) => {
            let _ = psbx_wire::splice::splice(stream, socket, "bench").await;
        }
        Err(e) => tracing::warn!(error = %e, "refused"),
    }
}
