//! The account's box-URL IP allowlist (faq "Who can open a box's URL?"): one
//! list per account of at most [`MAX_ENTRIES`] IPv4 addresses and ranges.
//! An empty list admits every client; a non-empty one admits only IPv4
//! clients (IPv4-mapped IPv6 included) inside one of its entries.
//!
//! [`parse`] checks and canonicalises what a caller sends (with `ipnet`);
//! [`BoxAccess`] is what the box-URL proxy asks before anything wakes, and
//! what `PUT /v1/box-access` sets. Lists are cached per account for at most
//! [`CACHE_TTL`], so a change made on another replica is in force here
//! within about that; [`BoxAccess::set`] drops this replica's copy at once.
//!
//! The cache is a map behind a `std::sync::Mutex`, not an actor: a lookup is
//! short, must not queue behind a mailbox, and no order between lookups
//! needs keeping (as for the connector `Hub`). The lock is never held across
//! an `.await` or a store call.

use crate::blocking::blocking;
use crate::ids::AccountId;
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use ipnet::Ipv4Net;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most entries one account's list holds.
pub const MAX_ENTRIES: usize = 50;

/// How long a replica keeps an account's list before reading it again.
pub const CACHE_TTL: Duration = Duration::from_secs(2);

/// Accounts whose lists a replica keeps at most; past it, expired ones go,
/// then all (they are read again on the next request).
const MAX_CACHED: usize = 10_000;

/// What shows an entry's form, for messages.
const ENTRY_FORM: &str = "an entry is an IPv4 address such as 203.0.113.7 or a range in CIDR form such as 203.0.113.0/24";

#[derive(Debug, thiserror::Error)]
pub enum BoxAccessError {
    #[error("{entry} is IPv6: only IPv4 addresses and ranges are matched for now")]
    Ipv6 { entry: String },
    #[error("{entry} has bits set past its prefix length: did you mean {network}?")]
    HostBits { entry: String, network: Ipv4Net },
    #[error("{entry:?} is not an IPv4 address or range: {ENTRY_FORM}")]
    Malformed { entry: String },
    #[error("{count} entries: an account's box-URL allowlist holds at most {MAX_ENTRIES}")]
    TooMany { count: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl BoxAccessError {
    /// Whether the caller's entries were refused (as opposed to the store failing).
    pub fn is_invalid(&self) -> bool {
        !matches!(self, Self::Store(_))
    }

    /// What to do about a refused list.
    pub fn hint(&self) -> Option<String> {
        match self {
            Self::Ipv6 { .. } => Some(
                "leave IPv6 entries out: IPv6 clients are refused while the list is not empty"
                    .to_owned(),
            ),
            Self::HostBits { network, .. } => Some(format!("send {network}")),
            Self::Malformed { .. } => Some(ENTRY_FORM.to_owned()),
            Self::TooMany { .. } => {
                Some("merge addresses into ranges (203.0.113.0/24 covers 256 addresses)".to_owned())
            }
            Self::Store(_) => None,
        }
    }
}

/// One entry checked: the network it covers. Exactly [`entry_pattern`]'s
/// texts are taken (no spaces, no leading zeros), so the API document's
/// pattern and the server agree.
pub fn parse_entry(text: &str) -> Result<Ipv4Net, BoxAccessError> {
    let malformed = || BoxAccessError::Malformed {
        entry: text.to_owned(),
    };
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (text, None),
    };
    let ip = match address.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip,
        Ok(IpAddr::V6(_)) => {
            return Err(BoxAccessError::Ipv6 {
                entry: text.to_owned(),
            });
        }
        Err(_) => return Err(malformed()),
    };
    let len = match prefix {
        None => 32,
        Some(p) if p == "0" || (!p.starts_with('0') && p.len() <= 2) => {
            p.parse::<u8>().map_err(|_| malformed())?
        }
        Some(_) => return Err(malformed()),
    };
    let net = Ipv4Net::new(ip, len).map_err(|_| malformed())?;
    if net.trunc() == net {
        Ok(net)
    } else {
        Err(BoxAccessError::HostBits {
            entry: text.to_owned(),
            network: net.trunc(),
        })
    }
}

/// An octet without leading zeros.
const OCTET: &str = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

/// The pattern of an entry (JSON Schema `pattern`): an IPv4 address, or a
/// network in CIDR form whose address has no bits past its prefix length
/// (`203.0.113.0/24`, not `203.0.113.5/24`). Long, as such a pattern is:
/// per prefix length, the octet it cuts lists its allowed values.
pub fn entry_pattern() -> String {
    let any = |n: usize| vec![OCTET.to_owned(); n];
    let mut alternatives = vec![any(4).join("\\.")];
    for len in 0..=32usize {
        let (whole, bits) = (len / 8, len % 8);
        let mut octets = any(whole);
        if whole < 4 {
            let step = 1usize << (8 - bits);
            let values: Vec<String> = (0..256).step_by(step).map(|v| v.to_string()).collect();
            octets.push(if values.len() == 1 {
                "0".to_owned()
            } else {
                format!("(?:{})", values.join("|"))
            });
            octets.extend(std::iter::repeat_n("0".to_owned(), 3 - whole));
        }
        alternatives.push(format!("{}/{len}", octets.join("\\.")));
    }
    format!("^(?:{})$", alternatives.join("|"))
}

/// The form an entry is stored and shown in: a plain address for a /32,
/// CIDR otherwise.
pub fn canonical(net: &Ipv4Net) -> String {
    if net.prefix_len() == 32 {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// Checks a list as sent: at most [`MAX_ENTRIES`], each an IPv4 address or
/// range without host bits; duplicates (in any spelling) are dropped, the
/// first one's place kept.
pub fn parse(entries: &[String]) -> Result<Vec<Ipv4Net>, BoxAccessError> {
    if entries.len() > MAX_ENTRIES {
        return Err(BoxAccessError::TooMany {
            count: entries.len(),
        });
    }
    let mut nets: Vec<Ipv4Net> = Vec::with_capacity(entries.len());
    for entry in entries {
        let net = parse_entry(entry)?;
        if !nets.contains(&net) {
            nets.push(net);
        }
    }
    Ok(nets)
}

/// An account's list, ready to match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    nets: Vec<Ipv4Net>,
}

impl Allowlist {
    pub fn new(nets: Vec<Ipv4Net>) -> Self {
        Self { nets }
    }

    /// Whether a client at `client` may open the account's box URLs.
    pub fn allows(&self, client: IpAddr) -> bool {
        if self.nets.is_empty() {
            return true;
        }
        let v4: Option<Ipv4Addr> = match client {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(v6) => v6.to_ipv4_mapped(),
        };
        v4.is_some_and(|ip| self.nets.iter().any(|net| net.contains(&ip)))
    }

    pub fn entries(&self) -> Vec<String> {
        self.nets.iter().map(canonical).collect()
    }
}

struct Cached {
    list: Arc<Allowlist>,
    read_at: Instant,
}

#[derive(Default)]
struct Cache {
    lists: HashMap<AccountId, Cached>,
    /// Bumped by every `set` on this replica: a read that started before
    /// a set does not put its (older) answer in the cache.
    generation: u64,
}

/// The allowlists, as the proxy and the API see them: one per replica,
/// shared by every worker (cheap to clone).
#[derive(Clone)]
pub struct BoxAccess {
    store: Store,
    ttl: Duration,
    cache: Arc<Mutex<Cache>>,
}

impl BoxAccess {
    pub fn new(store: Store) -> Self {
        Self::with_ttl(store, CACHE_TTL)
    }

    /// With another cache lifetime (tests).
    pub fn with_ttl(store: Store, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        // Cached copies only: still consistent after a panic elsewhere.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a client at `client` may open the account's box URLs (an
    /// empty list: everyone; else IPv4 clients inside an entry).
    pub async fn allows(
        &self,
        account: &AccountId,
        client: IpAddr,
    ) -> Result<bool, BoxAccessError> {
        Ok(self.list(account).await?.allows(client))
    }

    /// The account's list, from this replica's cache when fresh.
    pub async fn list(&self, account: &AccountId) -> Result<Arc<Allowlist>, BoxAccessError> {
        let generation = {
            let cache = self.lock();
            if let Some(hit) = cache.lists.get(account)
                && hit.read_at.elapsed() < self.ttl
            {
                return Ok(hit.list.clone());
            }
            cache.generation
        };
        let read_at = Instant::now();
        let (entries, _) = self.read(account).await?;
        // Stored entries were checked when set; one that no longer reads
        // is a store problem, not an open door.
        let nets = entries
            .iter()
            .map(|e| parse_entry(e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Unreadable {
                what: format!("the box-URL allowlist of {account}"),
                why: e.to_string(),
            })?;
        let list = Arc::new(Allowlist::new(nets));
        let mut cache = self.lock();
        if cache.generation == generation {
            if cache.lists.len() >= MAX_CACHED && !cache.lists.contains_key(account) {
                let ttl = self.ttl;
                cache.lists.retain(|_, c| c.read_at.elapsed() < ttl);
                if cache.lists.len() >= MAX_CACHED {
                    cache.lists.clear();
                }
            }
            cache.lists.insert(
                account.clone(),
                Cached {
                    list: list.clone(),
                    read_at,
                },
            );
        }
        Ok(list)
    }

    async fn read(
        &self,
        account: &AccountId,
    ) -> Result<(Vec<String>, Option<DateTime<Utc>>), StoreError> {
        let (store, account) = (self.store.clone(), account.clone());
        let row = blocking(move || store.box_access(&account)).await?;
        Ok(row.map_or((Vec::new(), None), |r| (r.entries, Some(r.updated_at))))
    }

    /// The account's entries as stored, and when they were last set (`None`:
    /// never). Read from the store, not the cache.
    pub async fn get(
        &self,
        account: &AccountId,
    ) -> Result<(Vec<String>, Option<DateTime<Utc>>), BoxAccessError> {
        Ok(self.read(account).await?)
    }

    /// Replaces the account's list (empty: turned off) after checking it;
    /// returns the entries as stored (canonical, without duplicates) and
    /// when. In force on this replica at once, on others within the cache
    /// lifetime.
    pub async fn set(
        &self,
        account: &AccountId,
        entries: Vec<String>,
    ) -> Result<(Vec<String>, DateTime<Utc>), BoxAccessError> {
        let canonical: Vec<String> = parse(&entries)?.iter().map(canonical).collect();
        let (store, a, e) = (self.store.clone(), account.clone(), canonical.clone());
        let updated_at = blocking(move || store.put_box_access(&a, &e)).await?;
        let mut cache = self.lock();
        cache.generation += 1;
        cache.lists.remove(account);
        Ok((canonical, updated_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        let owned: Vec<String> = entries.iter().map(|s| (*s).to_owned()).collect();
        Allowlist::new(parse(&owned).unwrap())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_and_ranges_are_read_and_shown_canonically() {
        let owned: Vec<String> = [
            "203.0.113.7",
            "198.51.100.0/24",
            "203.0.113.7/32",
            "10.0.0.0/8",
            "198.51.100.0/24",
            "0.0.0.0/0",
        ]
        .map(str::to_owned)
        .to_vec();
        let nets = parse(&owned).unwrap();
        assert_eq!(
            Allowlist::new(nets).entries(),
            ["203.0.113.7", "198.51.100.0/24", "10.0.0.0/8", "0.0.0.0/0"]
        );
    }

    #[test]
    fn ipv6_entries_are_refused_saying_only_ipv4_is_matched() {
        for entry in ["2001:db8::/32", "2001:db8::1", "::ffff:203.0.113.7"] {
            let e = parse_entry(entry).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("{entry} is IPv6: only IPv4 addresses and ranges are matched for now")
            );
            assert!(e.is_invalid());
        }
    }

    #[test]
    fn a_range_with_host_bits_names_its_network() {
        let e = parse_entry("203.0.113.5/24").unwrap_err();
        assert!(
            e.to_string().contains("did you mean 203.0.113.0/24?"),
            "{e}"
        );
        assert_eq!(e.hint().as_deref(), Some("send 203.0.113.0/24"));
    }

    #[test]
    fn anything_else_is_refused_saying_what_an_entry_looks_like() {
        for entry in [
            "",
            "office",
            "203.0.113",
            "203.0.113.256",
            "203.0.113.0/33",
            "203.0.113.0/",
            "010.0.0.1",
            "203.0.113.0-203.0.113.9",
            "*",
            " 203.0.113.7",
            "203.0.113.0/08",
            "203.0.113.0/024",
        ] {
            let e = parse_entry(entry).unwrap_err();
            assert!(
                matches!(e, BoxAccessError::Malformed { .. }),
                "{entry}: {e}"
            );
            assert!(e.to_string().contains("203.0.113.0/24"), "{e}");
            assert!(e.to_string().contains(&format!("{entry:?}")), "{e}");
        }
    }

    #[test]
    fn the_documented_pattern_takes_exactly_what_the_parser_takes() {
        let pattern = regex::Regex::new(&entry_pattern()).unwrap();
        let mut cases: Vec<String> = [
            "203.0.113.7",
            "203.0.113.0/24",
            "203.0.113.5/24",
            "0.0.0.0/0",
            "1.0.0.0/0",
            "255.255.255.255/32",
            "128.0.0.0/1",
            "192.0.0.0/1",
            "10.0.0.0/7",
            "11.0.0.0/7",
            "010.0.0.1",
            "1.2.3.4/",
            "1.2.3.4/33",
            "1.2.3.4/08",
            " 1.2.3.4",
            "1.2.3.4 ",
            "1.2.3",
            "203x0.113.7",
            "203.0.113.7/2x",
            "2001:db8::/32",
            "::ffff:1.2.3.4",
            "256.1.1.1",
            "",
            "/8",
        ]
        .map(str::to_owned)
        .to_vec();
        // Every prefix length, with addresses on and just off its network.
        for len in 0..=32u32 {
            for base in [0u32, 0xcb00_7100, 0xffff_ffff, 0x8000_0001, 0x0a00_0100] {
                let ip = Ipv4Addr::from(base);
                cases.push(format!("{ip}/{len}"));
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                cases.push(format!("{}/{len}", Ipv4Addr::from(base & mask)));
            }
        }
        for case in &cases {
            assert_eq!(
                pattern.is_match(case),
                parse_entry(case).is_ok(),
                "{case:?} (the pattern and the parser disagree)"
            );
        }
    }

    #[test]
    fn at_most_fifty_entries() {
        let fifty: Vec<String> = (0..50).map(|i| format!("10.0.{i}.0/24")).collect();
        assert_eq!(parse(&fifty).unwrap().len(), 50);
        let mut fifty_one = fifty;
        fifty_one.push("10.1.0.0/16".into());
        let e = parse(&fifty_one).unwrap_err();
        assert!(matches!(e, BoxAccessError::TooMany { count: 51 }), "{e}");
        assert!(e.to_string().contains("at most 50"), "{e}");
    }

    #[test]
    fn an_empty_list_admits_everyone() {
        let open = list(&[]);
        for client in ["203.0.113.7", "2001:db8::1", "::ffff:10.0.0.1"] {
            assert!(open.allows(ip(client)), "{client}");
        }
    }

    #[test]
    fn a_list_admits_ipv4_clients_inside_an_entry_and_mapped_ones_alike() {
        let office = list(&["203.0.113.0/24", "198.51.100.9"]);
        for (client, admitted) in [
            ("203.0.113.0", true),
            ("203.0.113.255", true),
            ("203.0.114.0", false),
            ("198.51.100.9", true),
            ("198.51.100.10", false),
            ("::ffff:203.0.113.40", true),
            ("::ffff:198.51.100.10", false),
            ("2001:db8::1", false),
            ("::1", false),
            ("127.0.0.1", false),
        ] {
            assert_eq!(office.allows(ip(client)), admitted, "{client}");
        }
    }
}
