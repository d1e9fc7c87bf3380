//! A box's libvirt domain, described by a typed [`DomainSpec`] and rendered to
//! the domain XML. Written by hand: the XML is small and fixed, and every value
//! placed in it is escaped here. The one value read back, the owner in psbx's
//! metadata element ([`owner_of`]), is parsed as XML (`roxmltree`), since
//! libvirt hands the element back re-serialized in its own way.
//!
//! The domain brings no more devices than a box uses (no USB controller, no
//! balloon, no graphics). QEMU's own confinement comes from libvirt's
//! `qemu.conf` defaults, which psbx relies on and its VM tests check on a
//! running box: `seccomp_sandbox = 1` (QEMU runs with `-sandbox on`) and
//! `stdio_handler = "logd"`, with which libvirt opens the serial console's file
//! through virtlogd, which rotates it (2 MiB, 3 old files, `virtlogd.conf`).

use crate::Accel;
use crate::cgroups::Controllers;
use std::fmt::Write;
use std::path::PathBuf;

/// How the domain boots: every box boots its image's kernel directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// Direct kernel boot (the test image, and the production image's kernel).
    Kernel {
        kernel: PathBuf,
        initrd: PathBuf,
        cmdline: String,
    },
}

/// A qcow2 overlay on a base image shared by every box of that image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub overlay: PathBuf,
    /// Read-only, and never relabelled: libvirt would otherwise hand the shared
    /// base file to the QEMU user (and never give it back).
    pub base: PathBuf,
    /// The most the box may write to it per second (`<iotune>`): bytes and
    /// write operations; 0 leaves that one unthrottled. A box that fills the
    /// host's disk does so at this rate at most, so the disk-pressure check
    /// (psbx's `host::disk_pressure`) sees it coming between two samples.
    pub write_bytes_sec: u64,
    pub write_iops: u64,
    /// The libvirt secret holding the overlay's LUKS key (`disk.rs`), when
    /// it is encrypted.
    pub key_secret: Option<String>,
}

/// The box's network card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic {
    /// User-mode networking (QEMU's slirp) on the given IPv4 network:
    /// outbound only, every connection a socket of the QEMU process (which
    /// the host filters by the process's uid, [`DomainSpec::run_as`]).
    User {
        network: std::net::Ipv4Addr,
        prefix: u8,
    },
}

/// The box's share of the host when boxes contend for it, written into the
/// domain's own cgroup: CPU time and disk I/O in proportion to its size
/// (`<cputune><shares>`, `<blkiotune><weight>`), and memory above its own
/// size reclaimed from it first (`<memtune><soft_limit>`). Each is left out
/// where the host has no such controller ([`Controllers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tune {
    pub cpu_shares: Option<u64>,
    pub io_weight: Option<u32>,
    pub memory_soft_mib: Option<u64>,
}

impl Tune {
    /// The share of a box of `units` size units and `memory_mib` of memory
    /// on a host with `controllers`: 1024 CPU shares per unit (the weight of
    /// one ordinary process), an I/O weight of 100 per unit (libvirt takes
    /// 100 to 1000).
    pub fn for_units(units: u32, memory_mib: u64, controllers: Controllers) -> Self {
        let units = units.max(1);
        Self {
            cpu_shares: controllers.cpu.then(|| 1024 * u64::from(units)),
            io_weight: controllers.io.then(|| (100 * units).clamp(100, 1000)),
            memory_soft_mib: controllers.memory.then_some(memory_mib),
        }
    }

    fn to_xml(self) -> String {
        let mut x = String::new();
        if let Some(shares) = self.cpu_shares {
            let _ = writeln!(x, "  <cputune><shares>{shares}</shares></cputune>");
        }
        if let Some(weight) = self.io_weight {
            let _ = writeln!(x, "  <blkiotune><weight>{weight}</weight></blkiotune>");
        }
        if let Some(mib) = self.memory_soft_mib {
            let _ = writeln!(
                x,
                "  <memtune><soft_limit unit='MiB'>{mib}</soft_limit></memtune>"
            );
        }
        x
    }
}

/// Everything libvirt needs to know about one box's VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSpec {
    /// `psbx-<box id>`.
    pub name: String,
    pub accel: Accel,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// Its share of the host's CPU, disk and memory (none: libvirt's defaults).
    pub tune: Option<Tune>,
    pub boot: Boot,
    /// The box's disk, attached as `vda`.
    pub disk: Option<Disk>,
    /// The unix socket libvirt binds for the `org.psbx.boxd` channel.
    pub channel_socket: PathBuf,
    /// Where the serial console is written (appended across restores).
    pub console_log: Option<PathBuf>,
    /// None: the box has no network card at all.
    pub nic: Option<Nic>,
    /// The uid and gid QEMU runs as (a DAC seclabel: the box's own uid),
    /// instead of libvirt's default user. libvirt then relabels nothing: the
    /// files QEMU writes (the overlay) must be that uid's already, and the
    /// shared read-only files (kernel, initrd, base image) readable by all.
    /// Relabelling them would fail while a domain of another uid (another
    /// box) uses them.
    pub run_as: Option<(u32, u32)>,
    /// The psbx installation the domain belongs to, kept in the domain's
    /// metadata: reconciliation only ever touches its own installation's
    /// domains (several installations, or test runs, may share a libvirt).
    pub owner: String,
}

/// The namespace of psbx's element in a domain's `<metadata>`.
pub const METADATA_URI: &str = "urn:psbx:box";

/// Escapes text for XML element content and single- or double-quoted attributes.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

fn path(p: &std::path::Path) -> String {
    esc(&p.to_string_lossy())
}

/// The `owner` attribute of psbx's metadata element (namespace
/// [`METADATA_URI`], name `box`) in `xml`: a whole domain's XML, or the
/// element alone as libvirt's metadata call for [`METADATA_URI`] returns it
/// (libvirt 9 gives it without any namespace: `<box owner="..."/>`).
pub(crate) fn owner_of(xml: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let root = doc.root_element();
    let alone = root.tag_name().name() == "box"
        && root
            .tag_name()
            .namespace()
            .is_none_or(|ns| ns == METADATA_URI);
    let element = if alone {
        root
    } else {
        doc.descendants()
            .find(|n| n.has_tag_name((METADATA_URI, "box")))?
    };
    element.attribute("owner").map(str::to_owned)
}

impl DomainSpec {
    /// The domain XML for `virDomainDefineXML`.
    pub fn to_xml(&self) -> String {
        let mut x = String::new();
        // Writing into a String cannot fail; the results are ignored.
        let _ = writeln!(x, "<domain type='{}'>", self.accel.domain_type());
        let _ = writeln!(x, "  <name>{}</name>", esc(&self.name));
        let _ = writeln!(x, "  <description>psbx box</description>");
        let _ = writeln!(
            x,
            "  <metadata><psbx:box xmlns:psbx='{METADATA_URI}' owner='{}'/></metadata>",
            esc(&self.owner)
        );
        let _ = writeln!(x, "  <memory unit='MiB'>{}</memory>", self.memory_mib);
        let _ = writeln!(x, "  <vcpu>{}</vcpu>", self.vcpus);
        if let Some(tune) = self.tune {
            x.push_str(&tune.to_xml());
        }
        x.push_str("  <os>\n    <type arch='x86_64' machine='pc'>hvm</type>\n");
        match &self.boot {
            Boot::Kernel {
                kernel,
                initrd,
                cmdline,
            } => {
                let _ = writeln!(x, "    <kernel>{}</kernel>", path(kernel));
                let _ = writeln!(x, "    <initrd>{}</initrd>", path(initrd));
                let _ = writeln!(x, "    <cmdline>{}</cmdline>", esc(cmdline));
            }
        }
        x.push_str("  </os>\n  <features><acpi/></features>\n");
        if self.accel == Accel::Kvm {
            x.push_str("  <cpu mode='host-passthrough'/>\n");
        }
        if let Some((uid, gid)) = self.run_as {
            let _ = writeln!(
                x,
                "  <seclabel type='static' model='dac' relabel='no'><label>+{uid}:+{gid}</label></seclabel>"
            );
        }
        x.push_str("  <clock offset='utc'/>\n");
        x.push_str("  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>destroy</on_reboot>\n");
        x.push_str("  <on_crash>destroy</on_crash>\n  <devices>\n");
        // The `pc` machine's default USB controller is nothing a box uses.
        x.push_str("    <controller type='usb' model='none'/>\n");
        if let Some(disk) = &self.disk {
            // With relabelling off for the whole domain (`run_as`), libvirt
            // refuses a per-source override: it is implied.
            let keep_base = if self.run_as.is_some() {
                ""
            } else {
                "<seclabel model='dac' relabel='no'/>"
            };
            // A write that finds the host's disk full pauses the VM
            // (`error_policy='stop'`, for reads too), instead of failing the
            // guest's file system or going on with a corrupt overlay; the box
            // is frozen or resumed by psbx from there.
            let mut iotune = String::new();
            if disk.write_bytes_sec > 0 {
                let _ = write!(
                    iotune,
                    "<write_bytes_sec>{}</write_bytes_sec>",
                    disk.write_bytes_sec
                );
            }
            if disk.write_iops > 0 {
                let _ = write!(
                    iotune,
                    "<write_iops_sec>{}</write_iops_sec>",
                    disk.write_iops
                );
            }
            if !iotune.is_empty() {
                iotune = format!("<iotune>{iotune}</iotune>");
            }
            let encryption = match &disk.key_secret {
                Some(uuid) => format!(
                    "<encryption format='luks'><secret type='passphrase' uuid='{}'/></encryption>",
                    esc(uuid)
                ),
                None => String::new(),
            };
            let _ = writeln!(
                x,
                "    <disk type='file' device='disk'>\
                 <driver name='qemu' type='qcow2' error_policy='stop'/>\
                 <source file='{}'>{encryption}</source><backingStore type='file'><format type='qcow2'/>\
                 <source file='{}'>{keep_base}</source>\
                 <backingStore/></backingStore><target dev='vda' bus='virtio'/>{iotune}</disk>",
                path(&disk.overlay),
                path(&disk.base)
            );
        }
        match &self.console_log {
            Some(log) => {
                let _ = writeln!(
                    x,
                    "    <serial type='file'><source path='{}' append='on'/><target port='0'/></serial>",
                    path(log)
                );
            }
            None => x.push_str("    <serial type='null'><target port='0'/></serial>\n"),
        }
        let _ = writeln!(
            x,
            "    <channel type='unix'><source mode='bind' path='{}'/>\
             <target type='virtio' name='org.psbx.boxd'/></channel>",
            path(&self.channel_socket)
        );
        if let Some(Nic::User { network, prefix }) = self.nic {
            let _ = writeln!(
                x,
                "    <interface type='user'><ip family='ipv4' address='{network}' prefix='{prefix}'/>\
                 <model type='virtio'/></interface>"
            );
        }
        x.push_str(
            "    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>\n",
        );
        // The guest gives pages it frees back to the host (free page
        // reporting): an idle box's QEMU process shrinks to what the guest
        // uses, and the capacity ledger admits by that.
        x.push_str(
            "    <memballoon model='virtio' freePageReporting='on'/>\n  </devices>\n</domain>\n",
        );
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DomainSpec {
        DomainSpec {
            name: "psbx-box_abc".into(),
            accel: Accel::Tcg,
            vcpus: 2,
            memory_mib: 512,
            tune: None,
            boot: Boot::Kernel {
                kernel: "/img/vmlinuz".into(),
                initrd: "/img/initrd.img".into(),
                cmdline: "console=ttyS0 x='<&>'".into(),
            },
            disk: Some(Disk {
                overlay: "/data/boxes/box_abc/disk.qcow2".into(),
                base: "/img/base.qcow2".into(),
                write_bytes_sec: 0,
                write_iops: 0,
                key_secret: None,
            }),
            channel_socket: "/data/boxes/box_abc/boxd.sock".into(),
            console_log: Some("/data/boxes/box_abc/console.log".into()),
            nic: None,
            run_as: None,
            owner: "inst_abc".into(),
        }
    }

    #[test]
    fn renders_a_tcg_box_without_network() {
        let xml = spec().to_xml();
        assert!(xml.starts_with("<domain type='qemu'>"), "{xml}");
        assert!(xml.contains("<name>psbx-box_abc</name>"));
        assert!(xml.contains("<psbx:box xmlns:psbx='urn:psbx:box' owner='inst_abc'/>"));
        assert!(xml.contains("<memory unit='MiB'>512</memory>"));
        assert!(xml.contains("<vcpu>2</vcpu>"));
        assert!(xml.contains("<kernel>/img/vmlinuz</kernel>"));
        assert!(xml.contains("<cmdline>console=ttyS0 x=&apos;&lt;&amp;&gt;&apos;</cmdline>"));
        assert!(xml.contains("<source file='/data/boxes/box_abc/disk.qcow2'></source>"));
        assert!(
            xml.contains("<driver name='qemu' type='qcow2' error_policy='stop'/>"),
            "{xml}"
        );
        assert!(!xml.contains("<iotune>"), "unthrottled: {xml}");
        assert!(xml.contains(
            "<source file='/img/base.qcow2'><seclabel model='dac' relabel='no'/></source>"
        ));
        assert!(xml.contains(
            "<source mode='bind' path='/data/boxes/box_abc/boxd.sock'/><target type='virtio' name='org.psbx.boxd'/>"
        ));
        assert!(!xml.contains("<interface"), "a box without a NIC got one");
        assert!(xml.contains("<controller type='usb' model='none'/>"));
        assert!(xml.contains("<memballoon model='virtio' freePageReporting='on'/>"));
        assert!(!xml.contains("host-passthrough"));
        assert!(
            !xml.contains("<seclabel type"),
            "runs as libvirt's own user"
        );
    }

    #[test]
    fn an_encrypted_overlay_names_its_key_secret() {
        let mut s = spec();
        if let Some(disk) = &mut s.disk {
            disk.key_secret = Some("0e6c1b5e-53c4-4f0e-9b1a-2f8d3c4b5a69".into());
        }
        let xml = s.to_xml();
        assert!(
            xml.contains(
                "<source file='/data/boxes/box_abc/disk.qcow2'><encryption format='luks'>\
                 <secret type='passphrase' uuid='0e6c1b5e-53c4-4f0e-9b1a-2f8d3c4b5a69'/>\
                 </encryption></source><backingStore type='file'>"
            ),
            "{xml}"
        );
        // The base image is not encrypted: no key for it.
        assert_eq!(xml.matches("<encryption").count(), 1, "{xml}");
    }

    #[test]
    fn writes_are_throttled_as_asked() {
        let mut s = spec();
        if let Some(disk) = &mut s.disk {
            disk.write_bytes_sec = 52_428_800;
            disk.write_iops = 2000;
        }
        let xml = s.to_xml();
        assert!(
            xml.contains(
                "<target dev='vda' bus='virtio'/><iotune><write_bytes_sec>52428800</write_bytes_sec>\
                 <write_iops_sec>2000</write_iops_sec></iotune></disk>"
            ),
            "{xml}"
        );
    }

    #[test]
    fn the_owner_reads_back_from_the_domain_xml() {
        for owner in ["inst_abc", "a'b\"c<&>d", "  spaced  ", ""] {
            let mut s = spec();
            s.owner = owner.into();
            assert_eq!(owner_of(&s.to_xml()).as_deref(), Some(owner), "{owner:?}");
        }
    }

    #[test]
    fn the_owner_reads_back_as_libvirt_returns_it() {
        // libvirt 9's metadata call gives the element alone, without its
        // namespace (the call named it), with double quotes.
        assert_eq!(
            owner_of("<box owner=\"inst_yo89f43fe9g6gc34\"/>").as_deref(),
            Some("inst_yo89f43fe9g6gc34")
        );
        // Others may keep the namespace, as the default one or a prefix.
        assert_eq!(
            owner_of("<box xmlns=\"urn:psbx:box\" owner=\"inst_1\"/>").as_deref(),
            Some("inst_1")
        );
        assert_eq!(
            owner_of("<box xmlns=\"urn:psbx:box\" owner=\"a&apos;b&quot;c&lt;&amp;&gt;\"/>")
                .as_deref(),
            Some("a'b\"c<&>")
        );
        assert_eq!(
            owner_of("<p:box xmlns:p='urn:psbx:box' owner='x'/>").as_deref(),
            Some("x")
        );
        // Not psbx's element, or no owner on it, or not XML: no owner.
        assert_eq!(owner_of("<box xmlns=\"urn:other\" owner=\"x\"/>"), None);
        assert_eq!(
            owner_of("<domain><metadata><box owner=\"x\"/></metadata></domain>"),
            None
        );
        assert_eq!(
            owner_of("<other xmlns=\"urn:psbx:box\" owner=\"x\"/>"),
            None
        );
        assert_eq!(owner_of("<box xmlns=\"urn:psbx:box\"/>"), None);
        assert_eq!(owner_of("owner='x'"), None);
    }

    #[test]
    fn renders_kvm_and_a_nic() {
        let mut s = spec();
        s.accel = Accel::Kvm;
        s.nic = Some(Nic::User {
            network: std::net::Ipv4Addr::new(10, 0, 2, 0),
            prefix: 24,
        });
        s.run_as = Some((1879048200, 64055));
        s.console_log = None;
        let xml = s.to_xml();
        assert!(xml.starts_with("<domain type='kvm'>"));
        assert!(xml.contains(
            "<interface type='user'><ip family='ipv4' address='10.0.2.0' prefix='24'/><model type='virtio'/></interface>"
        ));
        assert!(xml.contains(
            "<seclabel type='static' model='dac' relabel='no'><label>+1879048200:+64055</label></seclabel>"
        ));
        assert!(
            xml.contains("<source file='/img/base.qcow2'></source>"),
            "{xml}"
        );
        assert!(!xml.contains("<boot dev"));
        assert!(xml.contains("<serial type='null'>"));
    }

    #[test]
    fn a_box_gets_a_share_by_its_size_of_what_the_host_can_tune() {
        let all = Controllers {
            cpu: true,
            io: true,
            memory: true,
        };
        let mut s = spec();
        s.tune = Some(Tune::for_units(2, 512, all));
        let xml = s.to_xml();
        assert!(
            xml.contains("<cputune><shares>2048</shares></cputune>"),
            "{xml}"
        );
        assert!(xml.contains("<blkiotune><weight>200</weight></blkiotune>"));
        assert!(xml.contains("<memtune><soft_limit unit='MiB'>512</soft_limit></memtune>"));
        assert_eq!(Tune::for_units(40, 1, all).io_weight, Some(1000));
        let cpu_only = Tune::for_units(
            1,
            512,
            Controllers {
                cpu: true,
                ..Controllers::default()
            },
        );
        s.tune = Some(cpu_only);
        let xml = s.to_xml();
        assert!(xml.contains("<shares>1024</shares>"));
        assert!(
            !xml.contains("blkiotune") && !xml.contains("memtune"),
            "{xml}"
        );
    }
}
