//! Where each host:port of the box goes, from the environment's addresses
//! and the box's wiring (`psbx_wire::boxd::Wiring`): a pure function, so
//! the rules it leads to can be read in one place and tested without a box.
//!
//! For every host the box knows (an environment host, a declared name, a
//! linked name), each port is decided in this order: a link sends it to
//! another box (`link:` stream), a declared port to the box's own process
//! (box mode: straight to its target port, boxd holds nothing) or to boxd's
//! HTTP proxy (external mode), an environment address to its connector
//! (`env:` entry). A host name with no port 80 among those gets the scene
//! entry on 80. Every other port of a name stays in the box (the whole
//! 198.18.0.0/15 is on `lo`). A listed IPv4 address inside a declared range
//! on the range's port goes to the range's target instead of the connector.

use super::addresses::Assigned;
use psbx_wire::boxd::{DeclaredRange, WireMode, Wiring};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// What a host:port leads to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum To {
    /// An entry whose connections go out as `env:` streams.
    Env,
    /// An entry whose connections go out as `link:` streams.
    Link,
    /// The box's own process on this port (box mode).
    Box(u16),
    /// boxd's HTTP proxy to the external base URL.
    External,
    /// The port-80 scene entry.
    Scene,
}

/// One host:port and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub host: String,
    pub addr: Ipv4Addr,
    pub port: u16,
    pub to: To,
}

/// Each host's ports, hosts in the order they first come.
#[derive(Default)]
struct Hosts(Vec<(Ipv4Addr, String, BTreeMap<u16, To>)>);

impl Hosts {
    fn ports(&mut self, addr: Ipv4Addr, host: &str) -> &mut BTreeMap<u16, To> {
        let at = match self.0.iter().position(|(a, h, _)| *a == addr && h == host) {
            Some(at) => at,
            None => {
                self.0.push((addr, host.to_owned(), BTreeMap::new()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].2
    }
}

/// The routes of the box, in a stable order: hosts as they first come (the
/// environment's addresses as listed, then the wiring's), each host's ports
/// in ascending order.
pub fn routes(
    endpoints: &[Assigned],
    names: &BTreeMap<String, Ipv4Addr>,
    wiring: &Wiring,
) -> Vec<Route> {
    let mut by_host = Hosts::default();
    let ranges: Vec<(ipnet::Ipv4Net, u16)> = wiring
        .ranges
        .iter()
        .filter_map(|r| Some((r.range.parse().ok()?, r.port)))
        .collect();
    for a in endpoints {
        let in_range = a.endpoint.host.ipv4().is_some()
            && ranges
                .iter()
                .any(|(net, port)| *port == a.endpoint.port && net.contains(&a.addr));
        if !in_range {
            by_host
                .ports(a.addr, a.endpoint.host.as_str())
                .insert(a.endpoint.port, To::Env);
        }
    }
    let addr_of = |host: &str| names.get(host).copied();
    for s in &wiring.services {
        if let Some(addr) = addr_of(&s.host) {
            let to = match s.mode {
                WireMode::Box => To::Box(s.target_port),
                WireMode::External => To::External,
            };
            by_host.ports(addr, &s.host).insert(s.port, to);
        }
    }
    for l in &wiring.links {
        if let Some(addr) = addr_of(l.host.as_str()) {
            by_host
                .ports(addr, l.host.as_str())
                .insert(l.port, To::Link);
        }
    }
    for name in &wiring.names {
        if let Some(addr) = addr_of(name) {
            by_host.ports(addr, name);
        }
    }
    let mut out = Vec::new();
    for (addr, host, mut ports) in by_host.0 {
        if host.parse::<Ipv4Addr>().is_err() {
            ports.entry(80).or_insert(To::Scene);
        }
        out.extend(ports.into_iter().map(|(port, to)| Route {
            host: host.clone(),
            addr,
            port,
            to,
        }));
    }
    out
}

/// The host names the wiring needs an address for, beyond the
/// environment's: declared and linked names, in the order they come.
pub fn wired_names(wiring: &Wiring) -> Vec<String> {
    let mut seen = BTreeSet::new();
    wiring
        .services
        .iter()
        .map(|s| s.host.as_str())
        .chain(wiring.names.iter().map(String::as_str))
        .chain(wiring.links.iter().map(|l| l.host.as_str()))
        .filter(|h| h.parse::<Ipv4Addr>().is_err())
        .filter(|h| seen.insert(*h))
        .map(str::to_owned)
        .collect()
}

/// The listed IPv4 addresses whose connections still go to an entry.
pub fn literals(routes: &[Route]) -> Vec<Ipv4Addr> {
    let set: BTreeSet<Ipv4Addr> = routes
        .iter()
        .filter(|r| r.host.parse::<Ipv4Addr>().is_ok())
        .map(|r| r.addr)
        .collect();
    set.into_iter().collect()
}

/// The ranges' rules: `range`, `port` and the target port in the box.
pub fn range_rules(ranges: &[DeclaredRange]) -> Vec<(ipnet::Ipv4Net, u16, u16)> {
    ranges
        .iter()
        .filter_map(|r| Some((r.range.parse().ok()?, r.port, r.target_port)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use psbx_wire::boxd::Declared;
    use psbx_wire::{Endpoint, HostName};

    fn assigned(host: &str, port: u16, addr: [u8; 4]) -> Assigned {
        Assigned {
            endpoint: Endpoint::new(HostName::parse(host).unwrap(), port),
            addr: addr.into(),
        }
    }

    fn declared(host: &str, port: u16, target_port: u16, mode: WireMode) -> Declared {
        Declared {
            host: host.into(),
            port,
            target_port,
            mode,
        }
    }

    fn ep(host: &str, port: u16) -> Endpoint {
        Endpoint::new(HostName::parse(host).unwrap(), port)
    }

    #[test]
    fn links_then_declared_then_the_connector_and_the_scene_on_80() {
        let endpoints = [
            assigned("api.svc.local", 8080, [198, 18, 0, 2]),
            assigned("db.internal", 5432, [198, 18, 0, 3]),
            assigned("lb.internal", 80, [198, 18, 0, 4]),
            assigned("10.9.8.7", 8080, [10, 9, 8, 7]),
            assigned("172.16.5.5", 9090, [172, 16, 5, 5]),
            assigned("orders.svc.local", 7070, [198, 18, 0, 5]),
        ];
        let mut names: BTreeMap<String, Ipv4Addr> = endpoints
            .iter()
            .filter(|a| a.endpoint.host.ipv4().is_none())
            .map(|a| (a.endpoint.host.to_string(), a.addr))
            .collect();
        names.insert("web.svc.local".into(), [198, 18, 0, 6].into());
        names.insert("shop.svc.local".into(), [198, 18, 0, 7].into());
        let wiring = Wiring {
            services: vec![
                declared("api.svc.local", 8080, 8080, WireMode::Box),
                declared("web.svc.local", 3000, 3000, WireMode::Box),
                declared("shop.svc.local", 8090, 8090, WireMode::External),
                declared("orders.svc.local", 7070, 7071, WireMode::Box),
            ],
            ranges: vec![DeclaredRange {
                range: "172.16.0.0/16".into(),
                port: 9090,
                target_port: 9000,
            }],
            links: vec![ep("orders.svc.local", 7070)],
            ..Wiring::default()
        };
        let routes = routes(&endpoints, &names, &wiring);
        let got: Vec<(&str, u16, To)> = routes
            .iter()
            .map(|r| (r.host.as_str(), r.port, r.to.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("api.svc.local", 80, To::Scene),
                ("api.svc.local", 8080, To::Box(8080)),
                ("db.internal", 80, To::Scene),
                ("db.internal", 5432, To::Env),
                ("lb.internal", 80, To::Env),
                ("10.9.8.7", 8080, To::Env),
                ("orders.svc.local", 80, To::Scene),
                ("orders.svc.local", 7070, To::Link),
                ("web.svc.local", 80, To::Scene),
                ("web.svc.local", 3000, To::Box(3000)),
                ("shop.svc.local", 80, To::Scene),
                ("shop.svc.local", 8090, To::External),
            ]
        );
        assert_eq!(literals(&routes), [Ipv4Addr::new(10, 9, 8, 7)]);
        assert_eq!(
            range_rules(&wiring.ranges),
            [("172.16.0.0/16".parse().unwrap(), 9090, 9000)]
        );
    }

    #[test]
    fn wired_names_come_once_in_order_without_literals() {
        let wiring = Wiring {
            services: vec![
                declared("b.lan", 1, 1, WireMode::Box),
                declared("a.lan", 2, 2, WireMode::Box),
                declared("b.lan", 3, 3, WireMode::Box),
            ],
            names: vec!["c.lan".into(), "a.lan".into()],
            links: vec![ep("d.lan", 4), ep("10.1.1.1", 5)],
            ..Wiring::default()
        };
        assert_eq!(wired_names(&wiring), ["b.lan", "a.lan", "c.lan", "d.lan"]);
    }
}
