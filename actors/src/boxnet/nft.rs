//! The host's nftables table of one installation, `inet psbx_<installation>`:
//! a filter on the `output` hook for the sockets of that installation's QEMU
//! processes (`meta skuid`, the range of uids its boxes run as, `jail.rs`),
//! which are the ones QEMU's user networking opens for the box's
//! connections. What a box sends past the filter is counted per uid in the
//! dynamic set `egress` (an element with a counter per uid, made by the
//! first packet), read by [`egress`] from the same listing the check reads.
//! Written as nft's own text and replaced as a whole in one `nft -f -`
//! transaction (the `nftables` crate would only build the same script as
//! JSON for the same binary). Each installation has its own table and uids,
//! so several on one host neither see nor undo each other's rules.
//!
//! With a source address set (`boxes.egress.snat`), a `source_nat` chain on
//! the `postrouting` hook rewrites the source of those uids' packets to it.
//!
//! Whether the rules are still in place is read from nft's JSON listing
//! (`nft -j list table`) and compared, whole, with the listing taken right
//! after psbx wrote them ([`normalized`]: without handles, counter values
//! and the elements of `egress`, which packets add): a flushed chain, a
//! removed rule, set or chain, or an added rule all count as "not
//! installed", and the table is written again.

use super::NetworkError;
use crate::jail::UidRange;
use ipnet::Ipv4Net;
use serde_json::Value;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// What goes into the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset<'a> {
    pub table: &'a str,
    pub installation: &'a str,
    pub uids: UidRange,
    pub denied: &'a [Ipv4Net],
    pub allowed: &'a [Ipv4Net],
    pub only: &'a [Ipv4Net],
    /// The source address boxes' packets leave with (none: the host's route's).
    pub snat: Option<std::net::Ipv4Addr>,
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
        rules.push_str("\t\tupdate @egress { meta skuid } comment \"what each box sends\"\n");
        sets.push_str(EGRESS_SET);
        let nat = match self.snat {
            Some(addr) => format!(
                "\tchain source_nat {{\n\t\ttype nat hook postrouting priority 100; policy accept;\n\
                 \t\tmeta skuid {uids} counter snat ip to {addr} comment \"boxes leave from an address of their own\"\n\t}}\n",
                uids = self.uids.nft()
            ),
            None => String::new(),
        };
        // Declaring the table first makes the delete succeed when it is new.
        format!(
            "table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n\
             \tcomment \"psbx: what the boxes of {inst} (QEMU as uids {first}-{last}, {legacy}) may reach\"\n\
             {sets}\
             \tchain output {{\n\t\ttype filter hook output priority -10; policy accept;\n\
             \t\tmeta skuid {uids} jump box\n\t}}\n\
             \tchain box {{\n{rules}\t}}\n\
             {nat}\
             }}\n",
            inst = self.installation,
            first = self.uids.first,
            last = self.uids.last,
            legacy = self.uids.legacy,
            uids = self.uids.nft(),
        )
    }
}

/// Replaces the table with `script`.
pub fn apply(script: &str) -> Result<(), NetworkError> {
    nft(&["-f", "-"], Some(script)).map(drop)
}

/// The set that counts each box uid's bytes: one element per uid, made by
/// its first packet, large enough for every uid of the range.
const EGRESS_SET: &str =
    "\tset egress {\n\t\ttype uid\n\t\tsize 65535\n\t\tflags dynamic\n\t\tcounter\n\t}\n";

/// The table as nft lists it now, as JSON; `None` when there is none.
pub fn listed(table: &str) -> Result<Option<Value>, NetworkError> {
    match nft(&["-j", "list", "table", "inet", table], None) {
        // A table nft lists as nothing (one another program owns, `flags
        // owner`): there, but not psbx's rules.
        Ok(text) => Ok(Some(serde_json::from_str(&text).unwrap_or(Value::Null))),
        Err(NetworkError::Nft(e)) if e.contains("No such file or directory") => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the listing `now` holds the rules of the normalized `expected`.
pub fn same_rules(now: &Value, expected: &Value) -> bool {
    &normalized(now) == expected
}

/// A listing of `nft -j` without what changes while the rules stay the same:
/// nft's version (`metainfo`), object handles, counters' figures, and the
/// elements packets add to `egress`.
pub fn normalized(listing: &Value) -> Value {
    fn strip(v: &Value) -> Value {
        let counting = v.get("name").and_then(Value::as_str) == Some("egress");
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "handle" && !(counting && k.as_str() == "elem"))
                    .map(|(k, v)| {
                        let v = if k == "counter" {
                            Value::Null
                        } else {
                            strip(v)
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let items = listing
        .get("nftables")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|item| item.get("metainfo").is_none())
                .map(strip)
                .collect()
        })
        .unwrap_or_default();
    Value::Array(items)
}

/// What each uid has sent past the filter, from a listing of the table: the
/// bytes of each element of `egress`.
pub fn egress(listing: &Value) -> Vec<(u32, u64)> {
    let sets = listing.get("nftables").and_then(Value::as_array);
    sets.into_iter()
        .flatten()
        .filter_map(|item| item.get("set"))
        .filter(|set| set.get("name").and_then(Value::as_str) == Some("egress"))
        .filter_map(|set| set.get("elem").and_then(Value::as_array))
        .flatten()
        .filter_map(|e| {
            let e = e.get("elem")?;
            let uid = u32::try_from(e.get("val")?.as_u64()?).ok()?;
            Some((uid, e.get("counter")?.get("bytes")?.as_u64()?))
        })
        .collect()
}

/// Drops `uid`'s counter (its box is new; the next packet starts another).
pub fn forget(table: &str, uid: u32) -> Result<(), NetworkError> {
    let element = format!("{{ {uid} }}");
    match nft(
        &["delete", "element", "inet", table, "egress", &element],
        None,
    ) {
        Err(NetworkError::Nft(e)) if e.contains("No such file or directory") => Ok(()),
        other => other.map(drop),
    }
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

    fn uids() -> UidRange {
        UidRange {
            first: 1610612736,
            last: 1610616831,
            legacy: 1879048200,
        }
    }

    #[test]
    fn the_script_filters_the_installations_uids_and_counts_each() {
        let denied = nets(&["10.0.0.0/8", "127.0.0.0/8"]);
        let text = Ruleset {
            table: "psbx_inst_abc",
            installation: "inst_abc",
            uids: uids(),
            denied: &denied,
            allowed: &[],
            only: &[],
            snat: None,
        }
        .script();
        assert_eq!(
            text,
            "table inet psbx_inst_abc\n\
             delete table inet psbx_inst_abc\n\
             table inet psbx_inst_abc {\n\
             \tcomment \"psbx: what the boxes of inst_abc (QEMU as uids 1610612736-1610616831, 1879048200) may reach\"\n\
             \tset denied {\n\
             \t\ttype ipv4_addr\n\
             \t\tflags interval\n\
             \t\telements = { 10.0.0.0/8, 127.0.0.0/8 }\n\
             \t}\n\
             \tset egress {\n\
             \t\ttype uid\n\
             \t\tsize 65535\n\
             \t\tflags dynamic\n\
             \t\tcounter\n\
             \t}\n\
             \tchain output {\n\
             \t\ttype filter hook output priority -10; policy accept;\n\
             \t\tmeta skuid { 1610612736-1610616831, 1879048200 } jump box\n\
             \t}\n\
             \tchain box {\n\
             \t\tmeta nfproto ipv6 counter drop comment \"IPv6 is switched off for boxes\"\n\
             \t\tfib daddr type { local, broadcast, anycast, multicast } counter drop comment \"the host's own addresses\"\n\
             \t\tip daddr @denied counter drop\n\
             \t\tupdate @egress { meta skuid } comment \"what each box sends\"\n\
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
            uids: uids(),
            denied: &denied,
            allowed: &allowed,
            only: &only,
            snat: None,
        }
        .script();
        let allow = text.find("ip daddr @allowed accept").unwrap();
        let deny = text.find("ip daddr @denied counter drop").unwrap();
        let only_at = text.find("ip daddr != @only counter drop").unwrap();
        assert!(allow < deny && deny < only_at, "{text}");
        assert!(text.contains("elements = { 198.51.100.0/24, 203.0.113.0/24 }"));
    }

    #[test]
    fn a_source_address_adds_a_nat_chain_for_the_uid() {
        let text = Ruleset {
            table: "psbx_x",
            installation: "x",
            uids: uids(),
            denied: &[],
            allowed: &[],
            only: &[],
            snat: Some(std::net::Ipv4Addr::new(192, 0, 2, 9)),
        }
        .script();
        assert!(
            text.contains(
                "\tchain source_nat {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\
                 \t\tmeta skuid { 1610612736-1610616831, 1879048200 } counter snat ip to 192.0.2.9 comment"
            ),
            "{text}"
        );
    }

    /// `nft -j list table inet psbx_t` (nft 1.0.6) of a table psbx wrote,
    /// with `box` holding `rules` and the denied rule's counter at `packets`.
    fn listing(rules: bool, packets: u64) -> Value {
        let mut items = serde_json::json!([
            {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
            {"table": {"family": "inet", "name": "psbx_t", "handle": 1}},
            {"set": {"family": "inet", "name": "denied", "table": "psbx_t", "type": "ipv4_addr", "handle": 4,
                     "flags": ["interval"],
                     "elem": [{"prefix": {"addr": "10.0.0.0", "len": 8}}, "168.63.129.16"]}},
            {"set": {"family": "inet", "name": "egress", "table": "psbx_t", "type": "uid", "handle": 5,
                     "size": 65535, "flags": ["dynamic"], "stmt": [{"counter": null}]}},
            {"chain": {"family": "inet", "table": "psbx_t", "name": "output", "handle": 1, "type": "filter",
                       "hook": "output", "prio": -10, "policy": "accept"}},
            {"chain": {"family": "inet", "table": "psbx_t", "name": "box", "handle": 2}},
            {"rule": {"family": "inet", "table": "psbx_t", "chain": "output", "handle": 5, "expr": [
                {"match": {"op": "==", "left": {"meta": {"key": "skuid"}}, "right": 1879048200}},
                {"jump": {"target": "box"}}]}}
        ]);
        if rules && let Some(list) = items.as_array_mut() {
            list.push(serde_json::json!(
                {"rule": {"family": "inet", "table": "psbx_t", "chain": "box", "handle": 7, "expr": [
                    {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@denied"}},
                    {"counter": {"packets": packets, "bytes": packets * 60}}, {"drop": null}]}}
            ));
        }
        serde_json::json!({ "nftables": items })
    }

    #[test]
    fn a_table_whose_box_chain_is_empty_is_not_installed() {
        let written = normalized(&listing(true, 0));
        // Counters count and handles differ: still the same rules.
        assert!(same_rules(&listing(true, 42), &written));
        // `nft flush chain inet psbx_t box`: the jump is there, the rules are not.
        assert!(!same_rules(&listing(false, 0), &written));
        // A set emptied, a table of that name with nothing in it.
        let mut emptied = listing(true, 0);
        emptied["nftables"][2]["set"]["elem"] = serde_json::json!([]);
        assert!(!same_rules(&emptied, &written));
        assert!(!same_rules(
            &serde_json::json!({"nftables": [{"table": {"family": "inet", "name": "psbx_t"}}]}),
            &written
        ));
        assert!(!same_rules(&serde_json::json!({}), &written));
    }

    #[test]
    fn each_uids_bytes_are_read_and_its_elements_are_not_rules() {
        let written = normalized(&listing(true, 0));
        let mut counting = listing(true, 0);
        counting["nftables"][3]["set"]["elem"] = serde_json::json!([
            {"elem": {"val": 1610612736u32, "counter": {"packets": 3, "bytes": 3084}}},
            {"elem": {"val": 1610612737u32, "counter": {"packets": 1, "bytes": 60}}}
        ]);
        assert!(same_rules(&counting, &written), "packets add elements");
        assert_eq!(
            egress(&counting),
            vec![(1610612736, 3084), (1610612737, 60)]
        );
        assert!(egress(&listing(true, 0)).is_empty());
        // The counting set itself gone is a change.
        let mut gone = listing(true, 0);
        if let Some(items) = gone["nftables"].as_array_mut() {
            items.remove(3);
        }
        assert!(!same_rules(&gone, &written));
    }
}
