//! The box's names and its way to its environment's private addresses
//! (DESIGN.md §6). From boot ([`PrivateNet::start`]): boxd's DNS on
//! 198.18.0.1 (`dns`), which forwards through the box channel,
//! `/etc/resolv.conf` pointing at it (`resolv`), and the nftables table
//! (`rules`) that keeps private ranges out of reach. At claim (`configure`
//! with `endpoints` and the box's `wiring`): an address per host name
//! (`addresses`), where each host:port goes (`plan`): an entry per
//! environment address or link (`entry`), boxd's HTTP proxy for a declared
//! service in external mode (`external`), the scene entry on port 80
//! (`scene`), or straight to the box's own process; those names in the DNS,
//! and the rules that send each address to its place. Everything is in
//! place before the claim is answered. `wire` replaces the wiring later: the
//! names keep their addresses, listeners still needed are kept, and those no
//! longer needed are closed with their connections (take-over in place). A failed connection is traced to the program that made it
//! (`owner`), for the command's `privateEndpointErrors`.
//!
//! The setup is then kept in `/run/psbx/` (`saved`): a boxd restarted in the
//! same boot (it crashed, was killed) finds it at start and sets the same
//! addresses up again before it serves — new entries, its DNS, the nftables
//! table replaced with the new entries' ports, resolv.conf rewritten — so that
//! the names keep resolving to what programs in the box cached.

mod accept;
mod addresses;
mod dns;
mod entry;
mod error;
pub(crate) mod external;
mod owner;
mod plan;
mod resolv;
pub mod rules;
mod saved;
mod scene;

pub use error::SetupError;

use crate::uplink::Uplink;
use plan::To;
use psbx_wire::Endpoint;
use psbx_wire::boxd::{EndpointFailure, PrivateEndpointHealth, Wiring};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The log of failed connections, under the box's work directory.
pub const LOG: &str = ".sbx/logs/private-endpoints.log";

/// The box's DNS and the listeners of the box (none until a claim brings
/// addresses or wiring).
pub struct PrivateNet {
    setup: tokio::sync::Mutex<Option<Setup>>,
    held: Mutex<Vec<Held>>,
    failures: Arc<Failures>,
    dns: Arc<dns::Dns>,
}

/// What the box was set up with, and the addresses its names got: what is
/// kept for a restarted boxd, too.
type Setup = saved::Saved;

/// What a listener of boxd's serves.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Env,
    Link,
    /// The HTTP proxy to this external base URL.
    External(String),
    Scene,
}

/// A listener boxd holds for one host:port.
struct Held {
    host: String,
    port: u16,
    kind: Kind,
    /// Its port on 127.0.0.1.
    local_port: u16,
    closed: CancellationToken,
    health: Option<Counted>,
    /// Opened by the change being made (closed again if it fails).
    fresh: bool,
}

/// A listener that counts its connections, for health.
enum Counted {
    Entry(Arc<entry::Entry>),
    External(Arc<external::External>),
}

/// The latest failed connections, numbered, so that a command can be told
/// which of them it caused.
#[derive(Default)]
pub struct Failures {
    recent: Mutex<std::collections::VecDeque<Failure>>,
    next: std::sync::atomic::AtomicU64,
}

struct Failure {
    number: u64,
    failure: EndpointFailure,
    /// The process that made the connection and its parents, when known
    /// (not for a container's connection: `owner`).
    lineage: Option<Vec<u32>>,
}

/// How many failures are kept for commands to read.
const KEPT_FAILURES: usize = 100;

impl Failures {
    /// Notes a failure, with the process that made the connection and its
    /// parents when known.
    pub fn push(&self, failure: EndpointFailure, lineage: Option<Vec<u32>>) {
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut recent) = self.recent.lock() {
            if recent.len() == KEPT_FAILURES {
                recent.pop_front();
            }
            recent.push_back(Failure {
                number,
                failure,
                lineage,
            });
        }
    }

    /// Where the failures stand now.
    pub fn mark(&self) -> u64 {
        self.next.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The failures since `mark` (at most the last [`KEPT_FAILURES`]) that
    /// the command `pid` caused: those of its own processes, and those whose
    /// program is unknown (a container's), which may be its own, as a
    /// command's exit carries them.
    pub fn caused_by(&self, mark: u64, pid: u32) -> Vec<EndpointFailure> {
        self.recent
            .lock()
            .map(|r| {
                r.iter()
                    .filter(|f| f.number >= mark)
                    .filter(|f| f.lineage.as_ref().is_none_or(|l| l.contains(&pid)))
                    .map(|f| f.failure.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl PrivateNet {
    /// The box's names, forwarded through `uplink`; nothing runs until
    /// [`PrivateNet::start`].
    pub fn new(uplink: &Uplink) -> Self {
        Self {
            setup: tokio::sync::Mutex::default(),
            held: Mutex::default(),
            failures: Arc::default(),
            dns: Arc::new(dns::Dns::new(uplink.clone())),
        }
    }

    /// At boot: the range on `lo`, boxd's DNS and resolv.conf naming it, the
    /// filter rules. Each part that fails is reported and the rest still
    /// set up: boxd serves without it.
    pub async fn start(&self) {
        if let Err(e) = rules::prepare_kernel().await {
            eprintln!("boxd: {e}");
        }
        match dns_sockets().await {
            Ok((udp, tcp)) => {
                tokio::spawn(dns::serve_udp(self.dns.clone(), udp));
                tokio::spawn(dns::serve_tcp(self.dns.clone(), tcp));
                if let Err(e) = resolv::take_over(&resolv::ResolvPaths::default()) {
                    eprintln!("boxd: {e}");
                }
            }
            Err(e) => eprintln!("boxd: {e}"),
        }
        if let Err(e) = rules::apply(&[], &[], &[]).await {
            eprintln!("boxd: {e}");
        }
    }

    /// The failed connections, for commands to report theirs.
    pub fn failures(&self) -> &Arc<Failures> {
        &self.failures
    }

    /// What health reports: one item per environment address, link and
    /// service in external mode. The counters are this boxd's: after a
    /// restart they start from zero, restored entries too.
    pub fn health(&self) -> Vec<PrivateEndpointHealth> {
        self.held
            .lock()
            .map(|held| {
                held.iter()
                    .filter_map(|h| match &h.health {
                        Some(Counted::Entry(e)) => Some(e.health()),
                        Some(Counted::External(e)) => Some(e.health()),
                        None => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The host names the box's DNS answers and their addresses.
    pub fn names(&self) -> std::collections::BTreeMap<String, std::net::Ipv4Addr> {
        self.dns.names()
    }

    /// Sets the box up for `endpoints` and `wiring` (nothing for none) and
    /// keeps the setup for a restarted boxd. A box is claimed once: the same
    /// claim again is a no-op, another is refused (also after a restore).
    pub async fn configure(
        &self,
        endpoints: &[Endpoint],
        wiring: &Wiring,
        uplink: &Uplink,
        work: &Path,
    ) -> Result<(), SetupError> {
        if endpoints.is_empty() && wiring.is_empty() {
            return Ok(());
        }
        let mut setup = self.setup.lock().await;
        if let Some(done) = setup.as_ref() {
            return if done.endpoints.as_slice() == endpoints && done.wiring == *wiring {
                Ok(())
            } else {
                Err(SetupError::AlreadySet)
            };
        }
        let new = Setup {
            endpoints: endpoints.to_vec(),
            assigned: addresses::assign(endpoints)?,
            wiring: wiring.clone(),
            extra: Vec::new(),
        };
        *setup = Some(self.bring_up(new, uplink, work).await?);
        Ok(())
    }

    /// Replaces the box's wiring: names keep their addresses, new names get
    /// theirs, listeners still needed stay, the others are closed with the
    /// connections they carry.
    pub async fn wire(
        &self,
        wiring: &Wiring,
        uplink: &Uplink,
        work: &Path,
    ) -> Result<(), SetupError> {
        let mut setup = self.setup.lock().await;
        let new = Setup {
            wiring: wiring.clone(),
            ..setup.clone().unwrap_or_default()
        };
        *setup = Some(self.bring_up(new, uplink, work).await?);
        Ok(())
    }

    /// At start: sets up again what an earlier boxd of this boot set up (the
    /// same addresses, new listeners whose counters start from zero), and
    /// says so on stdout. A kept setup that cannot be read or set up is
    /// reported and left alone: boxd serves without it.
    pub async fn restore(&self, uplink: &Uplink, work: &Path) {
        let path = Path::new(saved::PATH);
        let Some(kept) = crate::kept::usable(path, saved::read(path)) else {
            return;
        };
        // The environment's addresses and the wiring's names.
        let count = kept.assigned.len() + kept.extra.len();
        let mut setup = self.setup.lock().await;
        match self.bring_up(kept, uplink, work).await {
            Ok(done) => {
                println!(
                    "boxd: restored {count} environment addresses from {}",
                    path.display()
                );
                *setup = Some(done);
            }
            Err(e) => eprintln!(
                "boxd: cannot restore the environment addresses of {}: {e}",
                path.display()
            ),
        }
    }

    /// Gives the wiring's new names their addresses, opens the listeners the
    /// routes need (keeping those already open), routes the listed IPv4
    /// addresses, gives the DNS its names, replaces the nftables table, then
    /// closes the listeners no longer needed, and keeps the setup.
    async fn bring_up(
        &self,
        mut setup: Setup,
        uplink: &Uplink,
        work: &Path,
    ) -> Result<Setup, SetupError> {
        addresses::extend(
            &setup.assigned,
            &mut setup.extra,
            &plan::wired_names(&setup.wiring),
        )?;
        let names = addresses::all_names(&setup.assigned, &setup.extra);
        let routes = plan::routes(&setup.assigned, &names, &setup.wiring);
        let mut old: Vec<Option<Held>> = self
            .held
            .lock()
            .map(|mut h| std::mem::take(&mut *h).into_iter().map(Some).collect())
            .unwrap_or_default();
        let mut held = Vec::new();
        let opened = self
            .listeners(&setup, &routes, &mut old, &mut held, uplink, work)
            .await;
        let redirects = match opened {
            Ok(redirects) => redirects,
            Err(e) => {
                self.put_back(old, held);
                return Err(e);
            }
        };
        let literals = plan::literals(&routes);
        let ranges: Vec<rules::RangeRedirect> = plan::range_rules(&setup.wiring.ranges)
            .into_iter()
            .map(|(range, port, target_port)| rules::RangeRedirect {
                range,
                port,
                target_port,
            })
            .collect();
        let applied = async {
            rules::route_literals(&literals).await?;
            rules::apply(&redirects, &ranges, &literals).await
        }
        .await;
        if let Err(e) = applied {
            self.put_back(old, held);
            return Err(e);
        }
        self.dns.set_names(names);
        // Only now: new connections already go to their new place.
        for gone in old.into_iter().flatten() {
            gone.closed.cancel();
        }
        for h in &mut held {
            h.fresh = false;
        }
        if let Ok(mut all) = self.held.lock() {
            *all = held;
        }
        crate::kept::keep(Path::new(saved::PATH), &setup, "the environment addresses");
        Ok(setup)
    }

    /// The listener of every route that needs one, taken from `old` when it
    /// is open already, else opened, into `held`; the redirects to them.
    async fn listeners(
        &self,
        setup: &Setup,
        routes: &[plan::Route],
        old: &mut [Option<Held>],
        held: &mut Vec<Held>,
        uplink: &Uplink,
        work: &Path,
    ) -> Result<Vec<rules::Redirect>, SetupError> {
        let mut redirects = Vec::new();
        for r in routes {
            let kind = match &r.to {
                To::Box(target) => {
                    redirects.push(rules::Redirect {
                        addr: r.addr,
                        port: r.port,
                        entry_port: *target,
                    });
                    continue;
                }
                To::Env => Kind::Env,
                To::Link => Kind::Link,
                To::Scene => Kind::Scene,
                To::External => match &setup.wiring.external_base_url {
                    Some(base) => Kind::External(base.clone()),
                    None => {
                        return Err(SetupError::NoExternalBase {
                            host: r.host.clone(),
                            port: r.port,
                        });
                    }
                },
            };
            let kept = old
                .iter_mut()
                .find(|h| {
                    h.as_ref()
                        .is_some_and(|h| h.host == r.host && h.port == r.port && h.kind == kind)
                })
                .and_then(Option::take);
            let listener = match kept {
                Some(h) => h,
                None => self.open(&r.host, r.port, kind, uplink, work).await?,
            };
            redirects.push(rules::Redirect {
                addr: r.addr,
                port: r.port,
                entry_port: listener.local_port,
            });
            held.push(listener);
        }
        Ok(redirects)
    }

    /// After a failed change: closes what it opened, keeps what was open.
    fn put_back(&self, old: Vec<Option<Held>>, tried: Vec<Held>) {
        let mut back: Vec<Held> = old.into_iter().flatten().collect();
        for h in tried {
            if h.fresh {
                h.closed.cancel();
            } else {
                back.push(h);
            }
        }
        if let Ok(mut all) = self.held.lock() {
            *all = back;
        }
    }

    /// Opens and starts serving one listener.
    async fn open(
        &self,
        host: &str,
        port: u16,
        kind: Kind,
        uplink: &Uplink,
        work: &Path,
    ) -> Result<Held, SetupError> {
        let failed = |source| SetupError::Entry {
            host: host.to_owned(),
            port,
            source,
        };
        let (local_port, closed, health) = match &kind {
            Kind::Env | Kind::Link => {
                // The route's host is an environment address's or a link's,
                // both read as host names with the claim.
                let host = psbx_wire::HostName::parse(host)
                    .map_err(|_| SetupError::NotAHost(host.to_owned()))?;
                let endpoint = Endpoint::new(host, port);
                let (entry, listener) = entry::bind(endpoint, kind == Kind::Link)
                    .await
                    .map_err(failed)?;
                tokio::spawn(entry::serve(
                    entry.clone(),
                    listener,
                    uplink.clone(),
                    work.join(LOG),
                    self.failures.clone(),
                ));
                (
                    entry.local.port(),
                    entry.closed.clone(),
                    Some(Counted::Entry(entry)),
                )
            }
            Kind::External(base) => {
                let (ext, listener) =
                    external::bind(host.to_owned(), port, base)
                        .await
                        .map_err(|e| SetupError::External {
                            host: host.to_owned(),
                            port,
                            reason: e.to_string(),
                        })?;
                let closed = CancellationToken::new();
                tokio::spawn(external::serve(ext.clone(), listener, closed.clone()));
                (ext.local.port(), closed, Some(Counted::External(ext)))
            }
            Kind::Scene => {
                let listener = scene::bind().await.map_err(failed)?;
                let local = listener.local_addr().map_err(failed)?;
                let closed = CancellationToken::new();
                tokio::spawn(scene::serve(host.to_owned(), listener, closed.clone()));
                (local.port(), closed, None)
            }
        };
        Ok(Held {
            host: host.to_owned(),
            port,
            kind,
            local_port,
            closed,
            health,
            fresh: true,
        })
    }
}

/// boxd's DNS sockets on 198.18.0.1:53 (not a loopback address: Docker
/// replaces loopback resolvers in containers' resolv.conf).
async fn dns_sockets() -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener), SetupError> {
    let at = SocketAddr::from((addresses::DNS_ADDR, 53));
    let failed = |transport| {
        move |source| SetupError::DnsSocket {
            transport,
            at,
            source,
        }
    };
    let udp = tokio::net::UdpSocket::bind(at)
        .await
        .map_err(failed("udp"))?;
    let tcp = tokio::net::TcpListener::bind(at)
        .await
        .map_err(failed("tcp"))?;
    Ok((udp, tcp))
}
