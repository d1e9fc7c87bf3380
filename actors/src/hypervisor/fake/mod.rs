//! An in-memory hypervisor for tests (feature `test-util`): domains are
//! entries in a table that move between libvirt's states as the real calls
//! would move them, every lifecycle call is recorded, and a domain's channel
//! is an in-memory pipe to a small boxd (`boxd.rs`) that speaks the real wire
//! protocol while the domain runs. A test may have boxd's real services
//! serve the box API instead of its stubs (`guest.rs`,
//! [`FakeHypervisor::serve_guests_with`]).
//!
//! In-memory pipes rather than unix sockets: under `tokio::time::pause()`, a
//! runtime that waits on real IO counts as idle and moves the clock on, so
//! timeouts would fire while bytes are in flight.
//!
//! The state sits behind a `std::sync::Mutex`: every call holds it for a few
//! table operations and never across an `.await`.

mod boxd;
mod guest;
pub use boxd::{FAKE_MP4, FAKE_VIDEO, FakeShot, SHOT_PNG};
pub use guest::{Guest, GuestBoxd, Serving};

use super::{ChannelStream, Dial, Hypervisor};
use boxd::Power;
use psbx_libvirt::{DOMAIN_PREFIX, DiskKey, DomainInfo, DomainSpec, DomainStatus, LibvirtError};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// A call the actors made, in the order they made it (failed ones too).
/// `list` reads only and is not recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Define(String),
    Start(String),
    Suspend(String),
    Resume(String),
    ManagedSave(String),
    Remove(String),
    /// An overlay made at this path.
    Overlay(PathBuf),
}

impl Call {
    /// The domain the call was about (`None` for an overlay).
    pub fn domain(&self) -> Option<&str> {
        match self {
            Self::Define(n)
            | Self::Start(n)
            | Self::Suspend(n)
            | Self::Resume(n)
            | Self::ManagedSave(n)
            | Self::Remove(n) => Some(n),
            Self::Overlay(_) => None,
        }
    }
}

/// A request the fake boxd of a domain answered (or refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub domain: String,
    pub target: String,
}

/// An in-memory hypervisor; clones share the same domains.
#[derive(Clone)]
pub struct FakeHypervisor {
    uri: String,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    domains: BTreeMap<String, Domain>,
    calls: Vec<Call>,
    served: Arc<Mutex<Vec<Served>>>,
    /// What every boxd answers to `shot`, once a test sets it.
    shot: boxd::ShotScript,
    boots: u64,
    /// Calls to refuse once, leaving their domain as it was: (domain, verb).
    refuse: Vec<(String, &'static str)>,
    /// Domains whose boxd refuses every `configure`.
    unconfigurable: boxd::Unconfigurable,
    /// The disk secrets defined now, by uuid (ephemeral, as psbx defines
    /// them in libvirt: [`FakeHypervisor::restart_libvirtd`] forgets them).
    secrets: BTreeMap<String, DiskKey>,
    /// What serves the box API of each boot, once a test set it.
    guests: Option<Arc<dyn GuestBoxd>>,
}

struct Domain {
    socket: PathBuf,
    owner: Option<String>,
    status: DomainStatus,
    boot_id: String,
    /// Whether its boxd answers on new connections.
    boxd: bool,
    /// The secret its disk's key is in, as defined.
    key_secret: Option<String>,
    power: watch::Sender<Power>,
    /// The real boxd services of its current boot, once connected to.
    guest: Option<guest::Booted>,
}

impl Domain {
    fn new(socket: PathBuf, owner: Option<String>) -> Self {
        Self {
            socket,
            owner,
            status: DomainStatus::ShutOff { saved: false },
            boot_id: String::new(),
            boxd: true,
            key_secret: None,
            power: watch::Sender::new(Power::Off),
            guest: None,
        }
    }

    /// Ends its boot's guest, if it has one.
    fn halt_guest(&mut self) {
        if let Some(booted) = self.guest.take() {
            booted.guest.halt();
        }
    }

    /// The guest of its current boot, made by `guests` if it has none yet
    /// (the last boot's is ended first).
    fn guest_of_boot(
        &mut self,
        name: &str,
        guests: Option<&Arc<dyn GuestBoxd>>,
    ) -> Option<Arc<dyn Guest>> {
        let guests = guests?;
        if self
            .guest
            .as_ref()
            .is_some_and(|b| b.boot_id != self.boot_id)
        {
            self.halt_guest();
        }
        let booted = self.guest.get_or_insert_with(|| guest::Booted {
            boot_id: self.boot_id.clone(),
            guest: guests.boot(name, &self.boot_id),
        });
        Some(booted.guest.clone())
    }

    /// Moves the domain to `status`; its boxd runs only while it runs (the
    /// sessions of a paused, saved or destroyed domain end).
    fn set(&mut self, status: DomainStatus) {
        self.status = status;
        // Its memory is gone, and what ran in it.
        if matches!(
            status,
            DomainStatus::ShutOff { saved: false } | DomainStatus::Broken
        ) {
            self.halt_guest();
        }
        self.power.send_replace(match status {
            DomainStatus::Running => Power::Running {
                boot_id: self.boot_id.clone(),
                answers: self.boxd,
            },
            DomainStatus::Paused => Power::Paused,
            DomainStatus::ShutOff { .. } | DomainStatus::Broken => Power::Off,
        });
    }
}

fn no_domain(name: &str) -> LibvirtError {
    LibvirtError::NoDomain(name.to_owned())
}

fn refused(name: &str, status: DomainStatus, call: &str) -> LibvirtError {
    LibvirtError::Call(format!("cannot {call} domain {name}: it is {status:?}"))
}

impl FakeHypervisor {
    /// A host with no domains, known by `uri`.
    pub fn new(uri: &str) -> Self {
        Self {
            uri: uri.to_owned(),
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A test that panicked while holding the lock has failed already.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A domain as if made before the test (by an earlier server): on
    /// channel `socket`, owned by installation `owner`, in `status`. Returns
    /// its boot id.
    pub fn put(&self, name: &str, socket: PathBuf, owner: &str, status: DomainStatus) -> String {
        let mut inner = self.lock();
        inner.boots += 1;
        let mut domain = Domain::new(socket, Some(owner.to_owned()));
        domain.boot_id = format!("boot-{}", inner.boots);
        domain.set(status);
        let boot_id = domain.boot_id.clone();
        inner.domains.insert(name.to_owned(), domain);
        boot_id
    }

    /// The disk secrets defined now, by uuid.
    pub fn disk_secrets(&self) -> Vec<String> {
        self.lock().secrets.keys().cloned().collect()
    }

    /// What a restart of libvirtd does to psbx's secrets: being ephemeral,
    /// they are gone; domains (persistent) and running QEMUs stay.
    pub fn restart_libvirtd(&self) {
        self.lock().secrets.clear();
    }

    /// The secret domain `name`'s disk names, as defined.
    pub fn key_secret_of(&self, name: &str) -> Option<String> {
        self.lock().domains.get(name)?.key_secret.clone()
    }

    /// Whether the boxd of domain `name` answers on the connections it gets
    /// from now on (a silent one never finishes the session handshake).
    pub fn set_boxd_answers(&self, name: &str, answers: bool) {
        if let Some(domain) = self.lock().domains.get_mut(name) {
            domain.boxd = answers;
            let status = domain.status;
            domain.set(status);
        }
    }

    /// Refuses the next `verb` call (`"start"`, `"save"`) on domain `name`,
    /// leaving the domain as it was, as libvirt does when QEMU or its save
    /// file gives up.
    pub fn refuse_next(&self, name: &str, verb: &'static str) {
        self.lock().refuse.push((name.to_owned(), verb));
    }

    /// Makes the boxd of domain `name` (`"*"`: of every domain) refuse every
    /// `configure` on the sessions it takes from now on (a box that will not
    /// take its claim).
    pub fn refuse_configure(&self, name: &str) {
        if let Ok(mut names) = self.lock().unconfigurable.lock() {
            names.insert(name.to_owned());
        }
    }

    /// Whether a `verb` call on `name` is to be refused (once).
    fn refused_once(&self, name: &str, verb: &str) -> bool {
        let mut inner = self.lock();
        match inner
            .refuse
            .iter()
            .position(|(n, v)| n == name && *v == verb)
        {
            Some(i) => {
                inner.refuse.remove(i);
                true
            }
            None => false,
        }
    }

    /// Has `guests` serve the box API (every stream but `info`, `health`,
    /// `clock`, `port:<n>` and `shot`) of the domains' boots from now on, in
    /// place of the stubs of the fake's boxd (`guest.rs`).
    pub fn serve_guests_with(&self, guests: Arc<dyn GuestBoxd>) {
        self.lock().guests = Some(guests);
    }

    /// What every domain's boxd answers to `shot` from now on; `None`: its
    /// own 64x48 PNG.
    pub fn set_shot(&self, shot: Option<FakeShot>) {
        let script = self.lock().shot.clone();
        *script.lock().unwrap_or_else(|e| e.into_inner()) = shot;
    }

    /// Every lifecycle call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The lifecycle calls on domain `name` so far.
    pub fn calls_on(&self, name: &str) -> Vec<Call> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.domain() == Some(name))
            .cloned()
            .collect()
    }

    /// The requests boxd answered on domain `name`'s channel, by target.
    pub fn served_on(&self, name: &str) -> Vec<String> {
        let served = self.lock().served.clone();
        let served = served.lock().unwrap_or_else(|e| e.into_inner());
        served
            .iter()
            .filter(|s| s.domain == name)
            .map(|s| s.target.clone())
            .collect()
    }

    /// The domain's status, `None` when there is no such domain.
    pub fn status(&self, name: &str) -> Option<DomainStatus> {
        self.lock().domains.get(name).map(|d| d.status)
    }

    /// The id of the domain's current (or last) boot.
    pub fn boot_id(&self, name: &str) -> Option<String> {
        self.lock().domains.get(name).map(|d| d.boot_id.clone())
    }

    /// Records `call`, then applies `f` to the domain it names.
    /// Records `call` and moves its domain to `to` when it is in one of
    /// `from`, as libvirt does; refuses it otherwise.
    fn step(
        &self,
        call: Call,
        verb: &str,
        from: &[DomainStatus],
        to: DomainStatus,
    ) -> Result<(), LibvirtError> {
        let name = call.domain().unwrap_or_default().to_owned();
        self.on_domain(call, |domain, _| {
            if !from.contains(&domain.status) {
                return Err(refused(&name, domain.status, verb));
            }
            domain.set(to);
            Ok(())
        })
    }

    fn on_domain(
        &self,
        call: Call,
        f: impl FnOnce(&mut Domain, &mut u64) -> Result<(), LibvirtError>,
    ) -> Result<(), LibvirtError> {
        let mut inner = self.lock();
        let name = call.domain().unwrap_or_default().to_owned();
        inner.calls.push(call);
        let Inner { domains, boots, .. } = &mut *inner;
        let domain = domains.get_mut(&name).ok_or_else(|| no_domain(&name))?;
        f(domain, boots)
    }

    /// A connection to the channel at `socket`: refused unless its domain
    /// runs or is paused (QEMU listens on it only then).
    fn connect(&self, socket: &Path) -> io::Result<ChannelStream> {
        let mut inner = self.lock();
        let Inner {
            domains,
            guests,
            served,
            shot,
            unconfigurable,
            ..
        } = &mut *inner;
        let Some((name, domain)) = domains.iter_mut().find(|(_, d)| d.socket == socket) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no domain listens on {}", socket.display()),
            ));
        };
        if !matches!(domain.status, DomainStatus::Running | DomainStatus::Paused) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("domain {name} is {:?}", domain.status),
            ));
        }
        let guest = domain.guest_of_boot(name, guests.as_ref());
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        tokio::spawn(boxd::serve(
            theirs,
            domain.power.subscribe(),
            name.clone(),
            boxd::Scripts {
                served: served.clone(),
                shot: shot.clone(),
                unconfigurable: unconfigurable.clone(),
                guest,
            },
        ));
        Ok(Box::new(ours))
    }
}

impl Hypervisor for FakeHypervisor {
    fn uri(&self) -> &str {
        &self.uri
    }

    fn define(&self, spec: &DomainSpec) -> Result<(), LibvirtError> {
        let mut inner = self.lock();
        inner.calls.push(Call::Define(spec.name.clone()));
        match inner.domains.get_mut(&spec.name) {
            Some(domain) => {
                domain.socket = spec.channel_socket.clone();
                domain.owner = Some(spec.owner.clone());
            }
            None => {
                let domain = Domain::new(spec.channel_socket.clone(), Some(spec.owner.clone()));
                inner.domains.insert(spec.name.clone(), domain);
            }
        }
        if let Some(domain) = inner.domains.get_mut(&spec.name) {
            domain.key_secret = spec.disk.as_ref().and_then(|d| d.key_secret.clone());
        }
        Ok(())
    }

    fn start(&self, name: &str) -> Result<(), LibvirtError> {
        if self.refused_once(name, "start") {
            self.lock().calls.push(Call::Start(name.to_owned()));
            return Err(LibvirtError::Call(format!(
                "refused start of {name} (a test asked)"
            )));
        }
        let secrets: Vec<String> = self.lock().secrets.keys().cloned().collect();
        self.on_domain(Call::Start(name.to_owned()), |domain, boots| {
            // As libvirt: QEMU cannot open the disk without its key.
            if let Some(uuid) = &domain.key_secret
                && !secrets.contains(uuid)
            {
                return Err(LibvirtError::Call(format!(
                    "Secret not found: no secret with matching uuid '{uuid}' (starting {name})"
                )));
            }
            match domain.status {
                // Restored from its managed save: the same boot goes on.
                DomainStatus::ShutOff { saved: true } => {}
                DomainStatus::ShutOff { saved: false } | DomainStatus::Broken => {
                    *boots += 1;
                    domain.boot_id = format!("boot-{boots}");
                }
                status => return Err(refused(name, status, "start")),
            }
            domain.set(DomainStatus::Running);
            Ok(())
        })
    }

    fn suspend(&self, name: &str) -> Result<(), LibvirtError> {
        self.step(
            Call::Suspend(name.to_owned()),
            "suspend",
            &[DomainStatus::Running],
            DomainStatus::Paused,
        )
    }

    fn resume(&self, name: &str) -> Result<(), LibvirtError> {
        self.step(
            Call::Resume(name.to_owned()),
            "resume",
            &[DomainStatus::Paused],
            DomainStatus::Running,
        )
    }

    fn managed_save(&self, name: &str) -> Result<(), LibvirtError> {
        if self.refused_once(name, "save") {
            self.lock().calls.push(Call::ManagedSave(name.to_owned()));
            return Err(LibvirtError::Call(format!(
                "refused save of {name} (a test asked)"
            )));
        }
        self.step(
            Call::ManagedSave(name.to_owned()),
            "save",
            &[DomainStatus::Running, DomainStatus::Paused],
            DomainStatus::ShutOff { saved: true },
        )
    }

    fn remove(&self, name: &str) -> Result<(), LibvirtError> {
        let mut inner = self.lock();
        inner.calls.push(Call::Remove(name.to_owned()));
        if let Some(mut domain) = inner.domains.remove(name) {
            domain.set(DomainStatus::ShutOff { saved: false });
        }
        Ok(())
    }

    fn list(&self) -> Result<Vec<DomainInfo>, LibvirtError> {
        Ok(self
            .lock()
            .domains
            .iter()
            .filter(|(name, _)| name.starts_with(DOMAIN_PREFIX))
            .map(|(name, d)| DomainInfo {
                name: name.clone(),
                status: d.status,
                owner: d.owner.clone(),
            })
            .collect())
    }

    fn create_overlay(
        &self,
        base: &Path,
        overlay: &Path,
        _size_gb: u64,
        _key: Option<&DiskKey>,
    ) -> Result<(), LibvirtError> {
        self.lock().calls.push(Call::Overlay(overlay.to_owned()));
        if !base.is_file() {
            return Err(LibvirtError::Disk(format!(
                "no base image {}",
                base.display()
            )));
        }
        std::fs::write(overlay, b"").map_err(|e| LibvirtError::Disk(e.to_string()))
    }

    fn set_disk_secret(&self, uuid: &str, key: &DiskKey) -> Result<(), LibvirtError> {
        self.lock().secrets.insert(uuid.to_owned(), key.clone());
        Ok(())
    }

    fn remove_disk_secret(&self, uuid: &str) -> Result<(), LibvirtError> {
        self.lock().secrets.remove(uuid);
        Ok(())
    }

    fn channel(&self, socket: &Path) -> Dial {
        let (fake, socket) = (self.clone(), socket.to_owned());
        Arc::new(move || {
            let (fake, socket) = (fake.clone(), socket.clone());
            Box::pin(async move { fake.connect(&socket) })
        })
    }
}
