//! Driving boxes through libvirt: typed domain descriptions rendered to XML
//! (`xml`) with the box's share of the host's control groups (`cgroups`),
//! qcow2 overlays on read-only base images, each LUKS-encrypted under a key
//! of its own (`disk`), the lifecycle calls on a
//! host connection (`host`), the one mapping of libvirt's states to ours
//! (`state`), and the choice between KVM and TCG (`accel`).
//!
//! Every call blocks (libvirt's API is synchronous): callers keep them off async
//! threads. This is the only crate that depends on `virt`; libvirt's default
//! error printing is silenced and its errors come back as [`LibvirtError`].

mod accel;
mod cgroups;
mod disk;
mod error;
mod host;
mod state;
mod xml;

pub use accel::{Accel, AccelChoice, probe_kvm};
pub use cgroups::Controllers;
pub use disk::{DiskKey, create_overlay};
pub use error::LibvirtError;
pub use host::{DOMAIN_PREFIX, DomainInfo, Host, HostResources};
pub use state::DomainStatus;
pub use xml::{Boot, Disk, DomainSpec, METADATA_URI, Nic, Tune};
