//! The hypervisor as the actors see it: the lifecycle calls `HostSupervisor`
//! and `BoxActor` make on a host, and how the server reaches boxd on a box's
//! channel. [`psbx_libvirt::Host`] is the one used in production
//! (`libvirt.rs`, plain delegation); with the `test-util` feature,
//! `fake::FakeHypervisor` keeps domains in memory and answers on their
//! channels as boxd would, so the actors' timers, pool and adoption are tested
//! in-process (`tests/lifecycle.rs`) without VMs.
//!
//! Every method but [`Hypervisor::channel`] blocks, as libvirt's calls do:
//! callers keep them off async threads.

#[cfg(feature = "test-util")]
pub mod fake;
mod libvirt;

use psbx_libvirt::{DiskKey, DomainInfo, DomainSpec, LibvirtError};

/// How a host runs boxes' CPUs (`AccelChoice` as configured, `Accel` as
/// chosen) and what it has (`HostResources`): libvirt's types, which the
/// server's configuration and `host::Connected` name. Re-exported here so
/// that the server depends on the actors alone and the layering of DESIGN.md
/// §2 (server → actors → libvirt) holds.
pub use psbx_libvirt::{Accel, AccelChoice, HostResources};
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to boxd's end of a box's channel.
pub trait ChannelIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> ChannelIo for T {}

/// One connection to a box's channel.
pub type ChannelStream = Box<dyn ChannelIo>;

/// Opens a new connection to a box's channel; the link to boxd calls it for
/// every session (it may fail while the domain is not running yet).
pub type Dial =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = io::Result<ChannelStream>> + Send>> + Send + Sync>;

/// The calls the actors make on a host's hypervisor (see
/// [`psbx_libvirt::Host`] for what each does).
pub trait Hypervisor: Send + Sync {
    /// The host's URI, which the store's box rows name.
    fn uri(&self) -> &str;
    /// Defines a persistent domain.
    fn define(&self, spec: &DomainSpec) -> Result<(), LibvirtError>;
    /// Starts a defined domain; one with a managed save resumes from it.
    fn start(&self, name: &str) -> Result<(), LibvirtError>;
    /// Pauses the vCPUs; memory stays in the QEMU process.
    fn suspend(&self, name: &str) -> Result<(), LibvirtError>;
    fn resume(&self, name: &str) -> Result<(), LibvirtError>;
    /// Saves memory to disk and stops the domain; `start` restores it.
    fn managed_save(&self, name: &str) -> Result<(), LibvirtError>;
    /// Destroys and undefines the domain with its managed save; a domain
    /// that is gone is fine.
    fn remove(&self, name: &str) -> Result<(), LibvirtError>;
    /// Every `psbx-` domain, defined or running.
    fn list(&self) -> Result<Vec<DomainInfo>, LibvirtError>;
    /// The resident memory of a running domain's QEMU process, in MiB;
    /// `None` when it does not run or the hypervisor cannot tell (the fake).
    fn memory_rss_mib(&self, _name: &str) -> Result<Option<u64>, LibvirtError> {
        Ok(None)
    }
    /// Makes a box's qcow2 overlay on its image's base disk, LUKS-encrypted
    /// under `key` when there is one.
    fn create_overlay(
        &self,
        base: &Path,
        overlay: &Path,
        size_gb: u64,
        key: Option<&DiskKey>,
    ) -> Result<(), LibvirtError>;
    /// Gives the hypervisor a disk's key as secret `uuid`, which a domain's
    /// disk names (`Disk::key_secret`); it must be there when the domain
    /// starts or is restored.
    fn set_disk_secret(&self, uuid: &str, key: &DiskKey) -> Result<(), LibvirtError>;
    /// Forgets secret `uuid`; one that is gone is fine.
    fn remove_disk_secret(&self, uuid: &str) -> Result<(), LibvirtError>;
    /// How to reach boxd on the channel of the domain whose `channel_socket`
    /// is `socket`.
    fn channel(&self, socket: &Path) -> Dial;
}

/// Connections to the unix socket QEMU listens on for a box's virtio-serial
/// port.
pub fn unix_dial(socket: &Path) -> Dial {
    let socket = socket.to_owned();
    Arc::new(move || {
        let socket = socket.clone();
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&socket).await?;
            Ok(Box::new(stream) as ChannelStream)
        })
    })
}
