//! Per-box disks: a qcow2 overlay on a read-only base image, made with
//! `qemu-img` (libvirt's storage-pool API would need a pool per directory for
//! the same one command).

use crate::LibvirtError;
use std::path::Path;
use std::process::Command;

/// Creates `overlay`, a qcow2 image backed by `base` (never written), with the
/// given virtual size.
pub fn create_overlay(base: &Path, overlay: &Path, size_gb: u64) -> Result<(), LibvirtError> {
    if !base.is_file() {
        return Err(LibvirtError::Disk(format!(
            "the base image {} does not exist: build the image first",
            base.display()
        )));
    }
    let output = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(base)
        .arg(overlay)
        .arg(format!("{size_gb}G"))
        .output()
        .map_err(|e| {
            LibvirtError::Disk(format!("running qemu-img: {e} (is qemu-utils installed?)"))
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LibvirtError::Disk(format!(
            "qemu-img create {} failed: {}",
            overlay.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}
