//! The host's memory as the kernel counts it (`/proc/meminfo`): `MemTotal`
//! for what the host has, `MemAvailable` for what it can still give without
//! swapping. libvirt's node figure (`virNodeGetInfo`) is a NUMA node's share
//! and reports about half of the memory on this kind of machine.
//!
//! Read by hand: two lines of `key: value kB` text; a crate for all of
//! `/proc` (procfs) would bring far more than the two numbers needed.

use std::path::Path;

/// Where the kernel tells its memory.
pub const MEMINFO: &str = "/proc/meminfo";

#[derive(Debug, thiserror::Error)]
pub enum MeminfoError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} has no {key} line: is this a Linux /proc?")]
    Missing { path: String, key: &'static str },
}

/// The host's memory, in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    pub total_mib: u64,
    pub available_mib: u64,
}

impl HostMemory {
    /// Reads [`MEMINFO`].
    pub fn read() -> Result<Self, MeminfoError> {
        Self::read_from(Path::new(MEMINFO))
    }

    pub fn read_from(path: &Path) -> Result<Self, MeminfoError> {
        let text = std::fs::read_to_string(path).map_err(|source| MeminfoError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|key| MeminfoError::Missing {
            path: path.display().to_string(),
            key,
        })
    }

    /// Parses meminfo text; the error names the line that is missing.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let kib = |key: &'static str| {
            text.lines()
                .find_map(|line| {
                    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
                    rest.split_whitespace().next()?.parse::<u64>().ok()
                })
                .ok_or(key)
        };
        Ok(Self {
            total_mib: kib("MemTotal")? / 1024,
            available_mib: kib("MemAvailable")? / 1024,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_total_and_available() {
        let text = "MemTotal:       24563712 kB\nMemFree:         1000000 kB\n\
                    MemAvailable:   23000000 kB\nBuffers:  1 kB\n";
        let m = HostMemory::parse(text).unwrap();
        assert_eq!(m.total_mib, 24563712 / 1024);
        assert_eq!(m.available_mib, 23000000 / 1024);
    }

    #[test]
    fn names_a_missing_line() {
        assert_eq!(HostMemory::parse("MemTotal: 10 kB\n"), Err("MemAvailable"));
    }

    #[test]
    fn reads_this_host() {
        let m = HostMemory::read().unwrap();
        assert!(m.total_mib > 0 && m.available_mib <= m.total_mib, "{m:?}");
    }
}
