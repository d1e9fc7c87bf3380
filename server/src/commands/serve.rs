//! `psbx serve`: open the database (starting the embedded cluster if that is the
//! configuration), make the first account and key on an empty database, register
//! this replica, and serve HTTP(S) until SIGTERM or SIGINT; then stop cleanly.

use crate::app::{self, AppState};
use crate::banner;
use crate::config::Config;
use crate::database::{Database, Opener};
use crate::host::HostChoice;
use crate::tls;
use actix_web::HttpServer;
use anyhow::Context;
use psbx_actors::connectors::Hub;
use psbx_actors::connectors::egress::Egress;
use psbx_actors::secrets::Secrets;
use psbx_actors::secrets::vault::Vault;
use psbx_actors::settings::BoxSettings;
use psbx_actors::store::Store;
use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

/// How often a replica refreshes its row in `servers`.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How long in-flight requests may run on after a stop signal.
const SHUTDOWN_GRACE: u64 = 10;

pub fn run(config: Config) -> anyhow::Result<()> {
    fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data directory {}", config.data_dir.display()))?;
    let _lock = lock_data_dir(&config.data_dir)?;
    protect_from_the_oom_killer();
    crate::shared_dir::prepare(&config.layout())?;
    let tls = tls::server_config(&config)?;
    let listener = TcpListener::bind(config.listen)
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let bound = listener.local_addr()?;
    let url = config.public_url_for(bound);
    psbx_actors::public_url::warn_if_insecure(&url, "starting");

    let database = Database::open(&config, Opener::Server)?;
    tracing::info!(database = %database.location, "database ready");
    let store = database.store.clone();
    if let Some(first) = store.bootstrap()? {
        print_now(&banner::first_key(&first, &url));
    }
    let hostname = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned());
    let server = store.register_server(&hostname, env!("CARGO_PKG_VERSION"))?;
    let box_settings = config.boxes.settings(config.shared_dir())?;
    let vault = Vault::open_or_create(&config.master_key_path())?;
    let node = crate::cluster::bind(&config, &store, &vault, &server.id)?;
    let secrets = Secrets::new(store.clone(), vault)?;

    if config.boxes.enabled {
        at_rest(&box_settings, config.boxes.require_encryption)?;
        if box_settings.network {
            warn_of_only_ranges_the_host_hides(&box_settings);
        }
    }

    let result: anyhow::Result<()> = actix_web::rt::System::new().block_on(async {
        let hub = Hub::with_limits(config.connectors.limits());
        let host = if config.boxes.enabled {
            HostChoice::Libvirt {
                uri: config.libvirt_uri.clone(),
            }
        } else {
            HostChoice::Off(
                "boxes are disabled in this server's configuration (boxes.enabled)".to_owned(),
            )
        };
        let mut parts =
            app::Parts::new(store.clone(), secrets, hub.clone(), &url, server.id.clone())
                .with_host(host);
        let mut peer_socket = None;
        if let Some(node) = node {
            parts = parts.with_peers(node.peers.clone());
            let listener = tokio::net::TcpListener::from_std(node.listener)?;
            actix_web::rt::spawn(node.peers.clone().listen(listener));
            peer_socket = Some(node.socket);
        }
        let state = AppState::assemble(&config, parts).await?;
        let boxes = state.boxes.clone();
        let shots = state.shots.clone();
        // Our own signal handling, installed before we say we listen: a stop
        // signal arriving at any moment after that is a clean shutdown.
        let mut http = HttpServer::new(move || app::build(state.clone()))
            .on_connect(crate::cluster::forward::on_connect)
            .shutdown_timeout(SHUTDOWN_GRACE)
            .disable_signals();
        if let Some(workers) = config.http_workers {
            http = http.workers(workers.max(1));
        }
        let mut http = match tls {
            Some(tls) => http.listen_rustls_0_23(listener, tls)?,
            None => http.listen(listener)?,
        };
        if let Some(socket) = peer_socket {
            http = http.listen_uds(socket)?;
        }
        let http = http.run();
        let stop_on_signal = stop_on_signal(http.handle(), hub.clone(), boxes.clone())?;
        let (stop_heartbeat, heartbeat_stops) = tokio::sync::oneshot::channel();
        let heartbeat = actix_web::rt::spawn(heartbeat(
            store.clone(),
            server.id.clone(),
            hub.egress().clone(),
            shots,
            heartbeat_stops,
        ));
        tracing::info!(%url, replica = %server.id, "serving");
        print_now(&banner::listening(&url));
        let done = http.await;
        stop_on_signal.abort();
        // The heartbeat ends between ticks: one cut off inside its blocking
        // database calls would leave them running as the process exits.
        let _ = stop_heartbeat.send(());
        if let Err(e) = heartbeat.await {
            tracing::warn!(error = %e, "the heartbeat task failed");
        }
        boxes.shutdown().await;
        // The box streams are closed now: what they sent is counted.
        if let Err(e) = hub.egress().flush(&store).await {
            tracing::warn!(error = %e, "could not store the boxes' egress");
        }
        done.context("the HTTP server failed")
    });
    tracing::info!("stopping");
    if let Err(e) = store.stop_server(&server.id) {
        tracing::warn!(error = %e, "could not mark this replica stopped");
    }
    drop(database);
    result
}

/// Stops the HTTP server gracefully on SIGTERM or SIGINT; the handlers are in
/// place when this returns.
fn stop_on_signal(
    server: actix_web::dev::ServerHandle,
    hub: Hub,
    boxes: std::sync::Arc<psbx_actors::boxes::Boxes>,
) -> std::io::Result<actix_web::rt::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(actix_web::rt::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
        // Connectors move to another replica (or reconnect when this one is
        // back) instead of holding the graceful stop open.
        hub.close_all("this psbx server is stopping");
        // Other nodes place no new box here while requests in flight finish.
        boxes.stop_placing().await;
        server.stop(true).await;
    }))
}

/// Every `HEARTBEAT`: this replica's row, the connector sessions of gone
/// replicas, old takeover links, the egress counted since the last one, and
/// the shots of boxes that stopped (but those reviews keep); until `stop`,
/// which it heeds between ticks.
async fn heartbeat(
    store: Store,
    id: psbx_actors::ids::ServerId,
    egress: Egress,
    shots: psbx_actors::shots::Shots,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut tick = actix_web::rt::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => return,
        }
        match shots.sweep().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "deleted the shots of stopped boxes"),
            Err(e) => {
                tracing::warn!(error = %e, "could not delete the shots of stopped boxes; trying again next heartbeat")
            }
        }
        if let Err(e) = egress.flush(&store).await {
            tracing::warn!(error = %e, "could not store the boxes' egress; kept for the next heartbeat");
        }
        let (store, id) = (store.clone(), id.clone());
        // The connector sessions of replicas that are gone are forgotten.
        match actix_web::web::block(move || {
            store.heartbeat_server(&id)?;
            // Takeover links used or expired a day ago are deleted.
            store.prune_takeover_links()?;
            store.prune_connector_sessions().map(|_| ())
        })
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(e) => tracing::warn!(error = %e, "heartbeat task failed"),
        }
    }
}

fn print_now(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// One `psbx serve` per data directory: a second would share (and stop) the
/// first one's database cluster. The lock is released when the process ends,
/// however it ends.
/// What the kernel's OOM killer weighs psbx (and the embedded PostgreSQL,
/// which inherits it) by: boxes' QEMU processes, which hold most of the
/// host's memory, go first, and the server and the database that every
/// tenant needs last. Lowering it needs CAP_SYS_RESOURCE: as root without it
/// (some containers) the log warns; as another user the default stays
/// quietly (debug).
const OOM_SCORE_ADJ: &str = "-900";

fn protect_from_the_oom_killer() {
    match fs::write("/proc/self/oom_score_adj", OOM_SCORE_ADJ) {
        Ok(()) => tracing::debug!(
            oom_score_adj = OOM_SCORE_ADJ,
            "protected from the OOM killer"
        ),
        Err(e) if nix::unistd::geteuid().is_root() => tracing::warn!(
            error = %e,
            "psbx could not lower its oom_score_adj (no CAP_SYS_RESOURCE?): under memory \
             pressure the OOM killer may pick psbx or PostgreSQL before a box"
        ),
        Err(e) => tracing::debug!(error = %e, "oom_score_adj left as it was"),
    }
}

fn lock_data_dir(dir: &Path) -> anyhow::Result<nix::fcntl::Flock<fs::File>> {
    let path = dir.join("serve.lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(file, errno)| {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            drop(file);
            anyhow::anyhow!(
                "another `psbx serve` (pid {}) is using the data directory {}: stop it, \
                 or give this one its own --data-dir ({errno})",
                holder.trim(),
                dir.display()
            )
        })?;
    locked.set_len(0)?;
    write!(locked, "{}", std::process::id())?;
    Ok(locked)
}

/// Warns of each `boxes.egress.only` range boxes cannot reach because the
/// host is attached to it (its networks are denied to boxes), unless
/// `boxes.egress.allow` opens it.
fn warn_of_only_ranges_the_host_hides(settings: &BoxSettings) {
    use psbx_actors::boxnet::routes;
    if settings.egress.only.is_empty() {
        return;
    }
    let attached = match routes::attached() {
        Ok(attached) => attached,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the host's routes to check boxes.egress.only against its networks");
            return;
        }
    };
    for (only, network) in settings.egress.only_hidden_by_host(&attached) {
        tracing::warn!(
            "boxes.egress.only lists {only}, but this host is attached to {network}: boxes cannot \
             reach the host's own networks, so {only} stays unreachable from boxes where it overlaps \
             {network}; list it in boxes.egress.allow too to open it"
        );
    }
}

/// Says whether what boxes keep on the host (frozen memory, and disks when
/// psbx does not encrypt them itself) is on encrypted volumes
/// (`host::at_rest`); refuses to go on when it is not and the configuration
/// requires it.
fn at_rest(settings: &BoxSettings, required: bool) -> anyhow::Result<()> {
    use psbx_actors::host::at_rest::{AtRest, check, to_check};
    if settings.encrypt_disks {
        tracing::info!("each box's disk is encrypted (LUKS) under a key of its own");
    }
    let mut clear = Vec::new();
    for (dir, holds) in to_check(&settings.boxes_dir, settings.encrypt_disks) {
        match check(&dir) {
            AtRest::Encrypted(how) => {
                tracing::info!(dir = %dir.display(), "{holds}: encrypted at rest: {how}");
            }
            AtRest::Clear(on) => clear.push(format!("{holds} in {}, on {on}", dir.display())),
        }
    }
    if clear.is_empty() {
        return Ok(());
    }
    let clear = clear.join("; ");
    if required {
        anyhow::bail!(
            "boxes.require_encryption is set, but these are not encrypted at rest: {clear}. Put \
             those directories on a dm-crypt (LUKS) volume or an fscrypt directory (the README's \
             \"Encryption at rest\"), or set boxes.require_encryption = false"
        );
    }
    tracing::warn!(
        "NOT encrypted at rest: {clear}. Put those directories on a dm-crypt (LUKS) volume or an \
         fscrypt directory, and set boxes.require_encryption = true to refuse to start without one"
    );
    Ok(())
}
