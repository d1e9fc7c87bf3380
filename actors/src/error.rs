//! What can go wrong with a box, in terms the HTTP layer maps to statuses.

use crate::blocking::TaskFailed;
use crate::box_state::{BoxState, InvalidTransition};
use crate::boxd_link::LinkError;
use crate::environments::EnvError;
use crate::secrets::SecretError;
use crate::store::StoreError;
use psbx_libvirt::LibvirtError;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum BoxError {
    /// No such box in this account (another account's box looks the same).
    #[error("no box {0} in this account")]
    NotFound(String),
    /// No such background command in a box (it never was, it has ended for a
    /// signal, or boxd restarted since and no longer tracks it).
    #[error("no background process {pid} in box {id}")]
    ProcessNotFound { id: String, pid: u32 },
    /// The box is over: stopped or failed.
    #[error("box {id} is {state}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    Over {
        id: String,
        state: BoxState,
        reason: Option<String>,
    },
    /// A lifecycle change the box's state does not allow (HTTP 409).
    #[error(transparent)]
    InvalidTransition(#[from] InvalidTransition),
    /// The request asks for something psbx does not do.
    #[error("{0}")]
    Invalid(String),
    /// A change of the box's wiring that does not fit what the box declares
    /// now (`wiring::Refused::Conflict`; HTTP 409 `wire_conflict`).
    #[error("{0}")]
    WireConflict(String),
    /// boxd could not start the command in the box as it is now (its working
    /// directory is missing, say): the request is well formed, the box refuses it.
    #[error("{0}")]
    CannotRun(String),
    /// The host cannot fit the box without overcommitting past its limits.
    #[error("{0}")]
    HostFull(String),
    /// No libvirt host is available to run boxes.
    #[error("{0}")]
    NoHost(String),
    /// The box's host has no node acting for it now (its node stopped, or
    /// died and its lease ran out, or this node lost the lease): HTTP 503
    /// `host_unavailable`. The box is as it was; it answers again once its
    /// node holds the host's lease.
    #[error(
        "the box's host {0} is unavailable: no psbx node holds it now (its node stopped or \
         lost touch with the database); the box is kept as it was and answers again once its \
         node is back"
    )]
    HostUnavailable(String),
    /// The box is still being made (`creating`, `booting`): it takes calls
    /// once it runs (HTTP 409 `box_starting`).
    #[error("box {id} is {state}: it takes calls once it is running; retry in a few seconds")]
    Starting {
        id: crate::ids::BoxId,
        state: BoxState,
    },
    /// The host's rules for boxes' network cards are not in place: no box
    /// with a card starts or wakes without them.
    #[error(transparent)]
    NetworkUnavailable(#[from] crate::boxnet::NetworkError),
    /// A lifecycle step refused with the domain as it was before (by the
    /// hypervisor, or for want of the box's disk key): the box keeps its
    /// state (HTTP 503 `box_step_failed`).
    #[error("the host could not {step} the box, which is as it was: {source}")]
    StepFailed {
        step: &'static str,
        #[source]
        source: Box<BoxError>,
    },
    /// The channel to boxd broke while a command ran (boxd restarted, the
    /// box froze or stopped under it): the command may still be running.
    #[error(
        "the connection to boxd broke while the command ran ({0}); the command may still be running in the box"
    )]
    ChannelLost(#[source] std::io::Error),
    /// boxd had not said a command ended `grace` past its time limit (boxd
    /// kills it at the limit; one that does not is not believed).
    #[error(
        "the command's time limit is {}s and boxd had not said it ended {}s later: the server stopped waiting; the command may still be running in the box",
        limit.as_secs(),
        grace.as_secs()
    )]
    Overran { limit: Duration, grace: Duration },
    /// An upload to unpack in a box broke off before its end.
    #[error("reading the upload: {0}")]
    Upload(String),
    /// boxd refused the archive of a sync (a path or link leaving the
    /// destination, not a tar): why.
    #[error("{0}")]
    SyncRefused(String),
    /// boxd did not take the screenshot or recording: its code (400 bad
    /// request, 502 chromium or ffmpeg failed or the page could not be
    /// opened, 503 a program missing from the box image, 504 the page did
    /// not load in time, 413 too big) and its reason.
    #[error("{reason}")]
    ShotFailed { code: u16, reason: String },
    /// A shot took longer than its time limit; it was stopped in the box.
    #[error(
        "the shot did not finish within {}s: it was stopped in the box",
        limit.as_secs()
    )]
    ShotTimedOut { limit: Duration },
    /// boxd did not answer in time, its link is closed, or it refused or
    /// garbled a request.
    #[error(transparent)]
    Boxd(#[from] LinkError),
    /// The box did not come up.
    #[error("the box did not start: {0}")]
    Boot(String),
    /// The box came up but boxd did not take the start's configuration (the
    /// secrets, the environment's files and addresses); the box was removed.
    #[error("the box did not take its configuration: {0}")]
    NotConfigured(String),
    /// The box's environment: missing, refused, or its store or vault failing.
    #[error(transparent)]
    Environment(#[from] EnvError),
    /// The box's secrets could not be read (the store or the vault failed).
    #[error(transparent)]
    Secrets(#[from] SecretError),
    #[error(transparent)]
    Libvirt(#[from] LibvirtError),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Task(#[from] TaskFailed),
    /// A box actor or the host supervisor is gone (its mailbox is closed).
    #[error("the {0} is gone")]
    Gone(&'static str, #[source] actix::MailboxError),
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the operating system's random generator failed")]
    Random(#[from] getrandom::Error),
    #[error("a request to boxd could not be encoded")]
    Encode(#[from] serde_json::Error),
    /// Something that should not happen, said in words (never a stringified
    /// error: those get a variant that keeps them as the source).
    #[error("{0}")]
    Internal(String),
}

/// Names a failure of a file or of a stream to boxd:
/// `.map_err(io_error(format!("making {dir}")))`. A stream whose session
/// ended under it (the box froze or stopped, boxd restarted) is
/// `LinkError::Closed`, what the caller is told of a closed channel (503
/// `box_channel_lost`), not a failure of the server's own.
pub fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BoxError {
    let what = what.into();
    move |source| {
        let ended = source
            .get_ref()
            .and_then(|e| e.downcast_ref::<psbx_wire::mux::StreamError>())
            .is_some_and(|e| matches!(e, psbx_wire::mux::StreamError::SessionEnded(_)));
        if ended {
            BoxError::Boxd(crate::boxd_link::LinkError::Closed)
        } else {
            BoxError::Io { what, source }
        }
    }
}

impl BoxError {
    /// Whether this error stopped a lifecycle step before it moved anything:
    /// the box is as it was (the network rules not in place, the
    /// hypervisor's call refused with the domain unchanged).
    pub fn keeps_the_box(&self) -> bool {
        matches!(self, Self::NetworkUnavailable(_) | Self::StepFailed { .. })
    }
}

impl From<StoreError> for BoxError {
    /// A transition the store refused is the box's, not the store's.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidTransition(refused) => Self::InvalidTransition(refused),
            other => Self::Store(other),
        }
    }
}

impl From<crate::jail::JailError> for BoxError {
    /// A host with every uid of the installation taken is full; any other
    /// failure to jail a box leaves the host unable to run it.
    fn from(e: crate::jail::JailError) -> Self {
        match e {
            crate::jail::JailError::Full => Self::HostFull(e.to_string()),
            other => Self::NoHost(other.to_string()),
        }
    }
}
