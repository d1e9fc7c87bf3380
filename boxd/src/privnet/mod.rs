//! The box's names and its way to its environment's private addresses
//! (DESIGN.md §6). From boot ([`PrivateNet::start`]): boxd's DNS on
//! 198.18.0.1 (`dns`), which forwards through the box channel,
//! `/etc/resolv.conf` pointing at it (`resolv`), and the nftables table
//! (`rules`) that keeps private ranges out of reach. At claim (`configure`
//! with `endpoints`): an address per host name (`addresses`), an entry per
//! address (`entry`), those names in the DNS, and the rules that send each
//! address to its entry. Everything is in place before the claim is
//! answered. A failed connection is traced to the program that made it
//! (`owner`), for the command's `privateEndpointErrors`.
//!
//! The setup is then kept in `/run/psbx/` (`saved`): a boxd restarted in the
//! same boot (it crashed, was killed) finds it at start and sets the same
//! addresses up again before it serves — new entries, its DNS, the nftables
//! table replaced with the new entries' ports, resolv.conf rewritten — so that
//! the names keep resolving to what programs in the box cached.

mod addresses;
mod dns;
mod entry;
mod error;
mod owner;
mod resolv;
pub mod rules;
mod saved;

pub use error::SetupError;

use crate::uplink::Uplink;
use psbx_wire::boxd::{EndpointFailure, PrivateEndpoint, PrivateEndpointHealth};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The log of failed connections, under the box's work directory.
pub const LOG: &str = ".sbx/logs/private-endpoints.log";

/// The box's DNS and the entries of the box (none until a claim brings
/// addresses).
pub struct PrivateNet {
    setup: tokio::sync::Mutex<Option<Vec<PrivateEndpoint>>>,
    entries: Mutex<Vec<Arc<entry::Entry>>>,
    failures: Arc<Failures>,
    dns: Arc<dns::Dns>,
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
    /// program is unknown (a container's), which may be its own. As text,
    /// as a command's exit carries them.
    pub fn caused_by(&self, mark: u64, pid: u32) -> Vec<String> {
        self.recent
            .lock()
            .map(|r| {
                r.iter()
                    .filter(|f| f.number >= mark)
                    .filter(|f| f.lineage.as_ref().is_none_or(|l| l.contains(&pid)))
                    .map(|f| f.failure.to_string())
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
            entries: Mutex::default(),
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
        if let Err(e) = rules::apply(&[], &[]).await {
            eprintln!("boxd: {e}");
        }
    }

    /// The failed connections, for commands to report theirs.
    pub fn failures(&self) -> &Arc<Failures> {
        &self.failures
    }

    /// What health reports: one item per address. The counters are this
    /// boxd's: after a restart they start from zero, restored entries too.
    pub fn health(&self) -> Vec<PrivateEndpointHealth> {
        self.entries
            .lock()
            .map(|entries| entries.iter().map(|e| e.health()).collect())
            .unwrap_or_default()
    }

    /// Sets the box up for `endpoints` (nothing for none) and keeps the setup
    /// for a restarted boxd. A box is claimed once: the same addresses again
    /// are a no-op, others are refused (also after a restore).
    pub async fn configure(
        &self,
        endpoints: &[PrivateEndpoint],
        uplink: &Uplink,
        work: &Path,
    ) -> Result<(), SetupError> {
        if endpoints.is_empty() {
            return Ok(());
        }
        let mut setup = self.setup.lock().await;
        if let Some(done) = setup.as_ref() {
            return if done.as_slice() == endpoints {
                Ok(())
            } else {
                Err(SetupError::AlreadySet)
            };
        }
        let assigned = addresses::assign(endpoints)?;
        self.bring_up(&assigned, uplink, work).await?;
        *setup = Some(endpoints.to_vec());
        let kept = saved::Saved {
            endpoints: endpoints.to_vec(),
            assigned,
        };
        crate::kept::keep(Path::new(saved::PATH), &kept, "the environment addresses");
        Ok(())
    }

    /// At start: sets up again what an earlier boxd of this boot set up (the
    /// same addresses, new entries whose counters start from zero), and says
    /// so on stdout. A kept setup that cannot be read or set up is reported
    /// and left alone: boxd serves without it.
    pub async fn restore(&self, uplink: &Uplink, work: &Path) {
        let path = Path::new(saved::PATH);
        let Some(kept) = crate::kept::usable(path, saved::read(path)) else {
            return;
        };
        let mut setup = self.setup.lock().await;
        match self.bring_up(&kept.assigned, uplink, work).await {
            Ok(()) => {
                println!(
                    "boxd: restored {} environment addresses from {}",
                    kept.assigned.len(),
                    path.display()
                );
                *setup = Some(kept.endpoints);
            }
            Err(e) => eprintln!(
                "boxd: cannot restore the environment addresses of {}: {e}",
                path.display()
            ),
        }
    }

    /// Opens the entries, routes the listed IPv4 addresses, gives the DNS
    /// its names and replaces the nftables table.
    async fn bring_up(
        &self,
        assigned: &[addresses::Assigned],
        uplink: &Uplink,
        work: &Path,
    ) -> Result<(), SetupError> {
        let mut bound = Vec::new();
        for a in assigned {
            let (entry, listener) =
                entry::bind(a.endpoint.clone())
                    .await
                    .map_err(|source| SetupError::Entry {
                        host: a.endpoint.host.clone(),
                        port: a.endpoint.port,
                        source,
                    })?;
            bound.push((entry, listener));
        }
        let literals: Vec<std::net::Ipv4Addr> = assigned
            .iter()
            .filter(|a| a.endpoint.host.parse::<std::net::Ipv4Addr>().is_ok())
            .map(|a| a.addr)
            .collect();
        rules::route_literals(&literals).await?;
        self.dns.set_names(addresses::names(assigned));
        let redirects: Vec<rules::Redirect> = assigned
            .iter()
            .zip(&bound)
            .map(|(a, (entry, _))| rules::Redirect {
                addr: a.addr,
                port: a.endpoint.port,
                entry_port: entry.local.port(),
            })
            .collect();
        rules::apply(&redirects, &literals).await?;
        let log = work.join(LOG);
        let mut entries = Vec::new();
        for (entry, listener) in bound {
            entries.push(entry.clone());
            tokio::spawn(entry::serve(
                entry,
                listener,
                uplink.clone(),
                log.clone(),
                self.failures.clone(),
            ));
        }
        if let Ok(mut all) = self.entries.lock() {
            *all = entries;
        }
        Ok(())
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
