//! Per-box disks: a qcow2 overlay on a read-only base image, made with
//! `qemu-img` (libvirt's storage-pool API would need a pool per directory for
//! the same one command), encrypted with LUKS under a key of the box's own
//! when one is given (qcow2's native `encrypt.format=luks`: QEMU encrypts
//! each cluster the box writes; the base image, which holds nothing of the
//! box's, stays clear).
//!
//! The key reaches `qemu-img` on its standard input (`file=/dev/stdin`),
//! never on its command line, which every local user can read. It is 32
//! random bytes, so LUKS's key stretching adds nothing to its strength: its
//! iteration time is the smallest QEMU takes (10 ms), and QEMU opens the disk
//! at every start and restore without a second's PBKDF2. QEMU still measures
//! the host's PBKDF2 speed twice per disk it makes (at least half a second
//! of one core each), which is the cost of encryption at a box's creation
//! (`docs/BENCHMARKS.md`).
//!
//! The hash is SHA-512, not QEMU's default SHA-256, because of how qemu-img
//! (10.0 here, from qemu-utils) measures: it times a first round of 32,768
//! iterations with `getrusage(RUSAGE_THREAD)`, which on a kernel with
//! tick-based CPU accounting (this machine kind: HZ=250) moves in 4 ms
//! steps, and refuses to go on when that round reads 0 ms ("Unable to get
//! accurate CPU usage"). With the SHA extensions a CPU runs that round of
//! SHA-256 in less than a tick, and 13 of 20 `qemu-img create`s failed
//! here; SHA-512, which those extensions do not cover, takes about 12 ms,
//! always past a tick: 0 of 60 failed.

use crate::LibvirtError;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// A box disk's LUKS passphrase: printable (libvirt's and QEMU's secrets are
/// text), never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct DiskKey(String);

impl DiskKey {
    /// A new key: 32 random bytes, as hex.
    pub fn generate() -> Result<Self, LibvirtError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| LibvirtError::Disk(format!("no randomness for a disk key: {e}")))?;
        Ok(Self(hex::encode(bytes)))
    }

    /// A key as stored (`as_bytes`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, LibvirtError> {
        match std::str::from_utf8(bytes) {
            Ok(text) if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Ok(Self(text.to_owned()))
            }
            _ => Err(LibvirtError::Disk("a stored disk key is malformed".into())),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for DiskKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DiskKey(..)")
    }
}

/// Creates `overlay`, a qcow2 image backed by `base` (never written), with the
/// given virtual size; LUKS-encrypted under `key` when there is one.
pub fn create_overlay(
    base: &Path,
    overlay: &Path,
    size_gb: u64,
    key: Option<&DiskKey>,
) -> Result<(), LibvirtError> {
    if !base.is_file() {
        return Err(LibvirtError::Disk(format!(
            "the base image {} does not exist: build the image first",
            base.display()
        )));
    }
    let mut command = Command::new("qemu-img");
    command.args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"]);
    command.arg(base);
    if key.is_some() {
        command.args([
            "--object",
            "secret,id=key,file=/dev/stdin",
            "-o",
            "encrypt.format=luks,encrypt.key-secret=key,encrypt.iter-time=10,\
             encrypt.hash-alg=sha512",
        ]);
    }
    let mut child = command
        .arg(overlay)
        .arg(format!("{size_gb}G"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            LibvirtError::Disk(format!("running qemu-img: {e} (is qemu-utils installed?)"))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let written = match key {
            Some(key) => stdin.write_all(key.as_bytes()),
            None => Ok(()),
        };
        drop(stdin);
        if let Err(e) = written {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LibvirtError::Disk(format!(
                "giving qemu-img the disk key: {e}"
            )));
        }
    }
    let output = child
        .wait_with_output()
        .map_err(|e| LibvirtError::Disk(format!("waiting for qemu-img: {e}")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(LibvirtError::Disk(format!(
            "qemu-img create {} failed: {}",
            overlay.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_64_hex_digits_and_round_trip_but_never_print() {
        let key = DiskKey::generate().unwrap();
        assert_eq!(key.as_bytes().len(), 64);
        assert_eq!(DiskKey::from_bytes(key.as_bytes()).unwrap(), key);
        assert_ne!(DiskKey::generate().unwrap(), key);
        assert_eq!(format!("{key:?}"), "DiskKey(..)");
        assert!(DiskKey::from_bytes(b"short").is_err());
        assert!(DiskKey::from_bytes(&[b'z'; 64]).is_err());
    }

    /// What `qemu-io` says reading the first 4 KiB of `image`, with `key` or
    /// without.
    fn read(image: &Path, key: Option<&DiskKey>) -> std::process::Output {
        let mut c = Command::new("qemu-io");
        match key {
            Some(key) => c.args([
                "--object",
                &format!(
                    "secret,id=k,data={}",
                    String::from_utf8_lossy(key.as_bytes())
                ),
                "--image-opts",
                &format!(
                    "driver=qcow2,file.filename={},encrypt.key-secret=k",
                    image.display()
                ),
            ]),
            None => c.args(["-f", "qcow2"]).arg(image),
        };
        c.args(["-c", "read 0 4k"])
            .output()
            .expect("qemu-io runs (qemu-utils)")
    }

    #[test]
    fn an_encrypted_overlay_opens_with_its_key_only() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.qcow2");
        let made = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&base)
            .arg("1G")
            .status()
            .expect("qemu-img runs (qemu-utils)");
        assert!(made.success());
        let key = DiskKey::generate().unwrap();
        let overlay = dir.path().join("disk.qcow2");
        create_overlay(&base, &overlay, 2, Some(&key)).unwrap();

        let with_key = read(&overlay, Some(&key));
        assert!(with_key.status.success(), "{with_key:?}");
        let without = read(&overlay, None);
        assert!(
            !without.status.success(),
            "read without its key: {without:?}"
        );
        assert!(
            String::from_utf8_lossy(&without.stderr).contains("key-secret"),
            "{without:?}"
        );
        let other = read(&overlay, Some(&DiskKey::generate().unwrap()));
        assert!(!other.status.success(), "read with another key: {other:?}");

        let clear = dir.path().join("clear.qcow2");
        create_overlay(&base, &clear, 2, None).unwrap();
        assert!(read(&clear, None).status.success());
    }
}
