//! The host's nftables table of one installation, `inet psbx_<installation>`:
//! a filter on the `output` hook for the sockets of that installation's QEMU
//! processes (`meta skuid`, the uid every box of it runs as), which are the
//! ones QEMU's user networking opens for the box's connections. Written as
//! nft's own text and replaced as a whole in one `nft -f -` transaction (the
//! `nftables` crate would only build the same script as JSON for the same
//! binary). Each installation has its own table and uid, so several on one
//! host neither see nor undo each other's rules.

use super::NetworkError;
use ipnet::Ipv4Net;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// What goes into the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset<'a> {
    pub table: &'a str,
    pub installation: &'a str,
    pub uid: u32,
    pub denied: &'a [Ipv4Net],
    pub allowed: &'a [Ipv4Net],
    pub only: &'a [Ipv4Net],
}

fn set(out: &mut String, name: &str, nets: &[Ipv4Net]) {
    let list: Vec<String> = nets.iter().map(Ipv4Net::to_string).collect();
    let _ = writeln!(
        out,
        "\tset {name} {{\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = {{ {} }}\n\t}}",
        list.join(", ")
    );
}

impl Ruleset<'_> {
    /// The nft script that replaces the table.
    pub fn script(&self) -> String {
        let table = self.table;
        let mut sets = String::new();
        set(&mut sets, "denied", self.denied);
        let mut rules = String::from(
            "\t\tmeta nfproto ipv6 counter drop comment \"IPv6 is switched off for boxes\"\n\
             \t\tfib daddr type { local, broadcast, anycast, multicast } counter drop comment \"the host's own addresses\"\n",
        );
        if !self.allowed.is_empty() {
            set(&mut sets, "allowed", self.allowed);
            rules.push_str("\t\tip daddr @allowed accept\n");
        }
        rules.push_str("\t\tip daddr @denied counter drop\n");
        if !self.only.is_empty() {
            set(&mut sets, "only", self.only);
            rules.push_str(
                "\t\tip daddr != @only counter drop comment \"allow-list mode: only these ranges\"\n",
            );
        }
        // Declaring the table first makes the delete succeed when it is new.
        format!(
            "table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n\
             \tcomment \"psbx: what the boxes of {inst} (QEMU as uid {uid}) may reach\"\n\
             {sets}\
             \tchain output {{\n\t\ttype filter hook output priority -10; policy accept;\n\
             \t\tmeta skuid {uid} jump box\n\t}}\n\
             \tchain box {{\n{rules}\t}}\n\
             }}\n",
            inst = self.installation,
            uid = self.uid,
        )
    }
}

/// Replaces the table with `script`.
pub fn apply(script: &str) -> Result<(), NetworkError> {
    nft(&["-f", "-"], Some(script)).map(drop)
}

/// The table as nft lists it now; `None` when there is none.
fn listed(table: &str) -> Result<Option<String>, NetworkError> {
    match nft(&["list", "table", "inet", table], None) {
        Ok(text) => Ok(Some(text)),
        Err(NetworkError::Nft(e)) if e.contains("No such file or directory") => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the table is there now and filters `uid` (a table of that name
/// made by something else, or emptied, does not count).
pub fn installed(table: &str, uid: u32) -> Result<bool, NetworkError> {
    Ok(listed(table)?.is_some_and(|text| text.contains(&format!("meta skuid {uid} jump box"))))
}

/// Deletes the table (nothing to do when it is gone already).
pub fn delete(table: &str) -> Result<(), NetworkError> {
    if listed(table)?.is_some() {
        nft(&["delete", "table", "inet", table], None)?;
    }
    Ok(())
}

fn nft(args: &[&str], input: Option<&str>) -> Result<String, NetworkError> {
    let mut child = Command::new("nft")
        .args(args)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            NetworkError::NoNft(format!(
                "cannot run nft ({e}): install nftables (scripts/setup does), or set \
                 boxes.network = false to run boxes without a network card"
            ))
        })?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| NetworkError::Nft(format!("writing to nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NetworkError::Nft(format!("nft: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetworkError::Nft(format!(
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<Ipv4Net> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn the_script_filters_the_installations_uid() {
        let denied = nets(&["10.0.0.0/8", "127.0.0.0/8"]);
        let text = Ruleset {
            table: "psbx_inst_abc",
            installation: "inst_abc",
            uid: 1879048200,
            denied: &denied,
            allowed: &[],
            only: &[],
        }
        .script();
        assert_eq!(
            text,
            "table inet psbx_inst_abc\n\
             delete table inet psbx_inst_abc\n\
             table inet psbx_inst_abc {\n\
             \tcomment \"psbx: what the boxes of inst_abc (QEMU as uid 1879048200) may reach\"\n\
             \tset denied {\n\
             \t\ttype ipv4_addr\n\
             \t\tflags interval\n\
             \t\telements = { 10.0.0.0/8, 127.0.0.0/8 }\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority -10; policy accept;\n\
             \t\tmeta skuid 1879048200 jump box\n\
             \t}\n\
             \tchain box {\n\
             \t\tmeta nfproto ipv6 counter drop comment \"IPv6 is switched off for boxes\"\n\
             \t\tfib daddr type { local, broadcast, anycast, multicast } counter drop comment \"the host's own addresses\"\n\
             \t\tip daddr @denied counter drop\n\
             \t}\n\
             }\n"
        );
    }

    #[test]
    fn allowed_ranges_come_before_the_deny_list_and_only_after_it() {
        let (denied, allowed, only) = (
            nets(&["10.0.0.0/8"]),
            nets(&["10.1.2.3/32"]),
            nets(&["198.51.100.0/24", "203.0.113.0/24"]),
        );
        let text = Ruleset {
            table: "psbx_x",
            installation: "x",
            uid: 1,
            denied: &denied,
            allowed: &allowed,
            only: &only,
        }
        .script();
        let allow = text.find("ip daddr @allowed accept").unwrap();
        let deny = text.find("ip daddr @denied counter drop").unwrap();
        let only_at = text.find("ip daddr != @only counter drop").unwrap();
        assert!(allow < deny && deny < only_at, "{text}");
        assert!(text.contains("elements = { 198.51.100.0/24, 203.0.113.0/24 }"));
    }
}
