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
