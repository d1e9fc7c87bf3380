//! What can go wrong with a box, in terms the HTTP layer maps to statuses.

use crate::box_::state::{BoxState, InvalidTransition};
use crate::store::StoreError;
use psbx_libvirt::LibvirtError;

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
    /// The host cannot fit the box without overcommitting past its limits.
    #[error("{0}")]
    HostFull(String),
    /// No libvirt host is available to run boxes.
    #[error("{0}")]
    NoHost(String),
    /// The host's rules for boxes' network cards are not in place: no box
    /// with a card starts or wakes without them.
    #[error("{0}")]
    NetworkUnavailable(String),
    /// The channel to boxd broke while a command ran (boxd restarted, the
    /// box froze or stopped under it): the command may still be running.
    #[error(
        "the connection to boxd broke while the command ran ({0}); the command may still be running in the box"
    )]
    ChannelLost(String),
    /// An upload to unpack in a box broke off before its end.
    #[error("reading the upload: {0}")]
    Upload(String),
    /// boxd refused the archive of a sync (a path or link leaving the
    /// destination, not a tar): why.
    #[error("{0}")]
    SyncRefused(String),
    /// The box did not come up.
    #[error("the box did not start: {0}")]
    Boot(String),
    #[error(transparent)]
    Libvirt(#[from] LibvirtError),
    #[error(transparent)]
    Store(StoreError),
    #[error("{0}")]
    Internal(String),
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

impl From<crate::boxnet::NetworkError> for BoxError {
    fn from(e: crate::boxnet::NetworkError) -> Self {
        Self::NetworkUnavailable(e.to_string())
    }
}

/// Runs a blocking call (libvirt, the store, the file system) off the async threads.
pub async fn blocking<T, E>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, BoxError>
where
    T: Send + 'static,
    E: Into<BoxError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) => Err(BoxError::Internal(format!("a blocking task failed: {e}"))),
    }
}

impl From<std::io::Error> for BoxError {
    fn from(e: std::io::Error) -> Self {
        Self::Internal(e.to_string())
    }
}
