//! psbx-connector: runs in the user's network, connects out to psbx over
//! WebSocket (TLS for https servers, through an HTTP proxy when one is
//! set) and carries the streams the server opens to the `host:port`
//! targets they name, resolved and dialed in the connector's own network.
//!
//! Configured only by environment variables (see `config` and the README);
//! logs to stderr, filtered by `RUST_LOG` (default `info`). Stops cleanly on
//! SIGTERM or SIGINT.

mod allow;
mod backoff;
mod config;
mod dial;
mod proxy;
mod reserved;
mod slots;
mod streams;
mod tls;
mod transport;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::dial::Dialer;
use crate::slots::Slots;
use crate::streams::Streams;
use crate::transport::Connector;

/// The connector's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The `User-Agent` of the server connection and of proxy requests.
pub const USER_AGENT: &str = concat!("psbx-connector/", env!("CARGO_PKG_VERSION"));

/// How long stopping may wait for sessions and streams to wind down.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The log filter when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info,hickory_proto=warn,hickory_resolver=warn";

fn main() -> ExitCode {
    if std::env::args()
        .skip(1)
        .any(|a| a == "--version" || a == "-V")
    {
        println!("psbx-connector {VERSION}");
        return ExitCode::SUCCESS;
    }
    init_logging();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            error!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            error!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config))
}

/// Whether an event may be logged whatever `RUST_LOG` says: tungstenite
/// logs the upgrade request, `Authorization` header included, at trace.
fn token_safe(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() != tracing::Level::TRACE
        || !(meta.target().starts_with("tungstenite")
            || meta.target().starts_with("tokio_tungstenite"))
}

fn init_logging() {
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::prelude::*;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter.and(filter_fn(token_safe)));
    tracing_subscriber::registry().with(layer).init();
}

async fn run(config: Config) -> ExitCode {
    let tls = if config.server.tls {
        match tls::client_config(config.ca_file.as_deref()) {
            Ok(tls) => Some(tls),
            Err(e) => {
                error!("{e}");
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    let dialer = match Dialer::new(config.dns_server, config.hosts_file.as_deref()) {
        Ok(dialer) => dialer,
        Err(e) => {
            error!("{e}");
            return ExitCode::from(2);
        }
    };
    info!(
        "psbx-connector {VERSION} starting: server {}, {} session{}, {}, {}",
        config.server.display,
        config.sessions,
        if config.sessions == 1 { "" } else { "s" },
        match &config.allow {
            Some(allow) => format!("PSBX_ALLOW lists {} address(es)", allow.count()),
            None => "no PSBX_ALLOW (the server's list applies)".to_owned(),
        },
        match &config.proxy {
            Some(proxy) => format!("through the proxy {proxy}"),
            None => "no proxy".to_owned(),
        },
    );
    let slots = Arc::new(Slots {
        connector: Connector {
            server: config.server,
            token: config.token,
            proxy: config.proxy,
            tls,
        },
        streams: Arc::new(Streams {
            dialer,
            allow: config.allow,
        }),
        shutdown: CancellationToken::new(),
        tasks: TaskTracker::new(),
    });
    let mut running = Vec::with_capacity(config.sessions);
    for slot in 1..=config.sessions {
        running.push(tokio::spawn(slots.clone().run(slot)));
    }
    let signal = stop_signal().await;
    info!("{signal}: stopping (GOAWAY and close on every session)");
    slots.shutdown.cancel();
    slots.tasks.close();
    let stopped = async {
        for slot in running {
            let _ = slot.await;
        }
        slots.tasks.wait().await;
    };
    if tokio::time::timeout(STOP_GRACE, stopped).await.is_err() {
        info!("streams still open after {STOP_GRACE:?}: exiting anyway");
    }
    ExitCode::SUCCESS
}

/// Waits for SIGTERM or SIGINT and names it.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        _ => {
            error!("cannot listen for SIGTERM/SIGINT: stop with SIGKILL");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
