//! The box host this server runs, as [`crate::app::AppState::assemble`]
//! starts it: the libvirt host of the configuration (`psbx serve`), a
//! hypervisor already connected (the in-memory fake of the tests), or none,
//! with the reason box calls then answer (503). The host's streams to the
//! server get the same services in every case ([`BoxServices`]: the
//! account secrets, the router of environment streams over this replica's
//! hub, the signer of AWS identity tokens), so no caller wires them by hand.

use crate::config::Config;
use psbx_actors::box_role::BoxRole;
use psbx_actors::connectors::Hub;
use psbx_actors::host::{BoxServices, Connected, HostIdentity, HostStart, start_host, supervise};
use psbx_actors::ids::ServerId;
use psbx_actors::oidc::Issuer;
use psbx_actors::secrets::Secrets;
use psbx_actors::store::Store;

/// Where this server's boxes run.
pub enum HostChoice {
    /// The libvirt host at `uri`, with the configuration's box settings and
    /// accelerator choice.
    Libvirt { uri: String },
    /// A hypervisor already connected, with what it has (the fake in tests).
    Hypervisor(Connected),
    /// None: box calls answer 503 with this reason.
    Off(String),
}

/// The services the host's boxes reach the server through: the account
/// secrets, the router of environment streams over this replica's `hub`, and
/// the signer of the boxes' AWS identity tokens (the server's OIDC issuer).
pub fn services(
    config: &Config,
    store: &Store,
    secrets: &Secrets,
    hub: &Hub,
    issuer: &Issuer,
) -> anyhow::Result<BoxServices> {
    let box_role = BoxRole::new(
        issuer.clone(),
        store.clone(),
        config.aws.endpoint_url.clone(),
        config.aws.box_session_seconds()?,
    );
    Ok(BoxServices::new(secrets.clone(), hub.clone(), store.clone()).with_box_role(box_role))
}

/// Starts the chosen host (recording it, reconciling and adopting its boxes,
/// starting its supervisor), or says why this server has none.
pub async fn start(
    config: &Config,
    choice: HostChoice,
    store: Store,
    server_id: &ServerId,
    services: BoxServices,
) -> anyhow::Result<Result<HostStart, String>> {
    let settings = config.boxes.settings(config.shared_dir())?;
    let mut identity = HostIdentity {
        name: config.cluster.host_name()?,
        server_id: server_id.clone(),
        // A hypervisor handed over (the tests' fake) lives as long as this
        // process: no previous life of it to recognise.
        node_key: server_id.to_string(),
        lease: config.cluster.lease()?,
    };
    let (uri, started) = match choice {
        HostChoice::Off(why) => return Ok(Err(why)),
        HostChoice::Libvirt { uri } => {
            identity.node_key = node_key(&config.data_dir)?;
            let accel = config.boxes.accel;
            let started = start_host(store, settings, uri.clone(), accel, identity, services);
            (uri, started.await)
        }
        HostChoice::Hypervisor(connected) => {
            let uri = connected.host.uri().to_owned();
            (
                uri,
                supervise(connected, store, settings, identity, services).await,
            )
        }
    };
    Ok(started.map_err(|e| {
        tracing::error!(%uri, error = %e, "boxes are unavailable");
        format!("boxes are unavailable on this server: {e}")
    }))
}

/// This node's key in its data directory (`node.key`, made on first use,
/// mode 0600): what tells a crashed node's next start that the lease it
/// finds is its own (`store::HostClaim::node_key`).
fn node_key(data_dir: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("node.key");
    match std::fs::read_to_string(&path) {
        Ok(key) if !key.trim().is_empty() => return Ok(key.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    std::fs::create_dir_all(data_dir)?;
    let key = psbx_actors::ids::random_token(32)?;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(key.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(key)
}
