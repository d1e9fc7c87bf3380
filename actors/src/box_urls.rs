//! Box URLs: `<scheme>://box-<rest of the id>-<key>[-<port>].<box_domain>[:<port>]`.
//!
//! * The label is the box id with its `_` written `-` (host names have no
//!   underscore), then the box's key, then optionally a port in the box.
//! * The key is 25 base-36 characters (129 random bits), made for the box
//!   when it is started (or claimed from the pool) and whenever its owner
//!   rotates it (`POST /v1/boxes/{id}/url-key`). The database keeps its
//!   SHA-256 (what a request's key is checked against, in constant time)
//!   and a copy sealed by the master key (to show the box's URLs to its
//!   owner): a read of the database alone gives no key. This server keeps
//!   the keys of the boxes that are not over in memory ([`BoxUrls::load`] at
//!   start-up, [`BoxUrls::remember`] on each new key), so checking a key
//!   reads nothing: no database read comes before the key is right, and a
//!   wrong key and an unknown box get the same answer.
//! * A box without a stored key (started before keys were stored) keeps the
//!   key derived from its id: 128 bits of HMAC-SHA256 under the master key
//!   ([`Vault::derive`]), until its key is rotated. Such a key is taken only
//!   once the database confirms the box still has no stored key
//!   ([`Admitted::Derived`]), so a box whose key was rotated elsewhere is not
//!   opened by its old derived key.
//! * The bare URL serves the first declared service (its `targetPort`, else
//!   its `port`), or port [`DEFAULT_PORT`] when none is declared;
//!   `-<port>` serves that port: a declared service's `port` leads to its
//!   `targetPort`, any other port is dialed as it is.
//! * Scheme and listener port are the public URL's (`http://127.0.0.1:8080`
//!   gives `http://box-….box.localhost:8080`).

use crate::ids::BoxId;
use crate::secrets::vault::Vault;
use crate::spec::ServiceSpec;
use crate::store::{BoxRecord, StoredUrlKey};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// How long a box found for a box URL is remembered.
pub const URL_BOXES_FOR: Duration = Duration::from_secs(2);
/// The most boxes remembered (past it, all are forgotten).
const MAX_REMEMBERED: usize = 10_000;

/// The port the bare URL of a box without declared services serves.
pub const DEFAULT_PORT: u16 = 80;
/// Characters of a box key: 36^25 > 2^128.
const KEY_LEN: usize = 25;
const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// What the master key derives box keys for.
const PURPOSE: &str = "psbx box url key v1";
/// The label prefix standing for `box_`.
const LABEL_PREFIX: &str = "box-";

/// How box URLs are made and read.
#[derive(Clone)]
pub struct BoxUrls {
    scheme: String,
    /// Lower-case, without a leading dot.
    domain: String,
    /// The listener's port when it is not the scheme's default.
    port: Option<u16>,
    vault: Arc<Vault>,
    /// The stored keys this server knows (boxes that are not over).
    keys: Arc<Mutex<HashMap<BoxId, KnownKey>>>,
}

/// A box's stored key, as this server keeps it.
struct KnownKey {
    key: String,
    hash: [u8; 32],
}

/// Whether a box URL's key is its box's, and how it was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Not the box's key.
    No,
    /// The box's stored (random) key.
    Stored,
    /// The key derived from the box's id: good only while the box has no
    /// stored key, which the caller checks in the database.
    Derived,
}

/// A new random key for a box: the key (shown in its URLs, never stored
/// in the clear) and what the database keeps of it.
pub struct NewKey {
    pub key: String,
    pub stored: StoredUrlKey,
}

/// A box's URLs: the bare one, and one per declared service with a port
/// (`None` for a service without one), in the order of the services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls {
    pub url: String,
    pub services: Vec<Option<String>>,
}

/// What a box URL's host names: a box, a key to check, maybe a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxAddress {
    pub id: BoxId,
    key: String,
    pub port: Option<u16>,
}

impl std::fmt::Debug for BoxUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BoxUrls({}://*.{})", self.scheme, self.domain)
    }
}

impl BoxUrls {
    /// Box URLs under `box_domain`, with the scheme and port of `public_url`.
    pub fn new(public_url: &str, box_domain: &str, vault: Arc<Vault>) -> Self {
        let parsed = url::Url::parse(public_url).ok();
        let scheme = parsed.as_ref().map_or("http", |u| u.scheme()).to_owned();
        Self {
            port: parsed.as_ref().and_then(url::Url::port),
            scheme,
            domain: box_domain.trim_matches('.').to_ascii_lowercase(),
            vault,
            keys: Arc::default(),
        }
    }

    /// The key of a box: its stored one when this server knows it, else the
    /// one derived from its id.
    fn key(&self, id: &BoxId) -> String {
        if let Some(known) = self.known().get(id) {
            return known.key.clone();
        }
        self.derived_key(id)
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<BoxId, KnownKey>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a box's key is sealed for.
    fn owner(id: &BoxId) -> String {
        format!("box url key {id}")
    }

    /// A new random key for box `id`, sealed by the master key.
    pub fn new_key(&self, id: &BoxId) -> Result<NewKey, String> {
        let key = crate::ids::random_token(KEY_LEN)
            .map_err(|e| format!("no randomness for a box URL key: {e}"))?;
        let sealed = self
            .vault
            .seal(&Self::owner(id), key.as_bytes())
            .map_err(|e| format!("cannot seal a box URL key: {e}"))?;
        Ok(NewKey {
            stored: StoredUrlKey {
                hash: Sha256::digest(key.as_bytes()).to_vec(),
                sealed: sealed.packed(),
            },
            key,
        })
    }

    /// Takes `key` as box `id`'s from now on (the database has it).
    pub fn remember(&self, id: &BoxId, key: &str) {
        let hash = Sha256::digest(key.as_bytes()).into();
        self.known().insert(
            id.clone(),
            KnownKey {
                key: key.to_owned(),
                hash,
            },
        );
    }

    /// Forgets the key of a box that is over.
    pub fn forget(&self, id: &BoxId) {
        self.known().remove(id);
    }

    /// Takes the stored keys read from the database (at start-up). A key
    /// the master key cannot open (or whose hash it does not match) is
    /// counted in the answer: its hash still admits the key, but the box's
    /// URLs cannot be shown until its key is rotated.
    pub fn load(&self, rows: Vec<(BoxId, StoredUrlKey)>) -> usize {
        let mut unreadable = 0;
        for (id, stored) in rows {
            let key = self
                .vault
                .open_packed(&Self::owner(&id), &stored.sealed)
                .ok()
                .and_then(|plain| String::from_utf8(plain).ok())
                .filter(|key| Sha256::digest(key.as_bytes()).as_slice() == stored.hash);
            match key {
                Some(key) => self.remember(&id, &key),
                None => {
                    unreadable += 1;
                    // Known, so the derived key is not taken; the hash still
                    // admits the real key.
                    self.known().insert(
                        id,
                        KnownKey {
                            key: String::new(),
                            hash: stored.hash.try_into().unwrap_or([0; 32]),
                        },
                    );
                }
            }
        }
        unreadable
    }

    /// The key derived from the box's id (boxes without a stored key).
    fn derived_key(&self, id: &BoxId) -> String {
        let mac = self.vault.derive(PURPOSE, id.as_str().as_bytes());
        let mut n = u128::from_be_bytes(mac[..16].try_into().unwrap_or([0; 16]));
        let mut key = [b'0'; KEY_LEN];
        for c in key.iter_mut().rev() {
            *c = ALPHABET[(n % 36) as usize];
            n /= 36;
        }
        String::from_utf8_lossy(&key).into_owned()
    }

    /// The URL of a box, or of one port in it.
    pub fn url(&self, id: &BoxId, port: Option<u16>) -> String {
        let rest = id
            .as_str()
            .strip_prefix(BoxId::PREFIX)
            .unwrap_or(id.as_str());
        let port_part = port.map(|p| format!("-{p}")).unwrap_or_default();
        let listener = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}://{LABEL_PREFIX}{rest}-{}{port_part}.{}{listener}/",
            self.scheme,
            self.key(id),
            self.domain
        )
    }

    /// The source expression matching every box URL, for a CSP's
    /// `frame-src`: `<scheme>://*.<box_domain>[:<port>]`.
    pub fn source_pattern(&self) -> String {
        let listener = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://*.{}{listener}", self.scheme, self.domain)
    }

    /// The URLs of a box with these declared services.
    pub fn of(&self, id: &BoxId, services: &[ServiceSpec]) -> Urls {
        Urls {
            url: self.url(id, None),
            services: services
                .iter()
                .map(|s| s.port.map(|p| self.url(id, Some(p))))
                .collect(),
        }
    }

    /// Whether `host` (a Host header, port and all) is under the box domain.
    pub fn is_box_host(&self, host: &str) -> bool {
        self.label_of(host).is_some()
    }

    /// The first label of a host under the box domain, lower-cased.
    fn label_of(&self, host: &str) -> Option<String> {
        let name = strip_port(host).trim_end_matches('.').to_ascii_lowercase();
        let label = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        (!label.is_empty() && !label.contains('.')).then(|| label.to_owned())
    }

    /// What a host under the box domain names, if it has the shape of a box
    /// URL. The key is not checked yet: [`BoxUrls::admits`] does.
    pub fn parse(&self, host: &str) -> Option<BoxAddress> {
        let label = self.label_of(host)?;
        let rest = label.strip_prefix(LABEL_PREFIX)?;
        let mut parts = rest.split('-');
        let (id, key) = (parts.next()?, parts.next()?);
        let port = match parts.next() {
            None => None,
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => {
                Some(p.parse::<u16>().ok().filter(|p| *p != 0)?)
            }
            Some(_) => return None,
        };
        if parts.next().is_some() || key.len() != KEY_LEN {
            return None;
        }
        let id = BoxId::parse(&format!("{}{id}", BoxId::PREFIX)).ok()?;
        Some(BoxAddress {
            id,
            key: key.to_owned(),
            port,
        })
    }

    /// Whether the address carries its box's key, compared in constant time.
    /// A derived key is taken without asking the database (for recognising
    /// a box's own URL; serving one goes through [`BoxUrls::check`]).
    pub fn admits(&self, address: &BoxAddress) -> bool {
        self.check(address) != Admitted::No
    }

    /// Whether the address carries its box's key, and which: its stored key
    /// (SHA-256 compared in constant time) or, for a box this server knows
    /// no stored key of, the derived one (compared in constant time).
    pub fn check(&self, address: &BoxAddress) -> Admitted {
        let stored = self.known().get(&address.id).map(|k| k.hash);
        match stored {
            Some(hash) => {
                let given: [u8; 32] = Sha256::digest(address.key.as_bytes()).into();
                if bool::from(given.ct_eq(&hash)) {
                    Admitted::Stored
                } else {
                    Admitted::No
                }
            }
            None => {
                let derived = self.derived_key(&address.id);
                if bool::from(derived.as_bytes().ct_eq(address.key.as_bytes())) {
                    Admitted::Derived
                } else {
                    Admitted::No
                }
            }
        }
    }
}

/// The most box-URL requests one box and one client may have open at once
/// ([`Slots`]), and how long a request's body or a WebSocket may go quiet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlLimits {
    /// `port:` streams of one box's channel taken by box-URL requests; the
    /// rest of the channel's streams stay for exec, shots, DNS and the
    /// environment.
    pub per_box: usize,
    /// Requests of one client address (an IPv6 client counts per /64) to
    /// one box.
    pub per_client: usize,
    /// A request body that sends nothing for this long is cut.
    pub body_idle: Duration,
    /// An upgraded connection (a WebSocket) with no byte either way for this
    /// long is closed.
    pub websocket_idle: Duration,
}

impl Default for UrlLimits {
    fn default() -> Self {
        Self {
            per_box: 128,
            per_client: 64,
            body_idle: Duration::from_secs(60),
            websocket_idle: Duration::from_secs(600),
        }
    }
}

/// Which limit a request met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crowded {
    /// The box has [`UrlLimits::per_box`] requests open.
    Box(usize),
    /// This client has [`UrlLimits::per_client`] requests to the box open.
    Client(usize),
}

/// The box-URL requests open now, per box and per client of each box
/// (behind a mutex held for a few map operations, never across an await).
#[derive(Default)]
pub struct Slots {
    limits: UrlLimits,
    open: Mutex<HashMap<BoxId, BoxSlots>>,
}

#[derive(Default)]
struct BoxSlots {
    total: usize,
    clients: HashMap<IpAddr, usize>,
}

/// One open box-URL request; its place is given back when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    id: BoxId,
    client: IpAddr,
}

impl Slots {
    pub fn new(limits: UrlLimits) -> Self {
        Self {
            limits,
            open: Mutex::default(),
        }
    }

    pub fn limits(&self) -> UrlLimits {
        self.limits
    }

    /// A place for one more request of `client` to box `id`, unless that
    /// would pass a limit.
    pub fn take(self: &Arc<Self>, id: &BoxId, client: IpAddr) -> Result<Slot, Crowded> {
        let client = client_key(client);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let of_box = open.entry(id.clone()).or_default();
        if of_box.total >= self.limits.per_box {
            return Err(Crowded::Box(self.limits.per_box));
        }
        let of_client = of_box.clients.entry(client).or_default();
        if *of_client >= self.limits.per_client {
            return Err(Crowded::Client(self.limits.per_client));
        }
        *of_client += 1;
        of_box.total += 1;
        Ok(Slot {
            slots: self.clone(),
            id: id.clone(),
            client,
        })
    }

    /// Requests open to box `id` now.
    pub fn open_to(&self, id: &BoxId) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(id).map_or(0, |b| b.total)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(of_box) = open.get_mut(&self.id) else {
            return;
        };
        of_box.total = of_box.total.saturating_sub(1);
        if let Some(n) = of_box.clients.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                of_box.clients.remove(&self.client);
            }
        }
        if of_box.total == 0 {
            open.remove(&self.id);
        }
    }
}

/// The address a client is counted under: an IPv4 address, or the /64 of an
/// IPv6 one (a single host commonly has a whole /64).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(bits.into())
            }
        },
    }
}

/// The boxes box URLs found lately, so that a page's many requests read the
/// database once every [`URL_BOXES_FOR`] (shared behind a mutex: a lookup
/// is a map read, nothing waits on anything slow under the lock).
#[derive(Default)]
pub struct Recent {
    boxes: Mutex<HashMap<BoxId, (Instant, Found)>>,
}

/// A box as a box URL found it: its record, and whether it has a stored key.
#[derive(Clone)]
pub struct Found {
    pub record: BoxRecord,
    pub stored_key: bool,
}

impl Recent {
    /// Forgets box `id` (its key changed).
    pub fn drop_box(&self, id: &BoxId) {
        let mut boxes = self.boxes.lock().unwrap_or_else(PoisonError::into_inner);
        boxes.remove(id);
    }

    /// The box, if it was found within [`URL_BOXES_FOR`].
    pub fn get(&self, id: &BoxId) -> Option<Found> {
        let boxes = self.boxes.lock().unwrap_or_else(PoisonError::into_inner);
        boxes
            .get(id)
            .filter(|(at, _)| at.elapsed() < URL_BOXES_FOR)
            .map(|(_, found)| found.clone())
    }

    pub fn put(&self, found: Found) {
        let mut boxes = self.boxes.lock().unwrap_or_else(PoisonError::into_inner);
        if boxes.len() >= MAX_REMEMBERED {
            boxes.retain(|_, (at, _)| at.elapsed() < URL_BOXES_FOR);
            if boxes.len() >= MAX_REMEMBERED {
                boxes.clear();
            }
        }
        boxes.insert(found.record.id.clone(), (Instant::now(), found));
    }
}

/// The port a request to `address` dials in the URL: its `-<port>`, or for
/// the bare URL the first declared service's port, else [`DEFAULT_PORT`].
pub fn dialed_port(address: &BoxAddress, services: &[ServiceSpec]) -> u16 {
    address.port.unwrap_or_else(|| bare_port(services))
}

/// The port the bare URL dials: the first declared service's, else
/// [`DEFAULT_PORT`].
pub fn bare_port(services: &[ServiceSpec]) -> u16 {
    services.iter().find_map(|s| s.port).unwrap_or(DEFAULT_PORT)
}

/// Whether a box whose URL reaches `url_ports` (none: every port) serves a
/// request to `address` (review-2 L3: a link shared for one port need not
/// open the box's databases and admin ports).
pub fn reaches(address: &BoxAddress, services: &[ServiceSpec], url_ports: Option<&[u16]>) -> bool {
    url_ports.is_none_or(|ports| ports.contains(&dialed_port(address, services)))
}

/// The port in the box a request to `address` goes to, given the box's
/// declared services.
pub fn port_in_box(address: &BoxAddress, services: &[ServiceSpec]) -> u16 {
    let in_box = |s: &ServiceSpec| s.target_port.or(s.port);
    match address.port {
        Some(port) => services
            .iter()
            .find(|s| s.port == Some(port))
            .and_then(in_box)
            .unwrap_or(port),
        None => services.iter().find_map(in_box).unwrap_or(DEFAULT_PORT),
    }
}

/// `host` without a `:port` (an IPv6 literal keeps its brackets).
fn strip_port(host: &str) -> &str {
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(public: &str) -> BoxUrls {
        BoxUrls::new(public, "Box.Example.", Arc::new(Vault::from_key(&[7; 32])))
    }

    fn host_of(url: &str) -> String {
        url::Url::parse(url).unwrap().host_str().unwrap().to_owned()
    }

    #[test]
    fn a_url_reads_back_as_its_box_and_admits_its_key() {
        let u = urls("http://127.0.0.1:8080");
        let id = BoxId::parse("box_abc123").unwrap();
        let url = u.url(&id, None);
        assert!(url.starts_with("http://box-abc123-"), "{url}");
        assert!(url.ends_with(".box.example:8080/"), "{url}");
        let address = u.parse(&format!("{}:8080", host_of(&url))).unwrap();
        assert_eq!(address.id, id);
        assert_eq!(address.port, None);
        assert!(u.admits(&address));
        // Upper case, a trailing dot: still the same box.
        let shouted = u.parse(&host_of(&url).to_uppercase()).unwrap();
        assert!(u.admits(&shouted));

        let with_port = u.url(&id, Some(3000));
        let address = u.parse(&host_of(&with_port)).unwrap();
        assert_eq!(address.port, Some(3000));
        assert!(u.admits(&address));
        assert!(
            urls("https://api.example")
                .url(&id, None)
                .starts_with("https://")
        );
        assert!(!urls("https://api.example").url(&id, None).contains(":443"));
        assert_eq!(u.source_pattern(), "http://*.box.example:8080");
        assert_eq!(
            urls("https://api.example:443").source_pattern(),
            "https://*.box.example"
        );
    }

    #[test]
    fn keys_are_128_bits_apart_per_box_and_per_master_key() {
        let u = urls("http://x");
        let a = BoxId::parse("box_a").unwrap();
        let b = BoxId::parse("box_b").unwrap();
        assert_ne!(u.key(&a), u.key(&b));
        assert_eq!(u.key(&a).len(), KEY_LEN);
        let other = BoxUrls::new(
            "http://x",
            "box.example",
            Arc::new(Vault::from_key(&[8; 32])),
        );
        assert_ne!(u.key(&a), other.key(&a));
        // A wrong key, or another box's key, is not admitted.
        let mut address = u.parse(&host_of(&u.url(&a, None))).unwrap();
        address.key = u.key(&b);
        assert!(!u.admits(&address));
    }

    #[test]
    fn hosts_that_are_not_box_urls() {
        let u = urls("http://x");
        let key = "0".repeat(KEY_LEN);
        for host in [
            "box.example",
            "api.example",
            "evil-box.example",
            "a.b.box.example",
            &format!("box-abc-{key}.box.example.evil"),
            &format!("abc-{key}.box.example"),
            &format!("box-abc-{key}-0.box.example"),
            &format!("box-abc-{key}-70000.box.example"),
            &format!("box-abc-{key}-80-1.box.example"),
            "box-abc-short.box.example",
            &format!("box--{key}.box.example"),
        ] {
            assert_eq!(u.parse(host), None, "{host}");
        }
        assert!(u.is_box_host("anything.box.example:8080"));
        assert!(!u.is_box_host("box.example"));
        assert!(!u.is_box_host("[::1]:8080"));
    }

    #[test]
    fn ports_in_the_box() {
        let u = urls("http://x");
        let id = BoxId::parse("box_a").unwrap();
        let at = |port| u.parse(&host_of(&u.url(&id, port))).unwrap();
        let services = [
            ServiceSpec {
                name: "web".into(),
                port: Some(80),
                target_port: Some(3000),
                version: None,
                mode: None,
            },
            ServiceSpec {
                name: "api".into(),
                port: Some(8080),
                target_port: None,
                version: None,
                mode: None,
            },
        ];
        assert_eq!(port_in_box(&at(None), &services), 3000);
        assert_eq!(port_in_box(&at(Some(80)), &services), 3000);
        assert_eq!(port_in_box(&at(Some(8080)), &services), 8080);
        assert_eq!(port_in_box(&at(Some(5173)), &services), 5173);
        assert_eq!(port_in_box(&at(None), &[]), DEFAULT_PORT);
        // Only the listed ports are reached; the bare URL counts as 80 here.
        let only = Some(&[80u16, 8080][..]);
        assert!(reaches(&at(None), &services, only));
        assert!(reaches(&at(Some(8080)), &services, only));
        assert!(!reaches(&at(Some(6379)), &services, only));
        assert!(reaches(&at(Some(6379)), &services, None));
        assert!(
            !reaches(&at(None), &[], Some(&[3000])),
            "the bare URL of no service is 80"
        );
    }

    #[test]
    fn a_stored_key_replaces_the_derived_one_and_survives_a_restart() {
        let u = urls("http://x");
        let id = BoxId::parse("box_a").unwrap();
        let derived = u.parse(&host_of(&u.url(&id, None))).unwrap();
        assert_eq!(u.check(&derived), Admitted::Derived);
        let new = u.new_key(&id).unwrap();
        assert_eq!(new.key.len(), KEY_LEN);
        assert_eq!(new.stored.hash, Sha256::digest(new.key.as_bytes()).to_vec());
        assert!(
            !new.stored
                .sealed
                .windows(KEY_LEN)
                .any(|w| w == new.key.as_bytes())
        );
        u.remember(&id, &new.key);
        let stored = u.parse(&host_of(&u.url(&id, None))).unwrap();
        assert_eq!(u.check(&stored), Admitted::Stored);
        assert_eq!(u.check(&derived), Admitted::No);
        // Another server (or this one restarted) reads it back from its row.
        let other = urls("http://x");
        assert_eq!(other.load(vec![(id.clone(), new.stored.clone())]), 0);
        assert_eq!(other.url(&id, None), u.url(&id, None));
        assert_eq!(other.check(&derived), Admitted::No);
        // A row the master key cannot open: its key still opens the box (by its
        // hash), the derived one does not.
        let stranger = BoxUrls::new(
            "http://x",
            "box.example",
            Arc::new(Vault::from_key(&[1; 32])),
        );
        assert_eq!(stranger.load(vec![(id.clone(), new.stored)]), 1);
        assert_eq!(stranger.check(&stored), Admitted::Stored);
        assert_eq!(stranger.check(&derived), Admitted::No);
    }

    #[test]
    fn slots_cap_each_box_and_each_client_and_come_back() {
        let slots = Arc::new(Slots::new(UrlLimits {
            per_box: 3,
            per_client: 2,
            ..UrlLimits::default()
        }));
        let (a, b) = (
            BoxId::parse("box_a").unwrap(),
            BoxId::parse("box_b").unwrap(),
        );
        let one: IpAddr = "198.51.100.1".parse().unwrap();
        let two: IpAddr = "2001:db8::1".parse().unwrap();
        let two_again: IpAddr = "2001:db8::ffff".parse().unwrap();
        let held = [slots.take(&a, one).unwrap(), slots.take(&a, one).unwrap()];
        assert_eq!(slots.take(&a, one).err(), Some(Crowded::Client(2)));
        // Another box is counted apart.
        let _other = slots.take(&b, one).unwrap();
        let third = slots.take(&a, two).unwrap();
        // The same /64 is the same client; the box is full anyway.
        assert_eq!(slots.take(&a, two_again).err(), Some(Crowded::Box(3)));
        drop(third);
        let _again = slots.take(&a, two_again).unwrap();
        assert_eq!(slots.take(&a, two).err(), Some(Crowded::Box(3)));
        drop(held);
        assert_eq!(slots.open_to(&a), 1);
        let _back = slots.take(&a, one).unwrap();
    }
}
