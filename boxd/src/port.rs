//! Finding the virtio-serial port by name. Without udev (a busybox initramfs)
//! there is no `/dev/virtio-ports/<name>` link, so the name is read from sysfs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `/dev/vportNpM` of the port called `name`, waiting up to `wait` for it to
/// appear (its driver may still be loading).
pub fn find(name: &str, wait: Duration) -> std::io::Result<PathBuf> {
    let linked = PathBuf::from("/dev/virtio-ports").join(name);
    let deadline = Instant::now() + wait;
    loop {
        if linked.exists() {
            return Ok(linked);
        }
        if let Ok(entries) = std::fs::read_dir("/sys/class/virtio-ports") {
            for entry in entries.flatten() {
                let named = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
                if named.trim() == name {
                    return Ok(PathBuf::from("/dev").join(entry.file_name()));
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no virtio-serial port named {name} (is virtio_console loaded?)"),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The virtio-serial port as an async byte stream: opened non-blocking and
/// driven by the reactor. A read of 0 bytes means the host side is not
/// connected (server restarting, box thawing): the session ends and boxd opens
/// a new one.
pub struct PortIo {
    fd: tokio::io::unix::AsyncFd<std::fs::File>,
}

impl PortIo {
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)?;
        // `AsyncFd::new` is deprecated because it can register a descriptor the
        // caller does not own; here it owns the File, and the safe alternative
        // (`register`) is an `unsafe fn`, which this crate does not use.
        #[allow(deprecated)]
        let fd = tokio::io::unix::AsyncFd::new(file)?;
        Ok(Self { fd })
    }
}

impl tokio::io::AsyncRead for PortIo {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::io::Read;
        loop {
            let mut guard = std::task::ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|inner| inner.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return std::task::Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return std::task::Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl tokio::io::AsyncWrite for PortIo {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::io::Write;
        loop {
            let mut guard = std::task::ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|inner| inner.get_ref().write(data)) {
                Ok(result) => return std::task::Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}
