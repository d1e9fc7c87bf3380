//! Which address each environment address has in the box: every distinct host
//! name gets one of its own from 198.18.0.0/15 (198.18.0.2, .3, …, in the
//! order the names come; 198.18.0.1 is boxd's DNS), an IPv4 literal keeps its
//! own. Addresses listed as literals are never handed to a name. Names the
//! box's wiring adds (declared services, links) get the next free addresses
//! ([`extend`]); a name keeps its address for as long as the box runs, also
//! when the wiring changes. A restarted boxd does not assign again: it takes
//! the addresses from the setup it kept (`saved`), after [`check`]ing them.

use super::error::{KeptError, SetupError};
use psbx_wire::{Endpoint, HostName};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// boxd's DNS server, and the address put on `lo` (with the whole range).
pub const DNS_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The range names get their addresses from (RFC 2544's benchmarking range,
/// never routed on the internet).
pub const RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
/// The most addresses a box takes (the server enforces it too).
pub const MAX_ENDPOINTS: usize = 200;

/// An environment address and where it is in the box.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Assigned {
    pub endpoint: Endpoint,
    /// The name's own address, or the literal itself.
    pub addr: Ipv4Addr,
}

/// Addresses for `endpoints` (duplicates dropped, order kept); fails on too
/// many addresses (each host was checked when the claim was read:
/// [`HostName`]).
pub fn assign(endpoints: &[Endpoint]) -> Result<Vec<Assigned>, SetupError> {
    if endpoints.len() > MAX_ENDPOINTS {
        return Err(SetupError::TooManyAddresses {
            count: endpoints.len(),
            max: MAX_ENDPOINTS,
        });
    }
    let literals: BTreeSet<Ipv4Addr> = endpoints.iter().filter_map(|e| e.host.ipv4()).collect();
    let last = last_name_address();
    let mut next = u32::from(DNS_ADDR) + 1;
    let mut names: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    let mut out: Vec<Assigned> = Vec::new();
    for endpoint in endpoints {
        let host = endpoint.host.as_str();
        let addr = if let Some(ip) = endpoint.host.ipv4() {
            ip
        } else if let Some(addr) = names.get(host) {
            *addr
        } else {
            while literals.contains(&Ipv4Addr::from(next)) {
                next += 1;
            }
            if next > last {
                return Err(SetupError::RangeFull);
            }
            let addr = Ipv4Addr::from(next);
            next += 1;
            names.insert(host.to_owned(), addr);
            addr
        };
        if !out.iter().any(|a| a.endpoint == *endpoint) {
            out.push(Assigned {
                endpoint: endpoint.clone(),
                addr,
            });
        }
    }
    Ok(out)
}

/// Checks addresses given before (read back from a file) against the
/// endpoints they were given for: the same addresses, in the same order, as
/// [`assign`] makes of them; each name at one address of its own from the
/// range (past boxd's DNS), each literal at itself.
pub fn check(endpoints: &[Endpoint], assigned: &[Assigned]) -> Result<(), SetupError> {
    let fresh = assign(endpoints)?;
    if fresh.len() != assigned.len()
        || fresh
            .iter()
            .zip(assigned)
            .any(|(f, a)| f.endpoint != a.endpoint)
    {
        return Err(KeptError::NotTheEndpoints.into());
    }
    let mut by_host: BTreeMap<&str, Ipv4Addr> = BTreeMap::new();
    let mut by_addr: BTreeMap<Ipv4Addr, &str> = BTreeMap::new();
    for a in assigned {
        let host = a.endpoint.host.as_str();
        let fits = match host.parse::<Ipv4Addr>() {
            Ok(literal) => literal == a.addr,
            Err(_) => (u32::from(DNS_ADDR) + 1..=last_name_address()).contains(&u32::from(a.addr)),
        };
        if !fits {
            return Err(KeptError::OutOfPlace {
                host: host.to_owned(),
                addr: a.addr,
            }
            .into());
        }
        if *by_host.entry(host).or_insert(a.addr) != a.addr {
            return Err(KeptError::TwoAddresses(host.to_owned()).into());
        }
        let owner = *by_addr.entry(a.addr).or_insert(host);
        if owner != host {
            return Err(KeptError::SharedAddress {
                host: host.to_owned(),
                owner: owner.to_owned(),
                addr: a.addr,
            }
            .into());
        }
    }
    Ok(())
}

/// A name the box's wiring added and its address.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Named {
    pub host: String,
    pub addr: Ipv4Addr,
}

/// Gives each of `wanted` that has no address yet (among the environment's
/// names or `extra`) the next free one, appended to `extra`.
pub fn extend(
    assigned: &[Assigned],
    extra: &mut Vec<Named>,
    wanted: &[String],
) -> Result<(), SetupError> {
    let mut used: BTreeSet<Ipv4Addr> = assigned.iter().map(|a| a.addr).collect();
    used.extend(extra.iter().map(|n| n.addr));
    let mut known: BTreeSet<String> = names(assigned).into_keys().collect();
    known.extend(extra.iter().map(|n| n.host.clone()));
    let mut next = u32::from(DNS_ADDR) + 1;
    for host in wanted {
        if known.contains(host) {
            continue;
        }
        if HostName::parse(host).is_err() {
            return Err(SetupError::NotAHost(host.clone()));
        }
        while used.contains(&Ipv4Addr::from(next)) {
            next += 1;
        }
        if next > last_name_address() {
            return Err(SetupError::RangeFull);
        }
        let addr = Ipv4Addr::from(next);
        used.insert(addr);
        known.insert(host.clone());
        extra.push(Named {
            host: host.clone(),
            addr,
        });
    }
    Ok(())
}

/// Checks names added by the wiring, read back from a file: each a name the
/// environment does not have, at an address of its own from the range.
pub fn check_extra(assigned: &[Assigned], extra: &[Named]) -> Result<(), SetupError> {
    let mut by_addr: BTreeMap<Ipv4Addr, &str> = assigned
        .iter()
        .map(|a| (a.addr, a.endpoint.host.as_str()))
        .collect();
    let env_names = names(assigned);
    for n in extra {
        if HostName::parse(&n.host).is_err() || env_names.contains_key(&n.host) {
            return Err(KeptError::TwoAddresses(n.host.clone()).into());
        }
        if !(u32::from(DNS_ADDR) + 1..=last_name_address()).contains(&u32::from(n.addr)) {
            return Err(KeptError::OutOfPlace {
                host: n.host.clone(),
                addr: n.addr,
            }
            .into());
        }
        if let Some(owner) = by_addr.insert(n.addr, &n.host) {
            return Err(KeptError::SharedAddress {
                host: n.host.clone(),
                owner: owner.to_owned(),
                addr: n.addr,
            }
            .into());
        }
    }
    Ok(())
}

/// Every host name the box answers and its address: the environment's and
/// the wiring's.
pub fn all_names(assigned: &[Assigned], extra: &[Named]) -> BTreeMap<String, Ipv4Addr> {
    let mut all = names(assigned);
    all.extend(extra.iter().map(|n| (n.host.clone(), n.addr)));
    all
}

/// The last address a name can get: the range's last but its broadcast.
fn last_name_address() -> u32 {
    u32::from(RANGE.0) + (1u32 << (32 - RANGE.1)) - 2
}

/// The host names and their addresses, for the DNS server.
pub fn names(assigned: &[Assigned]) -> BTreeMap<String, Ipv4Addr> {
    assigned
        .iter()
        .filter(|a| a.endpoint.host.ipv4().is_none())
        .map(|a| (a.endpoint.host.to_string(), a.addr))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, port: u16) -> Endpoint {
        Endpoint::new(HostName::parse(host).unwrap(), port)
    }

    #[test]
    fn names_get_their_own_addresses_and_literals_keep_theirs() {
        let assigned = assign(&[
            ep("db.internal", 5432),
            ep("10.9.8.7", 8080),
            ep("DB.internal", 6432),
            ep("198.18.0.3", 80),
            ep("cache.internal", 6379),
            ep("db.internal", 5432),
        ])
        .unwrap();
        let got: Vec<(String, u16, Ipv4Addr)> = assigned
            .iter()
            .map(|a| (a.endpoint.host.to_string(), a.endpoint.port, a.addr))
            .collect();
        assert_eq!(
            got,
            vec![
                ("db.internal".into(), 5432, Ipv4Addr::new(198, 18, 0, 2)),
                ("10.9.8.7".into(), 8080, Ipv4Addr::new(10, 9, 8, 7)),
                ("db.internal".into(), 6432, Ipv4Addr::new(198, 18, 0, 2)),
                ("198.18.0.3".into(), 80, Ipv4Addr::new(198, 18, 0, 3)),
                // .3 is a listed literal: skipped.
                ("cache.internal".into(), 6379, Ipv4Addr::new(198, 18, 0, 4)),
            ]
        );
        let names = names(&assigned);
        assert_eq!(names.len(), 2);
        assert_eq!(names["cache.internal"], Ipv4Addr::new(198, 18, 0, 4));
    }

    #[test]
    fn two_hundred_names_fit_and_bad_hosts_are_refused() {
        let many: Vec<_> = (0..200).map(|i| ep(&format!("h{i}.lan"), 1)).collect();
        let assigned = assign(&many).unwrap();
        assert_eq!(assigned[199].addr, Ipv4Addr::new(198, 18, 0, 201));
        let mut more = many.clone();
        more.push(ep("x.lan", 1));
        assert!(
            assign(&more)
                .unwrap_err()
                .to_string()
                .contains("at most 200")
        );
        // A bad host never reaches assign: the claim's JSON is refused.
        for host in ["a b", "a;drop", ""] {
            let json = format!(r#"{{"host": {host:?}, "port": 1}}"#);
            assert!(serde_json::from_str::<Endpoint>(&json).is_err(), "{host:?}");
        }
    }

    #[test]
    fn wired_names_get_free_addresses_and_keep_them() {
        let assigned = assign(&[ep("db.internal", 5432), ep("198.18.0.3", 80)]).unwrap();
        let mut extra = Vec::new();
        let wanted = ["api.lan".to_owned(), "db.internal".to_owned()];
        extend(&assigned, &mut extra, &wanted).unwrap();
        assert_eq!(
            extra,
            [Named {
                host: "api.lan".into(),
                addr: Ipv4Addr::new(198, 18, 0, 4)
            }]
        );
        extend(
            &assigned,
            &mut extra,
            &["web.lan".to_owned(), "api.lan".to_owned()],
        )
        .unwrap();
        assert_eq!(extra[1].addr, Ipv4Addr::new(198, 18, 0, 5));
        assert_eq!(extra.len(), 2);
        check_extra(&assigned, &extra).unwrap();
        assert_eq!(all_names(&assigned, &extra).len(), 3);
        assert!(extend(&assigned, &mut extra, &["a b".to_owned()]).is_err());
        let mut bad = extra.clone();
        bad[1].addr = bad[0].addr;
        assert!(check_extra(&assigned, &bad).is_err());
        bad[1].addr = Ipv4Addr::new(198, 18, 0, 3);
        assert!(check_extra(&assigned, &bad).is_err(), "a listed literal");
        bad[1] = Named {
            host: "db.internal".into(),
            addr: Ipv4Addr::new(198, 18, 0, 9),
        };
        assert!(check_extra(&assigned, &bad).is_err(), "an environment name");
    }

    #[test]
    fn check_takes_what_assign_gave_and_no_shared_address() {
        let endpoints = [
            ep("a.lan", 1),
            ep("198.18.0.3", 2),
            ep("b.lan", 3),
            ep("A.lan", 4),
        ];
        let assigned = assign(&endpoints).unwrap();
        check(&endpoints, &assigned).unwrap();
        let mut moved = assigned.clone();
        moved[2].addr = Ipv4Addr::new(198, 19, 255, 254);
        check(&endpoints, &moved).unwrap();
        moved[2].addr = Ipv4Addr::new(198, 19, 255, 255);
        assert!(check(&endpoints, &moved).is_err(), "the broadcast");
        let mut shared = assigned.clone();
        shared[2].addr = shared[0].addr;
        assert!(
            check(&endpoints, &shared)
                .unwrap_err()
                .to_string()
                .contains("same address"),
            "two names"
        );
        shared[2].addr = Ipv4Addr::new(198, 18, 0, 3);
        assert!(
            check(&endpoints, &shared)
                .unwrap_err()
                .to_string()
                .contains("same address"),
            "a name at a literal"
        );
    }
}
