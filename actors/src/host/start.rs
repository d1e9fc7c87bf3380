//! Bringing a host under supervision: connect, settle KVM or TCG, take the
//! host's lease (`lease.rs`), reconcile, adopt the live boxes, start the
//! supervisor (and its pool).

use super::reconcile::{self, Adopt};
use super::registry::Registry;
use super::switch::Switch;
use super::{HostParts, HostSupervisor};
use crate::blocking::blocking;
use crate::box_role::BoxRole;
use crate::boxnet::BoxNetwork;
use crate::connectors::{Hub, Router};
use crate::error::{BoxError, io_error};
use crate::hypervisor::Hypervisor;
use crate::ids::ServerId;
use crate::jail::{Jails, UidRange};
use crate::machine::meminfo::HostMemory;
use crate::machine::{HostFacts, HostLease, Machine};
use crate::secrets::Secrets;
use crate::settings::BoxSettings;
use crate::store::Store;
use actix::prelude::*;
use psbx_libvirt::{Accel, AccelChoice, Boot, DomainSpec, Host, HostResources};
use std::sync::Arc;
use std::time::Duration;

/// How long `accel = "auto"` gives KVM to boot the box kernel.
const KVM_PROBE: Duration = Duration::from_secs(20);
/// How long an adopted running box has to say hello again.
const ADOPT_HELLO: Duration = Duration::from_secs(30);

/// A supervised host: its supervisor, and its parts (the façades find a
/// box's actor in `registry`).
pub struct HostStart {
    pub supervisor: Addr<HostSupervisor>,
    pub machine: Arc<Machine>,
    pub registry: Arc<Registry>,
    pub switch: Arc<Switch>,
}

/// A hypervisor connected to, with what start-up learned of it.
pub struct Connected {
    pub host: Arc<dyn Hypervisor>,
    pub resources: HostResources,
    pub accel: Accel,
}

/// What boxes' streams to the server need besides the host: the account
/// secrets (a box's mask after a restart), the router of environment
/// streams, and the signer of AWS identity tokens.
pub struct BoxServices {
    pub secrets: Secrets,
    pub router: Router,
    pub box_role: Option<BoxRole>,
}

impl BoxServices {
    /// The services over `hub`'s connector sessions, without a box role
    /// (no AWS identity for boxes).
    pub fn new(secrets: Secrets, hub: Hub, store: Store) -> Self {
        Self {
            secrets,
            router: Router::new(hub, store),
            box_role: None,
        }
    }

    /// With the signer of the boxes' AWS identity tokens.
    pub fn with_box_role(self, box_role: BoxRole) -> Self {
        Self {
            box_role: Some(box_role),
            ..self
        }
    }
}

/// Which host a node supervises, as whom, and how long its lease lasts
/// between renewals (DESIGN.md §8).
#[derive(Debug, Clone)]
pub struct HostIdentity {
    /// The host's name (`cluster.host`): its row in `hosts`.
    pub name: String,
    /// This node.
    pub server_id: ServerId,
    /// This node's key, kept in its data directory across restarts
    /// (`store::HostClaim::node_key`).
    pub node_key: String,
    /// How long the lease lasts without a renewal (`cluster.lease`).
    pub lease: Duration,
}

pub async fn start_host(
    store: Store,
    settings: BoxSettings,
    uri: String,
    accel: AccelChoice,
    identity: HostIdentity,
    services: BoxServices,
) -> Result<HostStart, BoxError> {
    let probe_settings = settings.clone();
    let (host, resources, accel) = blocking(move || {
        let host = Host::connect(&uri)?;
        warn_if_kvm_unreachable();
        say_confinement(&host);
        let mut resources = host.resources()?;
        // libvirt's figure is a NUMA node's (about half of this kind of
        // machine): the kernel's is what boxes are admitted against.
        let kernel = HostMemory::read().map_err(|e| BoxError::NoHost(e.to_string()))?;
        tracing::info!(
            kernel_total_mib = kernel.total_mib,
            kernel_available_mib = kernel.available_mib,
            libvirt_node_mib = resources.memory_mib,
            "host memory (boxes are admitted against the kernel's figures)"
        );
        resources.memory_mib = kernel.total_mib;
        let accel = choose_accel(&host, accel, &probe_settings);
        Ok::<_, BoxError>((host, resources, accel))
    })
    .await?;
    let host = Arc::new(host);
    let connected = Connected {
        host,
        resources,
        accel,
    };
    supervise(connected, store, settings, identity, services).await
}

/// [`start_host`] after the connection: record the host, reconcile, adopt
/// the live boxes, start the supervisor (and its pool).
pub async fn supervise(
    connected: Connected,
    store: Store,
    settings: BoxSettings,
    identity: HostIdentity,
    services: BoxServices,
) -> Result<HostStart, BoxError> {
    let Connected {
        host,
        resources,
        accel,
    } = connected;
    let accel_name = match accel {
        Accel::Kvm => "kvm",
        Accel::Tcg => "tcg",
    };
    let taken = super::lease::take(
        &store,
        &identity,
        host.uri(),
        accel_name,
        (resources.cpus, resources.memory_mib),
    )
    .await?;
    let owner = taken.owner;
    let lease = Arc::new(HostLease::held(&identity.name, taken.epoch));
    // Each box's QEMU gets a uid of its own where psbx can hand them out.
    let jails = if host.uri() == "qemu:///system" {
        let (inst, dir) = (owner.clone(), settings.boxes_dir.clone());
        let jails = blocking(move || Jails::new(&inst, &dir).map_err(BoxError::from)).await?;
        let range = jails.range();
        tracing::info!(
            uids = %format!("{}-{}", range.first, range.last),
            gid = jails.gid(),
            "each box's QEMU runs as a uid of its own"
        );
        Some(Arc::new(jails))
    } else {
        None
    };
    let network = if settings.network {
        let (inst, uri) = (owner.clone(), host.uri().to_owned());
        let (policy, resolvers) = (settings.egress.clone(), settings.resolvers.clone());
        let uids = UidRange::of(&owner);
        let network = blocking(move || {
            let network = BoxNetwork::new(&inst, &uri, uids, policy, resolvers)?;
            network.ensure()?;
            Ok::<_, BoxError>(network)
        })
        .await?;
        tracing::info!(
            table = %network.table(),
            resolvers = ?network.resolvers(),
            "box network rules in place"
        );
        Some(Arc::new(network))
    } else {
        None
    };
    let facts = HostFacts {
        accel,
        server_id: identity.server_id.clone(),
        name: identity.name.clone(),
        owner,
        lease,
        cpus: resources.cpus,
        memory_mib: resources.memory_mib,
        network,
        jails,
    };
    let BoxServices {
        secrets,
        router,
        box_role,
    } = services;
    let machine = Machine::new(host, store, settings, facts, secrets);
    let registry = Arc::new(Registry::default());
    let switch = Arc::new(Switch {
        machine: machine.clone(),
        router,
        box_role,
        links: Arc::default(),
        registry: registry.clone(),
    });
    let parts = HostParts {
        machine,
        registry,
        switch,
    };
    let reconciling = parts.machine.clone();
    let adopt = blocking(move || reconcile::reconcile(&reconciling)).await?;
    for box_ in adopt {
        adopt_box(&parts, box_).await;
    }
    tracing::info!(
        host = %parts.machine.name,
        uri = %parts.machine.host.uri(),
        accel = accel_name,
        cpus = resources.cpus,
        memory_mib = resources.memory_mib,
        "supervising libvirt host"
    );
    let supervisor = HostSupervisor::new(parts.clone(), identity.lease).start();
    let HostParts {
        machine,
        registry,
        switch,
    } = parts;
    Ok(HostStart {
        supervisor,
        machine,
        registry,
        switch,
    })
}

async fn adopt_box(parts: &HostParts, adopt: Adopt) {
    match adopt {
        Adopt::Frozen(record) => {
            let masker = parts.switch.masker_for(&record).await;
            parts.new_actor(record, None, masker).start();
        }
        Adopt::Running(record) => {
            let link = parts.switch.link_of(&record);
            // A row that still says frozen (the server died during a thaw)
            // is recorded running once boxd says hello.
            let result = parts
                .machine
                .await_hello_and_run(record.clone(), &link, ADOPT_HELLO, "")
                .await;
            match result {
                Ok((record, hello)) => {
                    tracing::info!(box_id = %record.id, "adopted a running box");
                    let masker = parts.switch.masker_for(&record).await;
                    parts.new_actor(record, Some((link, hello)), masker).start();
                }
                Err(e) => {
                    drop(link);
                    let (c, r) = (parts.machine.clone(), record.clone());
                    let reason = format!("boxd did not answer after the server restarted: {e}");
                    if let Err(e) = blocking(move || c.fail_box(&r, &reason)).await {
                        tracing::error!(box_id = %record.id, error = %e, "could not fail a box");
                    }
                }
            }
        }
    }
}

/// Says at start how libvirt confines each box's QEMU beyond its own uid:
/// with AppArmor or SELinux (libvirt's `security_driver`), or, clearly, with
/// neither (review-2 L10).
fn say_confinement(host: &Host) {
    match host.security_models() {
        Ok(models) => match models.iter().find(|m| *m == "apparmor" || *m == "selinux") {
            Some(driver) => tracing::info!(
                security_models = ?models,
                "libvirt confines each box's QEMU with {driver}, besides its own uid"
            ),
            None => tracing::warn!(
                security_models = ?models,
                "libvirt on this host confines QEMU with neither AppArmor nor SELinux (no security_driver \
                 of either kind): a box whose QEMU is escaped is held only by its own uid, QEMU's seccomp \
                 filter and the host's network rules. For a second wall, install AppArmor (apt install \
                 apparmor, with the kernel's apparmor=1), set security_driver = \"apparmor\" in \
                 /etc/libvirt/qemu.conf and restart libvirtd"
            ),
        },
        Err(e) => tracing::warn!(
            error = %e,
            "could not read libvirt's security drivers: whether QEMU is confined by AppArmor or SELinux is unknown"
        ),
    }
}

/// libvirt re-probes QEMU (tens of seconds) before every domain start while
/// /dev/kvm exists but its QEMU user cannot open it: say so once, clearly.
fn warn_if_kvm_unreachable() {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata("/dev/kvm") else {
        return;
    };
    let Ok(Some(user)) = nix::unistd::User::from_name("libvirt-qemu") else {
        return;
    };
    let Ok(name) = std::ffi::CString::new(user.name.clone()) else {
        return;
    };
    let groups = nix::unistd::getgrouplist(&name, user.gid).unwrap_or_default();
    let mode = meta.mode();
    let usable = (meta.uid() == user.uid.as_raw() && mode & 0o600 == 0o600)
        || (groups.iter().any(|g| g.as_raw() == meta.gid()) && mode & 0o060 == 0o060)
        || mode & 0o006 == 0o006;
    if !usable {
        tracing::warn!(
            "/dev/kvm is not usable by libvirt-qemu (owner {}:{}, mode {:o}): libvirt will re-probe \
             QEMU before every box start, which takes seconds; run scripts/setup (group kvm, mode 0660)",
            meta.uid(),
            meta.gid(),
            mode & 0o777
        );
    }
}

/// KVM when asked, TCG when asked; `auto` boots the box kernel under KVM for a
/// bounded time and falls back to TCG unless boxd came up.
fn choose_accel(host: &Host, choice: AccelChoice, settings: &BoxSettings) -> Accel {
    match choice {
        AccelChoice::Kvm => Accel::Kvm,
        AccelChoice::Tcg => Accel::Tcg,
        AccelChoice::Auto => match cached_probe(host, settings) {
            Ok((true, how)) => {
                tracing::info!("KVM booted the box kernel{how}: boxes run with KVM");
                Accel::Kvm
            }
            Ok((false, how)) => {
                tracing::warn!(
                    "KVM is unavailable or did not boot the box kernel within {}s{how}: boxes run under \
                     TCG (software emulation, slower); set accel = \"tcg\" to skip this check",
                    KVM_PROBE.as_secs()
                );
                Accel::Tcg
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not probe KVM: boxes run under TCG");
                Accel::Tcg
            }
        },
    }
}

/// What the probe's result depends on: the host kernel, whether /dev/kvm exists,
/// and the QEMU binary. The same key means the same answer.
fn probe_key() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let qemu = std::fs::metadata("/usr/bin/qemu-system-x86_64")
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let kvm = std::path::Path::new("/dev/kvm").exists();
    format!("kernel={} kvm={kvm} qemu={qemu}", kernel.trim())
}

/// The probe's answer, from `<boxes_dir>/kvm-probe.json` when it was taken on
/// this same host setup (a KVM that hangs costs the full probe time at every
/// start otherwise); with a note saying where the answer came from.
fn cached_probe(host: &Host, settings: &BoxSettings) -> Result<(bool, String), BoxError> {
    let file = settings.boxes_dir.join("kvm-probe.json");
    let key = probe_key();
    if let Ok(text) = std::fs::read_to_string(&file)
        && let Ok(cached) = serde_json::from_str::<serde_json::Value>(&text)
        && cached["key"] == key.as_str()
        && let Some(kvm) = cached["kvm"].as_bool()
    {
        return Ok((
            kvm,
            format!(
                " (result kept in {}; delete it to probe again)",
                file.display()
            ),
        ));
    }
    let (kvm, how) = match probe(host, settings) {
        Ok(kvm) => (kvm, String::new()),
        // QEMU failing under KVM (e.g. aborting on an MSR write) is a "no" too.
        Err(BoxError::Libvirt(e)) => (false, format!(" (the probe failed: {e})")),
        Err(e) => return Err(e),
    };
    let record = serde_json::json!({ "key": key, "kvm": kvm });
    if let Err(e) = std::fs::create_dir_all(&settings.boxes_dir)
        .and_then(|()| std::fs::write(&file, record.to_string()))
    {
        tracing::warn!(error = %e, "could not keep the KVM probe's result");
    }
    Ok((kvm, how))
}

fn probe(host: &Host, settings: &BoxSettings) -> Result<bool, BoxError> {
    let image = crate::image::Image::load(&settings.images_dir, &settings.image)
        .map_err(|e| BoxError::NoHost(e.to_string()))?;
    let dir = settings
        .boxes_dir
        .join(format!("kvm-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io_error(format!("making {}", dir.display())))?;
    crate::machine::allow_qemu(&dir)?;
    let spec = DomainSpec {
        name: format!("psbx-kvm-probe-{}", std::process::id()),
        accel: Accel::Kvm,
        vcpus: 1,
        memory_mib: 256,
        tune: None,
        boot: Boot::Kernel {
            kernel: image.kernel,
            initrd: image.initrd,
            cmdline: image.cmdline,
        },
        disk: None,
        channel_socket: dir.join("boxd.sock"),
        console_log: None,
        nic: None,
        run_as: None,
        owner: "kvm-probe".to_owned(),
    };
    let result = psbx_libvirt::probe_kvm(
        host,
        &spec,
        &dir.join("console.log"),
        "boxd ready",
        KVM_PROBE,
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(result?)
}
