//! The production hypervisor: a libvirt host, every call delegated as is.

use super::{Dial, Hypervisor};
use psbx_libvirt::{DiskKey, DomainInfo, DomainSpec, Host, LibvirtError};
use std::path::Path;

impl Hypervisor for Host {
    fn uri(&self) -> &str {
        Host::uri(self)
    }

    fn define(&self, spec: &DomainSpec) -> Result<(), LibvirtError> {
        Host::define(self, spec)
    }

    fn start(&self, name: &str) -> Result<(), LibvirtError> {
        Host::start(self, name)
    }

    fn suspend(&self, name: &str) -> Result<(), LibvirtError> {
        Host::suspend(self, name)
    }

    fn resume(&self, name: &str) -> Result<(), LibvirtError> {
        Host::resume(self, name)
    }

    fn managed_save(&self, name: &str) -> Result<(), LibvirtError> {
        Host::managed_save(self, name)
    }

    fn remove(&self, name: &str) -> Result<(), LibvirtError> {
        Host::remove(self, name)
    }

    fn list(&self) -> Result<Vec<DomainInfo>, LibvirtError> {
        Host::list(self)
    }

    fn memory_rss_mib(&self, name: &str) -> Result<Option<u64>, LibvirtError> {
        Host::memory_rss_mib(self, name)
    }

    fn create_overlay(
        &self,
        base: &Path,
        overlay: &Path,
        size_gb: u64,
        key: Option<&DiskKey>,
    ) -> Result<(), LibvirtError> {
        psbx_libvirt::create_overlay(base, overlay, size_gb, key)
    }

    fn set_disk_secret(&self, uuid: &str, key: &DiskKey) -> Result<(), LibvirtError> {
        Host::set_disk_secret(self, uuid, key)
    }

    fn remove_disk_secret(&self, uuid: &str) -> Result<(), LibvirtError> {
        Host::remove_disk_secret(self, uuid)
    }

    fn channel(&self, socket: &Path) -> Dial {
        super::unix_dial(socket)
    }
}
