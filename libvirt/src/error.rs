//! libvirt's errors as ours: what kind of failure, and libvirt's own message.

/// A failed libvirt (or qemu-img) call.
#[derive(Debug, thiserror::Error)]
pub enum LibvirtError {
    /// The domain does not exist (any more).
    #[error("no libvirt domain {0}")]
    NoDomain(String),
    /// The connection to libvirtd is gone; reconnecting may help.
    #[error("lost the connection to libvirt: {0}")]
    Disconnected(String),
    /// libvirt refused or failed the call.
    #[error("libvirt: {0}")]
    Call(String),
    /// A disk operation (qemu-img, files) failed.
    #[error("{0}")]
    Disk(String),
}

impl LibvirtError {
    pub(crate) fn from_virt(e: &virt::error::Error, domain: Option<&str>) -> Self {
        use virt::error::ErrorNumber;
        match e.code().known() {
            Some(ErrorNumber::NoDomain) => Self::NoDomain(domain.unwrap_or("(unnamed)").to_owned()),
            Some(ErrorNumber::NoConnect | ErrorNumber::SystemError | ErrorNumber::Rpc)
                if e.message().contains("connection") || e.message().contains("closed") =>
            {
                Self::Disconnected(e.message().to_owned())
            }
            Some(ErrorNumber::NoConnect) => Self::Disconnected(e.message().to_owned()),
            _ => Self::Call(e.message().to_owned()),
        }
    }

    pub fn is_disconnected(&self) -> bool {
        matches!(self, Self::Disconnected(_))
    }
}
