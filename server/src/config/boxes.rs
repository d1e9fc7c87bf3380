//! `[boxes]`: the box settings as an operator writes them (sizes, pool, idle and
//! keep times, disk and memory margins, the image, the accelerator, `[boxes.egress]`),
//! their defaults, and [`BoxesConfig::settings`], the checked `BoxSettings` the actors
//! run with.

use super::ConfigError;
use super::sections::bounded;
use psbx_actors::boxnet::policy::EgressPolicy;
use psbx_actors::hypervisor::AccelChoice;
use psbx_actors::settings::{BoxSettings, SIZES, Unit};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Boxes: the image, sizes, timers, the pool and the host's limits.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BoxesConfig {
    /// Run boxes on `libvirt_uri`; false serves the API without boxes.
    pub enabled: bool,
    /// `auto` (prove KVM with a short boot, else TCG), `kvm` or `tcg`.
    pub accel: AccelChoice,
    /// Images: `<images_dir>/<image>/manifest.json`; default `<shared_dir>/images`.
    pub images_dir: Option<PathBuf>,
    /// The image boxes start from (`scripts/image/<name>` builds it).
    pub image: String,
    /// One size unit; boxes are 1, 2, 4 or 8 units.
    pub unit_vcpus: u32,
    pub unit_memory_mib: u64,
    pub unit_disk_gb: u64,
    /// Freeze after this long without activity.
    pub idle_freeze: String,
    /// Stop this long after the last activity unless `keep` says otherwise...
    pub default_keep: String,
    /// ...up to this (at most 7d, the spec's longest keep).
    pub max_keep: String,
    /// A frozen box is stopped after this long frozen, whatever its keep
    /// (at most 10d, the spec's safety net for saved memory).
    pub max_frozen: String,
    /// Pre-booted boxes kept ready per pooled size, and which sizes have a pool.
    pub pool_size: usize,
    pub pool_unit_sizes: Vec<u32>,
    /// vCPUs promised to boxes holding host memory (pooled, booting,
    /// running; frozen ones give theirs back) may reach this multiple of the
    /// host's CPUs. 16.0: idle boxes take little CPU, and on a 2-core host
    /// that is 16 boxes of the default 2-vCPU unit.
    pub cpu_overcommit: f64,
    /// Memory promised to those boxes may reach this multiple of the host's
    /// memory (the kernel's MemTotal). 8.0: boxes are admitted by what they
    /// use (below), which caps them first; this only bounds the promises
    /// (24 boxes of the default 8 GiB unit on a 24 GiB host).
    pub memory_overcommit: f64,
    /// Memory (MiB) a new box must leave available (MemAvailable) once it has
    /// its full unit, after what booting boxes may still take: running boxes
    /// count what their QEMU processes use, booting ones their full unit.
    pub memory_margin_mib: u64,
    /// When the host's MemAvailable falls under this (MiB), the idlest running
    /// boxes are frozen (their memory saved to disk) until it is back above;
    /// 0 never freezes for pressure. Keep it under `memory_margin_mib`, or
    /// admitting a box may freeze another.
    pub pressure_available_mib: u64,
    /// Disk (GiB) under `<shared_dir>/boxes` never promised to boxes: room for the
    /// embedded PostgreSQL and logs on the same file system.
    pub disk_margin_gb: u64,
    /// Disk boxes may still write (each up to `unit_disk_gb` × size plus its
    /// memory for a freeze) may reach this multiple of the free space above
    /// the margin. 1.0 (the default) never promises more than exists: every
    /// box can fill its disk. Overlays stay thin (a box starts in
    /// milliseconds whatever its size); a higher figure fits more boxes on a
    /// small disk, and then boxes filling their overlays are caught by the
    /// disk-pressure check, which freezes the ones writing most before the
    /// free space falls under `disk_margin_gb`. A start is also refused when
    /// the managed saves of the boxes holding memory (what each uses) and its
    /// own would not fit in the free space above the margin, so freezes
    /// always have room.
    pub disk_overcommit: f64,
    /// The most one size unit may write to its disk per second, in MiB (a
    /// size-4 box: 4×); 0: unthrottled. Bounds how fast a box can fill the
    /// host's disk between two checks of the disk-pressure loop.
    pub unit_write_mib_per_sec: u64,
    /// The most write operations one size unit may make per second; 0:
    /// unthrottled.
    pub unit_write_iops: u64,
    /// Longest time from starting a box to boxd's hello.
    pub boot_timeout: String,
    /// Give boxes a network card: QEMU's user networking, filtered on the
    /// host by nftables so that boxes reach the public internet and nothing
    /// of the host's (loopback, its addresses and networks, private and
    /// link-local ranges, metadata services, other boxes).
    pub network: bool,
    pub egress: EgressConfig,
    /// Encrypt each box's disk with LUKS under a key of its own, sealed by
    /// the master key and deleted when the box stops (its disk is then
    /// unreadable, even before the file is deleted). Off only to measure
    /// what it costs.
    pub encrypt_disks: bool,
    /// Refuse to start unless the volume under the boxes' files (their
    /// disks, and frozen boxes' memory) is encrypted: dm-crypt (LUKS),
    /// directly or under LVM, or an fscrypt directory.
    pub require_encryption: bool,
}

/// What boxes with a network card may reach, and who answers their names.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// The resolvers boxes' names are asked of (`1.1.1.1`, `1.1.1.1:53`);
    /// empty: this host's, from /etc/resolv.conf. Name public resolvers when
    /// the host's also answer private zones.
    pub resolvers: Vec<String>,
    /// IPv4 ranges boxes never reach, on top of the built-in list.
    pub deny: Vec<String>,
    /// Ranges boxes may reach although the built-in list covers them (an
    /// internal package mirror, say).
    pub allow: Vec<String>,
    /// The allow-list mode: when set, boxes reach these ranges (and `allow`)
    /// and nothing else.
    pub only: Vec<String>,
    /// An IPv4 address of this host that boxes' traffic leaves from (source
    /// NAT of the boxes' QEMU uid), so that what trusts the host's own
    /// address (an IP allowlist, a cloud agent) does not trust every box;
    /// unset: boxes' connections leave with the address the host's route
    /// picks.
    pub snat: Option<String>,
}

impl Default for BoxesConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            accel: AccelChoice::Auto,
            images_dir: None,
            image: "debian".to_owned(),
            unit_vcpus: 2,
            unit_memory_mib: 8192,
            unit_disk_gb: 40,
            idle_freeze: "10m".to_owned(),
            default_keep: "24h".to_owned(),
            max_keep: "7d".to_owned(),
            max_frozen: "10d".to_owned(),
            pool_size: 1,
            pool_unit_sizes: vec![1],
            cpu_overcommit: 16.0,
            memory_overcommit: 8.0,
            memory_margin_mib: 2048,
            pressure_available_mib: 1024,
            disk_margin_gb: 5,
            disk_overcommit: 1.0,
            unit_write_mib_per_sec: 100,
            unit_write_iops: 2000,
            boot_timeout: "120s".to_owned(),
            network: true,
            egress: EgressConfig::default(),
            encrypt_disks: true,
            require_encryption: false,
        }
    }
}

impl BoxesConfig {
    /// The settings the actors use, durations parsed.
    /// `shared_dir` holds `boxes/` and, by default, `images/`.
    pub fn settings(&self, shared_dir: &Path) -> Result<BoxSettings, ConfigError> {
        let duration = |key: &str, text: &str| {
            psbx_actors::duration::parse(text)
                .map_err(|e| ConfigError::Invalid(format!("boxes.{key}: {e}")))
        };
        let settings = BoxSettings {
            boxes_dir: shared_dir.join("boxes"),
            images_dir: self
                .images_dir
                .clone()
                .unwrap_or_else(|| shared_dir.join("images")),
            image: self.image.clone(),
            unit: Unit {
                vcpus: self.unit_vcpus,
                memory_mib: self.unit_memory_mib,
                disk_gb: self.unit_disk_gb,
            },
            idle_freeze: duration("idle_freeze", &self.idle_freeze)?,
            default_keep: duration("default_keep", &self.default_keep)?,
            // The spec keeps a box at most 7 days after its last use.
            max_keep: bounded("boxes.max_keep", &self.max_keep, 7 * 86_400, "7d")?,
            // The spec keeps frozen memory at most 10 days, as a safety net.
            max_frozen: bounded("boxes.max_frozen", &self.max_frozen, 10 * 86_400, "10d")?,
            pool_size: self.pool_size,
            pool_unit_sizes: self.pool_unit_sizes.clone(),
            cpu_overcommit: self.cpu_overcommit,
            memory_overcommit: self.memory_overcommit,
            memory_margin_mib: self.memory_margin_mib,
            pressure_available_mib: self.pressure_available_mib,
            disk_margin_gb: self.disk_margin_gb,
            disk_overcommit: self.disk_overcommit,
            unit_write_mib_per_sec: self.unit_write_mib_per_sec,
            unit_write_iops: self.unit_write_iops,
            boot_timeout: duration("boot_timeout", &self.boot_timeout)?,
            encrypt_disks: self.encrypt_disks,
            network: self.network,
            egress: EgressPolicy::parse(
                "boxes.egress",
                &self.egress.deny,
                &self.egress.allow,
                &self.egress.only,
            )
            .and_then(|p| p.with_snat("boxes.egress.snat", self.egress.snat.as_deref()))
            .map_err(ConfigError::Invalid)?,
            resolvers: psbx_actors::boxnet::resolver::configured(
                "boxes.egress.resolvers",
                &self.egress.resolvers,
            )
            .map_err(ConfigError::Invalid)?,
        };
        if settings.default_keep > settings.max_keep {
            return Err(ConfigError::Invalid(
                "boxes.default_keep is longer than boxes.max_keep".into(),
            ));
        }
        if let Some(bad) = self.pool_unit_sizes.iter().find(|s| !SIZES.contains(s)) {
            return Err(ConfigError::Invalid(format!(
                "boxes.pool_unit_sizes: {bad} is not a box size (1, 2, 4 or 8)"
            )));
        }
        if !(self.cpu_overcommit > 0.0
            && self.memory_overcommit > 0.0
            && self.disk_overcommit > 0.0)
        {
            return Err(ConfigError::Invalid(
                "boxes.cpu_overcommit, boxes.memory_overcommit and boxes.disk_overcommit must be above 0"
                    .into(),
            ));
        }
        if self.unit_vcpus == 0 || self.unit_memory_mib < 128 || self.unit_disk_gb == 0 {
            return Err(ConfigError::Invalid(
                "a box unit needs at least 1 vCPU, 128 MiB and 1 GB".into(),
            ));
        }
        Ok(settings)
    }
}
