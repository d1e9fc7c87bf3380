//! How boxes are made and kept: sizes, timers, the pool, capacity limits and
//! where images and box files live. Built by the server from its configuration.

use std::path::PathBuf;
use std::time::Duration;

/// One size unit; a box is 1, 2, 4 or 8 of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub vcpus: u32,
    pub memory_mib: u64,
    pub disk_gb: u64,
}

/// The sizes a box may have, in units.
pub const SIZES: [u32; 4] = [1, 2, 4, 8];

#[derive(Debug, Clone)]
pub struct BoxSettings {
    /// Box files: `<boxes_dir>/<box id>/{disk.qcow2, boxd.sock, console.log}`.
    pub boxes_dir: PathBuf,
    /// Images: `<images_dir>/<name>/manifest.json` and the files it names.
    pub images_dir: PathBuf,
    pub image: String,
    pub unit: Unit,
    /// Freeze after this long without activity.
    pub idle_freeze: Duration,
    /// Stop this long after the last activity, unless `keep` says longer.
    pub default_keep: Duration,
    /// The longest `keep` accepted.
    pub max_keep: Duration,
    /// The longest a frozen box's saved memory is kept, whatever its `keep`
    /// says: the box is stopped then (the spec's 10-day safety net).
    pub max_frozen: Duration,
    /// Pre-booted boxes kept per pooled size.
    pub pool_size: usize,
    /// The sizes (in units) that have a pool.
    pub pool_unit_sizes: Vec<u32>,
    /// vCPUs promised to boxes may reach this many times the host's CPUs.
    pub cpu_overcommit: f64,
    /// Memory promised to boxes holding host memory may reach this multiple
    /// of the host's (MemTotal).
    pub memory_overcommit: f64,
    /// MiB a new box must leave available once it has its full unit, after
    /// what booting boxes may still take (`machine::capacity`).
    pub memory_margin_mib: u64,
    /// Under this MemAvailable (MiB) the idlest running boxes are frozen;
    /// 0: never (`host::pressure`).
    pub pressure_available_mib: u64,
    /// Disk kept free under `boxes_dir`, in GiB: boxes are not promised it.
    pub disk_margin_gb: u64,
    /// Disk promised to boxes but not written yet may reach this multiple of
    /// the free space above the margin (1.0: every box can fill its disk).
    pub disk_overcommit: f64,
    /// The most one size unit writes to its disk per second, in MiB, and
    /// write operations per second (libvirt's `<iotune>`); 0: unthrottled.
    pub unit_write_mib_per_sec: u64,
    pub unit_write_iops: u64,
    /// How long a box may take from start to boxd's hello.
    pub boot_timeout: Duration,
    /// Encrypt each box's disk (LUKS in qcow2) under a key of its own,
    /// destroyed when the box ends (`machine::disk_key`).
    pub encrypt_disks: bool,
    /// Give boxes a network card (user-mode networking, filtered on the
    /// host: `boxnet`).
    pub network: bool,
    /// What boxes with a card may reach.
    pub egress: crate::boxnet::policy::EgressPolicy,
    /// The resolvers boxes' names are asked of; `None`: the host's own.
    pub resolvers: Option<Vec<std::net::SocketAddr>>,
}

impl BoxSettings {
    /// The resources of a box of `size` units.
    pub fn resources(&self, size: u32) -> Unit {
        Unit {
            vcpus: self.unit.vcpus * size,
            memory_mib: self.unit.memory_mib * u64::from(size),
            disk_gb: self.unit.disk_gb * u64::from(size),
        }
    }
}
