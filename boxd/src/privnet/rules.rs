//! The kernel side of the box's environment addresses: the range on `lo`,
//! `route_localnet`, and the nftables table `ip psbx` that sends each
//! address:port to boxd's entry on 127.0.0.1.
//!
//! The whole range 198.18.0.0/15 goes on `lo` (an address on a loopback
//! device makes its whole prefix local): a name dialed on a port that is not
//! listed then stays in the box — whatever listens on that port answers, and
//! with nothing there the connection is refused at once — as the spec says.
//! A listed IPv4 address gets a /32 route through `lo`: the kernel picks a
//! route when a program connects, before the nat hook runs, so without one
//! (a box without a default route) the connection would fail with "network is
//! unreachable" before the rule could send it to its entry; on ports that are
//! not listed it still reaches nothing.
//! The rules are in a nat `output` chain (the box's own programs) and a nat
//! `prerouting` chain (containers on Docker bridges); DNAT to 127.0.0.1 needs
//! `net.ipv4.conf.all.route_localnet=1`. Their priority, -110, is ahead of
//! Docker's own nat chains (-100, which DNAT published ports for every local
//! destination, the range on `lo` included): the first NAT binding made for a
//! connection wins, so a published port never takes an environment address.
//!
//! The same table filters what leaves the box (environments.txt, "What is
//! not listed stays out of reach"), in filter chains after the NAT ones: a
//! private or link-local address (10/8, 172.16/12, 192.168/16, 100.64/10,
//! 169.254/16) is dropped on its way out of the network card, so a connection
//! to one times out, and a listed IPv4 address that was not sent to an entry
//! (a port that is not listed) is dropped too, so it times out like an
//! unlisted one instead of being refused by `lo`. The box's own containers'
//! bridges (Docker's 172.17/16 and the like) are not the network card, so
//! they stay reachable. Nothing of it is the box's isolation — root in the
//! box can change it; that is the host's (`psbx_actors::boxnet`).
//!
//! The table is in place from boot (no redirects yet) and replaced as a whole
//! in one `nft -f -` transaction at claim.

use super::addresses::{DNS_ADDR, RANGE};
use super::error::SetupError;
use crate::command::run;
use crate::net::{NIC, allowed_from_cmdline};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// One rule: connections to `addr:port` go to 127.0.0.1:`entry_port` (an
/// entry of boxd's, or the box's own process for a declared service in box
/// mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    pub addr: Ipv4Addr,
    pub port: u16,
    pub entry_port: u16,
}

/// Private and link-local ranges: never reached through the network card.
pub const PRIVATE: &str =
    "10.0.0.0/8, 100.64.0.0/10, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16";

/// A declared range: connections to any address of `range` on `port` go to
/// 127.0.0.1:`target_port` (after the redirects, which are exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRedirect {
    pub range: ipnet::Ipv4Net,
    pub port: u16,
    pub target_port: u16,
}

/// The nft script that replaces table `ip psbx` with these redirects and
/// declared ranges, the filter for the listed IPv4 addresses `literals`, and
/// the operator's `allowed` ranges let through the card (checked ranges,
/// `a.b.c.d/n`).
pub fn ruleset(
    redirects: &[Redirect],
    ranges: &[RangeRedirect],
    literals: &[Ipv4Addr],
    allowed: &[String],
) -> String {
    let mut rules = String::new();
    for r in redirects {
        let _ = writeln!(
            rules,
            "\t\tip daddr {} tcp dport {} dnat to 127.0.0.1:{}",
            r.addr, r.port, r.entry_port
        );
    }
    for r in ranges {
        let _ = writeln!(
            rules,
            "\t\tip daddr {} tcp dport {} dnat to 127.0.0.1:{}",
            r.range, r.port, r.target_port
        );
    }
    let mut filter = String::new();
    if !allowed.is_empty() {
        let _ = writeln!(
            filter,
            "\t\toifname \"{NIC}\" ip daddr {{ {} }} accept",
            allowed.join(", ")
        );
    }
    let _ = writeln!(filter, "\t\toifname \"{NIC}\" ip daddr @private drop");
    let mut listed = String::new();
    if !literals.is_empty() {
        let list: Vec<String> = literals.iter().map(Ipv4Addr::to_string).collect();
        let _ = writeln!(
            listed,
            "\tset listed {{\n\t\ttype ipv4_addr\n\t\telements = {{ {} }}\n\t}}",
            list.join(", ")
        );
        filter.push_str("\t\tip daddr @listed drop\n");
    }
    // NAT chains only with something to send to an entry: their hooks put
    // every connection of the box through conntrack, which under TCG took a
    // third of an upload's time.
    let nat = if redirects.is_empty() && ranges.is_empty() {
        String::new()
    } else {
        format!(
            "\tchain output {{\n\t\ttype nat hook output priority -110; policy accept;\n{rules}\t}}\n\
             \tchain prerouting {{\n\t\ttype nat hook prerouting priority -110; policy accept;\n{rules}\t}}\n"
        )
    };
    // Declaring the table first makes the delete succeed when it is new.
    format!(
        "table ip psbx\ndelete table ip psbx\ntable ip psbx {{\n\
         \tset private {{\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = {{ {PRIVATE} }}\n\t}}\n\
         {listed}{nat}\
         \tchain out {{\n\t\ttype filter hook output priority 10; policy accept;\n{filter}\t}}\n\
         \tchain forward {{\n\t\ttype filter hook forward priority 10; policy accept;\n{filter}\t}}\n\
         }}\n"
    )
}

/// Puts the range on `lo` (once: a second time is not an error) and sets
/// `route_localnet`.
pub async fn prepare_kernel() -> Result<(), SetupError> {
    let cidr = format!("{DNS_ADDR}/{}", RANGE.1);
    if let Err(reason) = on_loopback(&cidr).await {
        return Err(SetupError::Loopback { cidr, reason });
    }
    std::fs::write("/proc/sys/net/ipv4/conf/all/route_localnet", "1")
        .map_err(SetupError::RouteLocalnet)
}

/// Puts `cidr` on `lo`; one there already is not an error.
pub async fn on_loopback(cidr: &str) -> Result<(), String> {
    let Err(e) = run("ip", &["addr", "add", cidr, "dev", "lo"], None).await else {
        return Ok(());
    };
    let shown = run("ip", &["-4", "addr", "show", "dev", "lo"], None)
        .await
        .unwrap_or_default();
    if shown.contains(cidr) { Ok(()) } else { Err(e) }
}

/// Routes the listed IPv4 addresses through `lo`.
pub async fn route_literals(literals: &[Ipv4Addr]) -> Result<(), SetupError> {
    for ip in literals {
        let dest = format!("{ip}/32");
        run("ip", &["route", "replace", &dest, "dev", "lo"], None)
            .await
            .map_err(|reason| SetupError::Route { ip: *ip, reason })?;
    }
    Ok(())
}

/// Replaces table `ip psbx`, letting the kernel command line's
/// `psbx.allow=` ranges through.
pub async fn apply(
    redirects: &[Redirect],
    ranges: &[RangeRedirect],
    literals: &[Ipv4Addr],
) -> Result<(), SetupError> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let allowed = allowed_from_cmdline(&cmdline).map_err(SetupError::Allowed)?;
    run(
        "nft",
        &["-f", "-"],
        Some(&ruleset(redirects, ranges, literals, &allowed)),
    )
    .await
    .map(drop)
    .map_err(SetupError::Rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_replaces_the_table_with_its_chains() {
        let text = ruleset(
            &[
                Redirect {
                    addr: Ipv4Addr::new(198, 18, 0, 2),
                    port: 5432,
                    entry_port: 40001,
                },
                Redirect {
                    addr: Ipv4Addr::new(10, 9, 8, 7),
                    port: 8080,
                    entry_port: 40002,
                },
            ],
            &[RangeRedirect {
                range: "172.16.0.0/16".parse().unwrap(),
                port: 9090,
                target_port: 9000,
            }],
            &[Ipv4Addr::new(10, 9, 8, 7)],
            &[],
        );
        assert_eq!(
            text,
            "table ip psbx\n\
             delete table ip psbx\n\
             table ip psbx {\n\
             \tset private {\n\
             \t\ttype ipv4_addr\n\
             \t\tflags interval\n\
             \t\telements = { 10.0.0.0/8, 100.64.0.0/10, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16 }\n\
             \t}\n\
             \tset listed {\n\
             \t\ttype ipv4_addr\n\
             \t\telements = { 10.9.8.7 }\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype nat hook output priority -110; policy accept;\n\
             \t\tip daddr 198.18.0.2 tcp dport 5432 dnat to 127.0.0.1:40001\n\
             \t\tip daddr 10.9.8.7 tcp dport 8080 dnat to 127.0.0.1:40002\n\
             \t\tip daddr 172.16.0.0/16 tcp dport 9090 dnat to 127.0.0.1:9000\n\
             \t}\n\
             \tchain prerouting {\n\
             \t\ttype nat hook prerouting priority -110; policy accept;\n\
             \t\tip daddr 198.18.0.2 tcp dport 5432 dnat to 127.0.0.1:40001\n\
             \t\tip daddr 10.9.8.7 tcp dport 8080 dnat to 127.0.0.1:40002\n\
             \t\tip daddr 172.16.0.0/16 tcp dport 9090 dnat to 127.0.0.1:9000\n\
             \t}\n\
             \tchain out {\n\
             \t\ttype filter hook output priority 10; policy accept;\n\
             \t\toifname \"eth0\" ip daddr @private drop\n\
             \t\tip daddr @listed drop\n\
             \t}\n\
             \tchain forward {\n\
             \t\ttype filter hook forward priority 10; policy accept;\n\
             \t\toifname \"eth0\" ip daddr @private drop\n\
             \t\tip daddr @listed drop\n\
             \t}\n\
             }\n"
        );
        // At boot: no redirects, no listed addresses, no NAT; the filter already there.
        let boot = ruleset(&[], &[], &[], &[]);
        assert!(
            !boot.contains("set listed") && !boot.contains("@listed") && !boot.contains(" nat "),
            "{boot}"
        );
        assert!(
            boot.contains("oifname \"eth0\" ip daddr @private drop"),
            "{boot}"
        );
        // The operator's allowed ranges go through the card, ahead of the drop.
        let mirror = ruleset(&[], &[], &[], &["10.20.0.5/32".to_owned()]);
        assert!(
            mirror.contains(
                "\t\toifname \"eth0\" ip daddr { 10.20.0.5/32 } accept\n\t\toifname \"eth0\" ip daddr @private drop\n"
            ),
            "{mirror}"
        );
    }
}
