//! Which of a box's shares of the host this machine's control groups can
//! hold: libvirt puts each domain in a cgroup of its own and writes
//! `<cputune>`, `<blkiotune>` and `<memtune>` there, but refuses to start a
//! domain asking for a controller the host has not mounted (a container, a
//! kernel without BFQ). Read once from `/sys/fs/cgroup`, cgroup v1 (one
//! mount per controller) or v2 (the root's `cgroup.controllers`).

use std::path::Path;
use std::sync::OnceLock;

/// The controllers a domain's tuning may use here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Controllers {
    pub cpu: bool,
    pub io: bool,
    pub memory: bool,
}

impl Controllers {
    /// This machine's, read on first use.
    pub fn here() -> Self {
        static HERE: OnceLock<Controllers> = OnceLock::new();
        *HERE.get_or_init(|| Self::read(Path::new("/sys/fs/cgroup")))
    }

    /// Those of the cgroup tree mounted at `root`.
    pub fn read(root: &Path) -> Self {
        if let Ok(list) = std::fs::read_to_string(root.join("cgroup.controllers")) {
            let has = |name: &str| list.split_whitespace().any(|c| c == name);
            return Self {
                cpu: has("cpu"),
                io: has("io"),
                memory: has("memory"),
            };
        }
        let file = |path: &str| root.join(path).exists();
        Self {
            cpu: file("cpu/cpu.shares"),
            // libvirt writes BFQ's weight where there is one, else CFQ's.
            io: file("blkio/blkio.bfq.weight") || file("blkio/blkio.weight"),
            memory: file("memory/memory.soft_limit_in_bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_mounts_and_the_v2_list_are_both_read() {
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpuset cpu io pids\n").unwrap();
        assert_eq!(
            Controllers::read(v2.path()),
            Controllers {
                cpu: true,
                io: true,
                memory: false
            }
        );
        let v1 = tempfile::tempdir().unwrap();
        for (dir, file) in [("cpu", "cpu.shares"), ("blkio", "blkio.bfq.weight")] {
            std::fs::create_dir(v1.path().join(dir)).unwrap();
            std::fs::write(v1.path().join(dir).join(file), "").unwrap();
        }
        assert_eq!(
            Controllers::read(v1.path()),
            Controllers {
                cpu: true,
                io: true,
                memory: false
            }
        );
        assert_eq!(
            Controllers::read(Path::new("/nonexistent")),
            Controllers::default()
        );
    }
}
