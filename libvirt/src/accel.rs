//! KVM or TCG. On some hosts `/dev/kvm` exists and libvirt offers the `kvm`
//! domain type, yet a KVM guest hangs at boot (nested virtualisation that does
//! not work). `auto` therefore proves KVM with a bounded probe boot of the box
//! kernel and falls back to TCG.

use crate::{DomainSpec, Host, LibvirtError};
use std::path::Path;
use std::time::{Duration, Instant};

/// The accelerator a domain runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    /// QEMU's software emulation (libvirt domain type `qemu`).
    Tcg,
}

impl Accel {
    pub fn domain_type(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "qemu",
        }
    }
}

/// The configured choice: `auto` (prove KVM with a short boot, else TCG),
/// `kvm` or `tcg` in the server's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    Auto,
    Kvm,
    Tcg,
}

/// Boots `spec` (a box kernel with its console written to `console_log`) as a
/// transient KVM domain and waits up to `timeout` for `marker` on the console.
/// Returns false, without booting, when /dev/kvm or libvirt's kvm type is
/// missing. The probe domain is always destroyed.
pub fn probe_kvm(
    host: &Host,
    spec: &DomainSpec,
    console_log: &Path,
    marker: &str,
    timeout: Duration,
) -> Result<bool, LibvirtError> {
    if !Path::new("/dev/kvm").exists() || !host.offers_kvm()? {
        return Ok(false);
    }
    let mut spec = spec.clone();
    spec.accel = Accel::Kvm;
    spec.console_log = Some(console_log.to_owned());
    let _ = std::fs::remove_file(console_log);
    host.create_transient(&spec)?;
    let deadline = Instant::now() + timeout;
    let mut booted = false;
    while Instant::now() < deadline {
        let console = std::fs::read(console_log).unwrap_or_default();
        if console
            .windows(marker.len())
            .any(|w| w == marker.as_bytes())
        {
            booted = true;
            break;
        }
        if host.status(&spec.name)?.is_none() {
            break; // it died
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    host.destroy(&spec.name)?;
    Ok(booted)
}
