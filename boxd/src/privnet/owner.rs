//! Which program made a connection to an environment address, so that a
//! failure is reported to the command that caused it (spec, Troubleshooting:
//! `privateEndpointErrors` "for that command only").
//!
//! The entry knows the box's side of the connection by its address (the
//! peer it accepted; DNAT keeps the source). The program's socket is the one
//! whose local address that is in `/proc/net/tcp` (boxd's network namespace:
//! the box's own programs), its inode leads to the process holding it
//! (`/proc/<pid>/fd`), and that process's parents (`/proc/<pid>/stat`) to the
//! command boxd started. A connection from a container lives in another
//! network namespace and is not found here: its owner is unknown. Read from
//! `/proc` by hand: no crate reads socket owners, and what is needed is a
//! few lines of two files.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// How many parents are followed at most (a loop guard).
const MAX_DEPTH: usize = 64;

/// The process holding the box's side of the connection whose box-side
/// address is `peer`, and its parents up to pid 1: `None` when not found.
pub fn lineage_of(peer: SocketAddr) -> Option<Vec<u32>> {
    let SocketAddr::V4(peer) = peer else {
        return None;
    };
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = socket_inode(&table, peer)?;
    let pid = holder(inode)?;
    Some(lineage(pid))
}

/// The inode of the socket whose local address is `local`, from the text of
/// `/proc/net/tcp`.
fn socket_inode(table: &str, local: SocketAddrV4) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let address = parse_address(fields.get(1)?)?;
        let inode: u64 = fields.get(9)?.parse().ok()?;
        (address == local && inode != 0).then_some(inode)
    })
}

/// `0100007F:1F90` → 127.0.0.1:8080 (the address in the kernel's byte
/// order, written as one 32-bit hexadecimal number).
fn parse_address(text: &str) -> Option<SocketAddrV4> {
    let (ip, port) = text.split_once(':')?;
    let ip = u32::from_str_radix(ip, 16).ok()?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_ne_bytes()), port))
}

/// The process that has `socket:[inode]` open.
fn holder(inode: u64) -> Option<u32> {
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|proc| {
        let pid: u32 = proc.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(proc.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.as_os_str() == wanted.as_str())
            })
            .then_some(pid)
    })
}

/// `pid` and its parents, nearest first.
fn lineage(pid: u32) -> Vec<u32> {
    let mut chain = vec![pid];
    let mut current = pid;
    while chain.len() < MAX_DEPTH {
        let Some(parent) = std::fs::read_to_string(format!("/proc/{current}/stat"))
            .ok()
            .and_then(|stat| parent_of(&stat))
        else {
            break;
        };
        if parent == 0 || chain.contains(&parent) {
            break;
        }
        chain.push(parent);
        current = parent;
    }
    chain
}

/// The parent pid from the text of `/proc/<pid>/stat`: the field after the
/// state, which follows the command name in parentheses (which may itself
/// hold spaces and parentheses).
fn parent_of(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_in_the_kernels_byte_order() {
        assert_eq!(
            parse_address("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_address("010012C6:C350"),
            Some("198.18.0.1:50000".parse().unwrap())
        );
        assert_eq!(parse_address("nonsense"), None);
    }

    #[test]
    fn the_socket_is_found_by_its_local_address() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:9C41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0 100 0 0 10 0\n\
            1: 010012C6:C350 020012C6:1538 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0 20 4 30 10 -1\n\
            2: 0100007F:9C41 010012C6:C350 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0 20 4 30 10 -1\n";
        assert_eq!(
            socket_inode(table, "198.18.0.1:50000".parse().unwrap()),
            Some(2222)
        );
        assert_eq!(socket_inode(table, "10.0.0.1:1".parse().unwrap()), None);
    }

    #[test]
    fn the_parent_follows_the_command_name() {
        assert_eq!(parent_of("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a) b (c)) R 9 42 42 0 -1"), Some(9));
        assert_eq!(parent_of("garbage"), None);
    }

    #[tokio::test]
    async fn a_connection_is_traced_to_this_process() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_accepted, peer) = listener.accept().await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let chain = lineage_of(peer).expect("the test's own socket");
        assert_eq!(chain[0], std::process::id());
        assert!(chain.len() >= 2, "{chain:?}");
    }
}
