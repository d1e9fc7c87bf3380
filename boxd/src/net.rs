//! The box's network card, set up at boot with no step by the caller: the
//! server writes `psbx.net=<address>/<prefix>,<gateway>[,<mtu>]` on the kernel
//! command line of every box that has a card (QEMU's user networking, whose
//! connections the host filters: `psbx_actors::boxnet`), and boxd gives the
//! card (`eth0`, the kernel's name: the images keep it) that address, the
//! default route and the MTU, before it says hello: a box said ready has its
//! network. boxd loads the card's driver itself rather than wait for udev
//! (under TCG the Debian image's coldplug got to it 20-25 s after boxd
//! started, so a fresh box had only `lo`, then an `eth0` nobody set up).
//! There is no DHCP client in the box.
//!
//! IPv6 is switched off in every box (the host drops it too), so programs
//! fall back to IPv4 at once instead of waiting on a route that leads nowhere.

use crate::command::run;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

/// The name of the box's network card (the images keep kernel names:
/// `net.ifnames=0`, or no udev at all).
pub const NIC: &str = "eth0";
/// The kernel command line's key.
pub const CMDLINE_KEY: &str = "psbx.net=";
/// The operator's ranges boxes may reach although private
/// (`psbx.allow=<range>,<range>`), exempt from the box's own filter.
pub const ALLOW_KEY: &str = "psbx.allow=";
/// How long the card may take to show up once its driver is loaded.
const NIC_WAIT: Duration = Duration::from_secs(60);

/// The card's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicConfig {
    pub address: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Ipv4Addr,
    pub mtu: u32,
}

/// The settings the command line `text` names; `None` for a box without a card.
pub fn from_cmdline(text: &str) -> Option<Result<NicConfig, String>> {
    let value = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix(CMDLINE_KEY))?;
    Some(
        parse(value).ok_or_else(|| {
            format!("{CMDLINE_KEY}{value} is not <address>/<prefix>,<gateway>[,<mtu>]")
        }),
    )
}

/// The `psbx.allow=` ranges of the command line `text` (`a.b.c.d/n`), each
/// checked; none when absent.
pub fn allowed_from_cmdline(text: &str) -> Result<Vec<String>, String> {
    let Some(value) = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix(ALLOW_KEY))
    else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(|range| {
            let ok = range.split_once('/').is_some_and(|(a, p)| {
                a.parse::<Ipv4Addr>().is_ok() && p.parse::<u8>().is_ok_and(|p| p <= 32)
            });
            ok.then(|| range.to_owned())
                .ok_or_else(|| format!("{ALLOW_KEY}{value}: {range:?} is not an IPv4 range"))
        })
        .collect()
}

fn parse(value: &str) -> Option<NicConfig> {
    let mut parts = value.split(',');
    let (address, prefix) = parts.next()?.split_once('/')?;
    let gateway = parts.next()?.parse().ok()?;
    let mtu = match parts.next() {
        Some(m) => m.parse().ok().filter(|m| (576..=65535).contains(m))?,
        None => 1500,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(NicConfig {
        address: address.parse().ok()?,
        prefix: prefix.parse().ok().filter(|p| (1..=30).contains(p))?,
        gateway,
        mtu,
    })
}

/// Switches IPv6 off and sets the card up as the command line says. A box
/// without a card is left with `lo` only.
pub async fn up() -> Result<Option<NicConfig>, String> {
    for knob in ["all", "default", "lo"] {
        let path = format!("/proc/sys/net/ipv6/conf/{knob}/disable_ipv6");
        if Path::new(&path).exists() {
            std::fs::write(&path, "1").map_err(|e| format!("cannot switch IPv6 off: {e}"))?;
        }
    }
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let Some(config) = from_cmdline(&cmdline) else {
        return Ok(None);
    };
    let config = config?;
    // Load the card's driver now: under TCG, udev's coldplug gets to it 20 s
    // or more after boxd starts, and a box said ready in between has only
    // `lo` (and then an unconfigured `eth0`). Built in, or loaded already:
    // nothing to do.
    if let Err(e) = run("modprobe", &["virtio_net"], None).await {
        eprintln!("boxd: modprobe virtio_net: {e}");
    }
    let sys = format!("/sys/class/net/{NIC}");
    let deadline = tokio::time::Instant::now() + NIC_WAIT;
    while !Path::new(&sys).exists() {
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "the box has no network card {NIC} after {NIC_WAIT:?} (is virtio_net loaded?)"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cidr = format!("{}/{}", config.address, config.prefix);
    let mtu = config.mtu.to_string();
    let gateway = config.gateway.to_string();
    run("ip", &["link", "set", "dev", NIC, "mtu", &mtu, "up"], None).await?;
    if let Err(e) = run("ip", &["addr", "add", &cidr, "dev", NIC], None).await {
        // A restarted boxd finds it in place already.
        let shown = run("ip", &["-4", "addr", "show", "dev", NIC], None)
            .await
            .unwrap_or_default();
        if !shown.contains(&cidr) {
            return Err(format!("cannot put {cidr} on {NIC}: {e}"));
        }
    }
    run(
        "ip",
        &["route", "replace", "default", "via", &gateway, "dev", NIC],
        None,
    )
    .await?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_card_from_the_command_line() {
        let line = "console=ttyS0 quiet psbx.net=10.0.2.15/24,10.0.2.2 panic=-1";
        assert_eq!(
            from_cmdline(line),
            Some(Ok(NicConfig {
                address: Ipv4Addr::new(10, 0, 2, 15),
                prefix: 24,
                gateway: Ipv4Addr::new(10, 0, 2, 2),
                mtu: 1500,
            }))
        );
        assert_eq!(
            from_cmdline("psbx.net=10.0.2.15/24,10.0.2.2,9000")
                .unwrap()
                .unwrap()
                .mtu,
            9000
        );
        assert_eq!(from_cmdline("console=ttyS0 quiet"), None);
        assert_eq!(
            allowed_from_cmdline("quiet psbx.allow=10.20.0.5/32,192.168.7.0/24"),
            Ok(vec!["10.20.0.5/32".to_owned(), "192.168.7.0/24".to_owned()])
        );
        assert_eq!(allowed_from_cmdline("quiet"), Ok(vec![]));
        assert!(allowed_from_cmdline("psbx.allow=10.0.0.0/8,x;drop").is_err());
        for bad in [
            "psbx.net=10.0.2.15,10.0.2.2",
            "psbx.net=10.0.2.15/33,10.0.2.2",
            "psbx.net=10.0.2.15/24",
            "psbx.net=10.0.2.15/24,10.0.2.2,99",
            "psbx.net=10.0.2.15/24,10.0.2.2,1500,x",
        ] {
            let err = from_cmdline(bad).unwrap().unwrap_err();
            assert!(err.contains("is not <address>/<prefix>"), "{bad}: {err}");
        }
    }
}
