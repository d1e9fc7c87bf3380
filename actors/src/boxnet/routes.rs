//! The networks the host is attached to: every IPv4 route of the main table
//! without a gateway (a network on one of its links), read from
//! `/proc/net/route`. Boxes reach none of them, public or not (a host on a
//! public /24 at a hosting provider would otherwise hand its neighbours to
//! every box); the host's own addresses are dropped by the rules themselves
//! (`fib daddr type local`). Read by hand: the file is a fixed table of
//! hex fields, and a netlink crate would add a dependency for one read.

use ipnet::Ipv4Net;
use std::net::Ipv4Addr;

/// The host's attached networks now.
pub fn attached() -> std::io::Result<Vec<Ipv4Net>> {
    Ok(parse(&std::fs::read_to_string("/proc/net/route")?))
}

/// The routes without a gateway in a `/proc/net/route` text (not the default
/// route, not `lo`).
pub fn parse(text: &str) -> Vec<Ipv4Net> {
    let mut nets: Vec<Ipv4Net> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (iface, dest, gateway, mask) = (f.first()?, f.get(1)?, f.get(2)?, f.get(7)?);
            let addr = |hex: &str| {
                // The kernel prints the address as a native-endian integer.
                u32::from_str_radix(hex, 16)
                    .ok()
                    .map(|v| Ipv4Addr::from(v.to_ne_bytes()))
            };
            let (dest, gateway, mask) = (addr(dest)?, addr(gateway)?, addr(mask)?);
            if *iface == "lo" || !gateway.is_unspecified() || mask.is_unspecified() {
                return None;
            }
            let prefix = u32::from(mask).leading_ones();
            Ipv4Net::new(dest, u8::try_from(prefix).ok()?)
                .ok()
                .map(|n| n.trunc())
        })
        .collect();
    nets.sort();
    nets.dedup();
    nets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_routes_without_a_gateway() {
        // This machine's table as the kernel prints it (little-endian).
        let le = |a: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(a));
        let text = format!(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             eth0\t{}\t{}\t0003\t0\t0\t0\t{}\t0\t0\t0\n\
             eth0\t{}\t{}\t0001\t0\t0\t0\t{}\t0\t0\t0\n\
             vpx1\t{}\t{}\t0001\t0\t0\t0\t{}\t0\t0\t0\n\
             vpx1\t{}\t{}\t0003\t0\t0\t0\t{}\t0\t0\t0\n\
             lo\t{}\t{}\t0001\t0\t0\t0\t{}\t0\t0\t0\n",
            le([0, 0, 0, 0]),
            le([192, 0, 2, 1]),
            le([0, 0, 0, 0]),
            le([192, 0, 2, 0]),
            le([0, 0, 0, 0]),
            le([255, 255, 255, 0]),
            le([10, 233, 4, 0]),
            le([0, 0, 0, 0]),
            le([255, 255, 255, 252]),
            le([198, 51, 100, 0]),
            le([10, 233, 4, 2]),
            le([255, 255, 255, 0]),
            le([127, 0, 0, 0]),
            le([0, 0, 0, 0]),
            le([255, 0, 0, 0]),
        );
        assert_eq!(
            parse(&text),
            vec![
                "10.233.4.0/30".parse::<Ipv4Net>().unwrap(),
                "192.0.2.0/24".parse().unwrap()
            ]
        );
        assert!(parse("").is_empty());
    }

    #[test]
    fn reads_this_hosts_table() {
        // Whatever the machine has, the read works and leaves the default route out.
        let nets = attached().unwrap();
        assert!(nets.iter().all(|n| n.prefix_len() > 0), "{nets:?}");
    }
}
