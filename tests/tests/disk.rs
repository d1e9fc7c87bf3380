//! One box cannot fill the host's disk (review-2 H1): the server's shared
//! directory (and with it `boxes/`) on a small loop-mounted ext4 of the
//! test's own, with `disk_margin_gb = 1`; a size-1 box admitted with more
//! virtual disk than the file system holds (`disk_overcommit` raised, as an
//! operator may) writes to its disk until psbx freezes it, which must happen,
//! with a warning naming the box, before the free space falls under the
//! margin; the database still takes writes and the API still answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::vm::BoxServer;
use psbx_tests::wait;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const GIB: u64 = 1 << 30;

/// An ext4 file system of `gib` GiB in a sparse file, loop-mounted on a
/// directory of its own; unmounted (which frees the loop device) and deleted
/// on drop, also when the test fails.
struct LoopFs {
    // Holds the image file; removed after the unmount (fields drop after `drop`).
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl LoopFs {
    fn new(gib: u64) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // libvirt's QEMU user must reach the box files below it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let image = dir.path().join("fs.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(gib * GIB)
            .unwrap();
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&image));
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let me = Self { _dir: dir, mount };
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&me.mount));
        std::fs::set_permissions(&me.mount, std::fs::Permissions::from_mode(0o755)).unwrap();
        me
    }

    fn free(&self) -> u64 {
        let s = nix::sys::statvfs::statvfs(&self.mount).unwrap();
        s.blocks_available() * s.fragment_size()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // Lazy: a QEMU process still closing its files does not keep it.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// One size-1 TCG box (about 10 s to boot) writing about 1.5 GiB at the
/// default throttle of 100 MiB/s (15-30 s), and a freeze (about 3 s); a
/// 3 GiB sparse file. About 60 s in all.
#[test]
fn a_box_filling_the_disk_is_frozen_before_the_margin() {
    let fs = LoopFs::new(3);
    let margin = GIB;
    // The box: 4 GB of virtual disk on a 3 GiB file system (the ledger may
    // promise 8× the free space here); the server's shared state on it.
    let s = BoxServer::start_with(
        &format!("shared_dir = \"{}\"", fs.mount.display()),
        "unit_disk_gb = 4\ndisk_margin_gb = 1\ndisk_overcommit = 8.0",
    );
    let boxes: &Path = &fs.mount.join("boxes");
    let started = s.ok("POST", "/v1/boxes", Some(json!({"name": "writer"})));
    let id = started["id"].as_str().unwrap().to_owned();
    assert!(
        boxes.join(&id).join("disk.qcow2").is_file(),
        "the overlay is not on the test's file system"
    );
    assert!(
        fs.free() > margin + GIB,
        "the test's file system starts too full"
    );

    // Root in the box writes past its (1 GiB) file system, to the raw disk,
    // in the background: the exec answers at once.
    let out = psbx_tests::vm::exec_text(
        &s,
        &id,
        "(dd if=/dev/zero of=/dev/vda bs=1M seek=1100 count=3000 conv=fsync >/dev/null 2>&1 &); echo writing",
    );
    assert!(out.contains("writing"), "{out}");
    let mut lowest = u64::MAX;
    wait::until(
        "psbx to freeze the writing box",
        Duration::from_secs(300),
        || {
            lowest = lowest.min(fs.free());
            (s.listed_state(&id).as_deref() == Some("frozen")).then_some(())
        },
    );
    lowest = lowest.min(fs.free());
    assert!(
        lowest >= margin,
        "the free space fell to {} MiB, under the 1 GiB margin",
        lowest >> 20
    );
    let log = s.server.as_ref().unwrap().log.text();
    assert!(
        log.lines()
            .any(|l| l.contains("freezing the box that wrote most") && l.contains(&id)),
        "no warning naming {id}: {log}"
    );
    // Nothing else of the installation stopped: the database takes a write,
    // the API answers.
    s.ok(
        "PUT",
        "/v1/secrets/AFTER_THE_DISK",
        Some(json!({"value": "still writable"})),
    );
    let listed = s.ok("GET", "/v1/secrets", None);
    assert!(listed.to_string().contains("AFTER_THE_DISK"), "{listed}");
    s.ok("DELETE", &format!("/v1/boxes/{id}"), None);
}
