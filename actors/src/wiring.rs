//! Declared services, address ranges and links to other boxes: checked and
//! normalised where a caller gives them (a start, `wire`), and turned into
//! what boxd is told ([`boxd_wiring`], `psbx_wire::boxd::Wiring`).
//!
//! A service's `name` is either a host name callers dial (`api.svc.local`,
//! lower-cased, without a trailing dot) or a private IPv4 range
//! (`172.16.0.0/16`; a bare address is a /32) inside 10/8, 172.16/12,
//! 192.168/16 or 100.64/10, which needs a `port`. A named service with a port
//! is in `box` mode (its connections reach the box's process on
//! `targetPort`) or `external` mode (boxd forwards HTTP to the external base
//! URL); at start the default is external when the box has an external base
//! URL, box otherwise.

use crate::spec::{BoxSpec, LinkSpec, Mode, ServiceSpec};
use ipnet::Ipv4Net;
use psbx_wire::boxd::{Declared, DeclaredRange, Wiring};
use psbx_wire::{Endpoint, HostName};
use std::net::Ipv4Addr;

/// The most services a box declares.
pub const MAX_SERVICES: usize = 50;
/// The most links a box has.
pub const MAX_LINKS: usize = 50;
/// The ranges a declared range must be inside.
pub const PRIVATE_RANGES: [&str; 4] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
];

/// What a service's name is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name {
    Host(String),
    Range(Ipv4Net),
}

/// A service's name, normalised: a host name, or a private range.
pub fn parse_name(field: &str, name: &str) -> Result<Name, String> {
    let trimmed = name.trim().trim_end_matches('.').to_ascii_lowercase();
    let looks_like_ip = trimmed.contains('/') || trimmed.parse::<Ipv4Addr>().is_ok();
    if looks_like_ip {
        let net: Ipv4Net = match trimmed.parse::<Ipv4Addr>() {
            Ok(ip) => Ipv4Net::from(ip),
            Err(_) => trimmed.parse().map_err(|_| {
                format!("{field} {name:?} is neither a host name nor an IPv4 range a.b.c.d/n")
            })?,
        };
        if net.network() != net.addr() {
            return Err(format!(
                "{field} {name:?} has host bits set: did you mean {}?",
                net.trunc()
            ));
        }
        let inside = PRIVATE_RANGES.iter().any(|r| {
            r.parse::<Ipv4Net>()
                .is_ok_and(|private| private.contains(&net))
        });
        if !inside {
            return Err(format!(
                "{field} {name:?} is not a private range: a declared range must be inside {}",
                PRIVATE_RANGES.join(", ")
            ));
        }
        return Ok(Name::Range(net));
    }
    if let Ok(host) = HostName::parse(&trimmed) {
        Ok(Name::Host(host.to_string()))
    } else {
        Err(format!(
            "{field} {name:?} is not a host name (letters, digits, - and _ in dot-separated labels) \
             or a private IPv4 range"
        ))
    }
}

fn nonzero(field: &str, port: Option<u16>) -> Result<(), String> {
    match port {
        Some(0) => Err(format!("{field} must be a port from 1 to 65535")),
        _ => Ok(()),
    }
}

/// One service checked: its name normalised, its mode decided (`default`
/// when it gives none and has a port).
pub fn check_service(
    mut service: ServiceSpec,
    base: Option<&str>,
    default: Mode,
) -> Result<ServiceSpec, String> {
    nonzero("services[].port", service.port)?;
    nonzero("services[].targetPort", service.target_port)?;
    if service.target_port.is_some() && service.port.is_none() {
        return Err(format!(
            "service {:?} has a targetPort but no port: port is what callers dial, targetPort what the \
             box's process listens on",
            service.name
        ));
    }
    match parse_name("services[].name", &service.name)? {
        Name::Range(net) => {
            if service.port.is_none() {
                return Err(format!(
                    "range {net} needs a port: the port callers dial on its addresses"
                ));
            }
            if service.mode == Some(Mode::External) {
                return Err(format!(
                    "range {net} cannot be in external mode: only named services forward HTTP to the \
                     external base URL"
                ));
            }
            service.name = net.to_string();
            service.mode = Some(Mode::Box);
        }
        Name::Host(host) => {
            service.name = host;
            if service.port.is_none() {
                if service.mode.is_some() {
                    return Err(format!(
                        "service {:?} has a mode but no port: give the port callers dial",
                        service.name
                    ));
                }
            } else {
                let mode = service.mode.unwrap_or(default);
                if mode == Mode::External && base.is_none() {
                    return Err(format!(
                        "service {}:{} cannot be in external mode: the box has no external base URL \
                         (give externalBaseUrl at start, or set it on the environment)",
                        service.name,
                        service.port.unwrap_or_default()
                    ));
                }
                service.mode = Some(mode);
            }
        }
    }
    Ok(service)
}

/// The services of a start, checked: each one ([`check_service`], external
/// mode by default when the box has an external base URL), no name:port
/// twice, at most [`MAX_SERVICES`].
pub fn check_services(
    services: Vec<ServiceSpec>,
    base: Option<&str>,
) -> Result<Vec<ServiceSpec>, String> {
    if services.len() > MAX_SERVICES {
        return Err(format!(
            "{} services: a box declares at most {MAX_SERVICES}",
            services.len()
        ));
    }
    let default = if base.is_some() {
        Mode::External
    } else {
        Mode::Box
    };
    let mut out: Vec<ServiceSpec> = Vec::new();
    for service in services {
        let service = check_service(service, base, default)?;
        if out
            .iter()
            .any(|s| s.name == service.name && s.port == service.port)
        {
            return Err(format!(
                "service {}{} is declared twice",
                service.name,
                service.port.map(|p| format!(":{p}")).unwrap_or_default()
            ));
        }
        out.push(service);
    }
    Ok(out)
}

/// An external base URL as given: `http(s)://host[:port][/path]`, without
/// credentials, query or fragment (a trailing `/` dropped).
pub fn check_external_base_url(url: &str) -> Result<String, String> {
    let bad =
        |why: &str| format!("externalBaseUrl {url:?} {why}: give http(s)://host[:port][/path]");
    let parsed = url::Url::parse(url).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("is not http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("holds credentials, which would be stored with the box"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("has a query or fragment"));
    }
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

/// A link's name and ports, checked (the box it names is checked by its
/// caller, who can see the account's boxes).
pub fn check_link(link: &mut LinkSpec) -> Result<(), String> {
    nonzero("links[].port", Some(link.port))?;
    nonzero("links[].targetPort", Some(link.target_port))?;
    match parse_name("links[].name", &link.name)? {
        Name::Host(host) => {
            link.name = host;
            Ok(())
        }
        Name::Range(_) => Err(format!(
            "links[].name {:?} is an address: a link is a host name the box's programs dial",
            link.name
        )),
    }
}

/// The box's links checked together: each one, no name:port twice, none
/// that is also a declared name:port, at most [`MAX_LINKS`].
pub fn check_links(links: &mut [LinkSpec], services: &[ServiceSpec]) -> Result<(), String> {
    if links.len() > MAX_LINKS {
        return Err(format!(
            "{} links: a box has at most {MAX_LINKS}",
            links.len()
        ));
    }
    for i in 0..links.len() {
        check_link(&mut links[i])?;
        let (name, port) = (&links[i].name, links[i].port);
        if links[..i].iter().any(|l| &l.name == name && l.port == port) {
            return Err(format!("link {name}:{port} is given twice"));
        }
        if services
            .iter()
            .any(|s| &s.name == name && s.port == Some(port))
        {
            return Err(format!(
                "{name}:{port} is both a declared service and a link: choose one"
            ));
        }
    }
    Ok(())
}

/// A change of a running box's wiring (`wire`).
#[derive(Debug, Clone, Default)]
pub struct WireChange {
    pub service: Option<ServiceChange>,
    /// Added, each replacing a link of the same name:port (their boxes
    /// already checked by the caller).
    pub links: Vec<LinkSpec>,
}

/// A declared service changed, or declared now.
#[derive(Debug, Clone, Default)]
pub struct ServiceChange {
    pub name: String,
    pub mode: Option<Mode>,
    pub port: Option<u16>,
    pub target_port: Option<u16>,
    pub version: Option<String>,
}

/// Why a change was refused: the request on its own (a name, a port, a link
/// it gives; 400), or how it meets what the box declares now (a service it
/// does not declare, one declared on several ports, external mode in a box
/// without an external base URL, a name:port both linked and declared, the
/// most services; 409).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Invalid(String),
    Conflict(String),
}

/// The change checked on its own, before the box is asked (or thawed): the
/// service's name (a range is declared at start only) and ports, and the
/// links it adds.
pub fn check_change(change: &WireChange) -> Result<(), String> {
    if let Some(c) = &change.service {
        if let Name::Range(net) = parse_name("service", &c.name)? {
            return Err(format!(
                "range {net} is declared at sandbox_start only: start a new box to change it"
            ));
        }
        nonzero("port", c.port)?;
        nonzero("targetPort", c.target_port)?;
    }
    if change.links.len() > MAX_LINKS {
        return Err(format!(
            "{} links: a box has at most {MAX_LINKS}",
            change.links.len()
        ));
    }
    for link in &change.links {
        check_link(&mut link.clone())?;
    }
    Ok(())
}

/// The spec with `change` made: the service named (with `port`, the one
/// declared on that port, else its only one) gets the mode, target port and
/// version given; a name:port not declared yet is declared now, in box mode
/// unless a mode is given (its name is then taken over in place). Links are
/// added, replacing those of the same name:port.
pub fn apply(spec: &BoxSpec, change: &WireChange) -> Result<BoxSpec, Refused> {
    check_change(change).map_err(Refused::Invalid)?;
    merge(spec, change).map_err(Refused::Conflict)
}

/// [`apply`] on a change checked on its own: what is refused now is how it
/// meets the box's declarations.
fn merge(spec: &BoxSpec, change: &WireChange) -> Result<BoxSpec, String> {
    let mut spec = spec.clone();
    if let Some(c) = &change.service {
        let name = match parse_name("service", &c.name)? {
            Name::Host(host) => host,
            Name::Range(net) => {
                return Err(format!(
                    "range {net} is declared at sandbox_start only: start a new box to change it"
                ));
            }
        };
        let on_name: Vec<usize> = (0..spec.services.len())
            .filter(|i| spec.services[*i].name == name)
            .collect();
        let found = match c.port {
            Some(port) => on_name
                .iter()
                .copied()
                .find(|i| spec.services[*i].port == Some(port)),
            None => match on_name.as_slice() {
                [one] => Some(*one),
                [] => {
                    return Err(format!(
                        "service {name:?} is not declared in this box: give port (the port callers dial) to declare it"
                    ));
                }
                several => {
                    let ports: Vec<String> = several
                        .iter()
                        .filter_map(|i| spec.services[*i].port.map(|p| p.to_string()))
                        .collect();
                    return Err(format!(
                        "service {name:?} is declared on ports {}: give port to say which",
                        ports.join(", ")
                    ));
                }
            },
        };
        let base = spec.external_base_url().map(str::to_owned);
        let changed = match found {
            Some(i) => {
                let mut s = spec.services[i].clone();
                if s.port.is_none() {
                    s.port = c.port;
                }
                s.mode = c.mode.or(s.mode);
                s.target_port = c.target_port.or(s.target_port);
                s.version = c.version.clone().or(s.version);
                let s = check_service(s, base.as_deref(), Mode::Box)?;
                spec.services[i] = s;
                i
            }
            None => {
                if spec.services.len() >= MAX_SERVICES {
                    return Err(format!("a box declares at most {MAX_SERVICES} services"));
                }
                let s = ServiceSpec {
                    name,
                    port: c.port,
                    target_port: c.target_port,
                    version: c.version.clone(),
                    mode: c.mode,
                };
                spec.services
                    .push(check_service(s, base.as_deref(), Mode::Box)?);
                spec.services.len() - 1
            }
        };
        let s = &spec.services[changed];
        if spec
            .links
            .iter()
            .any(|l| l.name == s.name && Some(l.port) == s.port)
        {
            return Err(format!(
                "{}:{} is linked to another box: it cannot also be declared",
                s.name,
                s.port.unwrap_or_default()
            ));
        }
    }
    for link in &change.links {
        let mut link = link.clone();
        check_link(&mut link)?;
        spec.links
            .retain(|l| !(l.name == link.name && l.port == link.port));
        spec.links.push(link);
    }
    let mut links = std::mem::take(&mut spec.links);
    check_links(&mut links, &spec.services)?;
    spec.links = links;
    Ok(spec)
}

/// What boxd is told about the box's services and links.
pub fn boxd_wiring(spec: &BoxSpec) -> Wiring {
    let mut wiring = Wiring {
        external_base_url: spec.external_base_url().map(str::to_owned),
        ..Wiring::default()
    };
    for s in &spec.services {
        let Ok(name) = parse_name("services[].name", &s.name) else {
            continue;
        };
        match (name, s.port) {
            (Name::Range(net), Some(port)) => wiring.ranges.push(DeclaredRange {
                range: net.to_string(),
                port,
                target_port: s.target_port.unwrap_or(port),
            }),
            (Name::Host(host), Some(port)) => wiring.services.push(Declared {
                host,
                port,
                target_port: s.target_port.unwrap_or(port),
                mode: s.mode.unwrap_or(Mode::Box),
            }),
            (Name::Host(host), None) => wiring.names.push(host),
            (Name::Range(_), None) => {}
        }
    }
    wiring.links = spec
        .links
        .iter()
        // Checked as host names when they were linked (`check`): one that
        // no longer reads as one is left out rather than sent.
        .filter_map(|l| {
            HostName::parse(&l.name)
                .ok()
                .map(|h| Endpoint::new(h, l.port))
        })
        .collect();
    wiring
}

/// Whether the box's own wiring takes `address` from the connector: a
/// declared or linked host:port, or a listed IPv4 address in a declared
/// range on its port (`reachable` leaves those out).
pub fn takes(spec: &BoxSpec, address: &Endpoint) -> bool {
    let host = address.host.as_str();
    let ip = address.host.ipv4();
    spec.links
        .iter()
        .any(|l| l.name == host && l.port == address.port)
        || spec.services.iter().any(|s| {
            s.port == Some(address.port)
                && match parse_name("", &s.name) {
                    Ok(Name::Host(name)) => name == host,
                    Ok(Name::Range(net)) => ip.is_some_and(|ip| net.contains(&ip)),
                    Err(_) => false,
                }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(name: &str, port: Option<u16>, target: Option<u16>, mode: Option<Mode>) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            port,
            target_port: target,
            version: None,
            mode,
        }
    }

    #[test]
    fn names_are_host_names_or_private_ranges() {
        assert_eq!(
            parse_name("n", "API.svc.local.").unwrap(),
            Name::Host("api.svc.local".into())
        );
        assert_eq!(
            parse_name("n", "172.16.0.0/16").unwrap(),
            Name::Range("172.16.0.0/16".parse().unwrap())
        );
        assert_eq!(
            parse_name("n", "10.1.2.3").unwrap(),
            Name::Range("10.1.2.3/32".parse().unwrap())
        );
        let public = parse_name("n", "8.8.0.0/16").unwrap_err();
        assert!(
            public.contains("not a private range") && public.contains("100.64.0.0/10"),
            "{public}"
        );
        assert!(
            parse_name("n", "172.0.0.0/8").is_err(),
            "wider than 172.16/12"
        );
        assert!(parse_name("n", "169.254.0.0/16").is_err(), "link-local");
        let bits = parse_name("n", "172.16.5.0/16").unwrap_err();
        assert!(bits.contains("did you mean 172.16.0.0/16"), "{bits}");
        assert!(parse_name("n", "a b").is_err());
        assert!(parse_name("n", "10.0.0.0/33").is_err());
    }

    #[test]
    fn modes_default_by_the_base_url_and_are_checked() {
        let base = Some("http://dev.example");
        let got = check_services(
            vec![
                svc("api.svc.local", Some(8080), None, None),
                svc("web", Some(3000), None, Some(Mode::Box)),
                svc("172.16.0.0/16", Some(9090), None, None),
                svc("docs", None, None, None),
            ],
            base,
        )
        .unwrap();
        let modes: Vec<Option<Mode>> = got.iter().map(|s| s.mode).collect();
        assert_eq!(
            modes,
            [Some(Mode::External), Some(Mode::Box), Some(Mode::Box), None]
        );
        let none = check_services(vec![svc("api", Some(1), None, None)], None).unwrap();
        assert_eq!(none[0].mode, Some(Mode::Box));
        for (bad, says) in [
            (
                svc("api", Some(1), None, Some(Mode::External)),
                "no external base URL",
            ),
            (svc("api", None, Some(2), None), "no port"),
            (svc("10.0.0.0/8", None, None, None), "needs a port"),
            (svc("api", Some(0), None, None), "from 1 to 65535"),
        ] {
            let e = check_services(vec![bad], None).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let twice = check_services(
            vec![
                svc("API", Some(1), None, None),
                svc("api", Some(1), None, None),
            ],
            None,
        )
        .unwrap_err();
        assert!(twice.contains("declared twice"), "{twice}");
    }

    #[test]
    fn base_urls_are_http_without_credentials() {
        assert_eq!(
            check_external_base_url("https://dev.example.com/").unwrap(),
            "https://dev.example.com"
        );
        assert_eq!(
            check_external_base_url("http://203.0.113.5:8000/base").unwrap(),
            "http://203.0.113.5:8000/base"
        );
        for bad in [
            "ftp://x",
            "https://u:p@x",
            "https://x/?a=1",
            "dev.example.com",
        ] {
            assert!(check_external_base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn boxd_gets_the_wiring_and_reachable_leaves_taken_addresses_out() {
        let spec = BoxSpec {
            services: check_services(
                vec![
                    svc("api.svc.local", Some(8080), None, None),
                    svc("lb", Some(80), Some(8080), None),
                    svc("172.16.0.0/16", Some(9090), None, None),
                    svc("docs", None, None, None),
                ],
                None,
            )
            .unwrap(),
            links: vec![LinkSpec {
                name: "orders".into(),
                port: 7070,
                box_id: "box_a".into(),
                target_port: 7070,
            }],
            external_base_url: Some("http://x".into()),
            ..BoxSpec::default()
        };
        let w = boxd_wiring(&spec);
        assert_eq!(w.services.len(), 2);
        assert_eq!(w.services[1].target_port, 8080);
        assert_eq!(w.ranges[0].range, "172.16.0.0/16");
        assert_eq!(w.names, ["docs"]);
        assert_eq!(w.links[0].host, "orders");
        assert_eq!(w.external_base_url.as_deref(), Some("http://x"));
        let at = |host: &str, port| Endpoint::new(HostName::parse(host).unwrap(), port);
        assert!(takes(&spec, &at("api.svc.local", 8080)));
        assert!(!takes(&spec, &at("api.svc.local", 8081)));
        assert!(takes(&spec, &at("172.16.5.5", 9090)));
        assert!(!takes(&spec, &at("172.17.5.5", 9090)));
        assert!(takes(&spec, &at("orders", 7070)));
    }

    #[test]
    fn wire_changes_modes_declares_names_and_adds_links() {
        let spec = BoxSpec {
            services: check_services(
                vec![
                    svc("shop", Some(8090), None, None),
                    svc("api", Some(1), None, None),
                    svc("api", Some(2), None, None),
                ],
                Some("http://dev"),
            )
            .unwrap(),
            external_base_url: Some("http://dev".into()),
            ..BoxSpec::default()
        };
        let change = |name: &str, port, mode| WireChange {
            service: Some(ServiceChange {
                name: name.into(),
                port,
                mode,
                ..ServiceChange::default()
            }),
            links: vec![],
        };
        let boxed = apply(&spec, &change("SHOP", None, Some(Mode::Box))).unwrap();
        assert_eq!(boxed.services[0].mode, Some(Mode::Box));
        // Declared later with a port: the box's own process.
        let new = apply(&spec, &change("orders", Some(7070), None)).unwrap();
        assert_eq!(new.services[3].mode, Some(Mode::Box));
        assert_eq!(new.services[3].port, Some(7070));
        // What depends on the box's declarations is a conflict; what is
        // wrong with the request alone is invalid.
        let Err(Refused::Conflict(which)) = apply(&spec, &change("api", None, Some(Mode::Box)))
        else {
            panic!("several ports: not a conflict");
        };
        assert!(which.contains("ports 1, 2"), "{which}");
        let Err(Refused::Conflict(unknown)) = apply(&spec, &change("nope", None, Some(Mode::Box)))
        else {
            panic!("an undeclared service: not a conflict");
        };
        assert!(unknown.contains("not declared"), "{unknown}");
        let no_base = BoxSpec {
            external_base_url: None,
            ..spec.clone()
        };
        assert!(matches!(
            apply(
                &no_base,
                &change("orders", Some(7070), Some(Mode::External))
            ),
            Err(Refused::Conflict(_))
        ));
        assert!(matches!(
            apply(&spec, &change("10.0.0.0/8", Some(1), None)),
            Err(Refused::Invalid(_))
        ));
        assert!(matches!(
            apply(&spec, &change("orders", Some(0), None)),
            Err(Refused::Invalid(_))
        ));
        let link = LinkSpec {
            name: "orders".into(),
            port: 7070,
            box_id: "box_a".into(),
            target_port: 7070,
        };
        let linked = apply(
            &spec,
            &WireChange {
                service: None,
                links: vec![
                    link.clone(),
                    LinkSpec {
                        target_port: 9,
                        ..link.clone()
                    },
                ],
            },
        )
        .unwrap();
        assert_eq!(linked.links.len(), 1);
        assert_eq!(linked.links[0].target_port, 9);
        assert!(matches!(
            apply(&linked, &change("orders", Some(7070), None)),
            Err(Refused::Conflict(_))
        ));
    }

    #[test]
    fn links_are_names_not_taken_twice() {
        let link = |name: &str, port| LinkSpec {
            name: name.into(),
            port,
            box_id: "box_a".into(),
            target_port: port,
        };
        let services = [svc("api", Some(1), None, Some(Mode::Box))];
        check_links(&mut [link("Orders", 2)], &services).unwrap();
        assert!(check_links(&mut [link("api", 1)], &services).is_err());
        assert!(check_links(&mut [link("a", 2), link("a", 2)], &services).is_err());
        assert!(check_links(&mut [link("10.0.0.1", 2)], &services).is_err());
    }
}
