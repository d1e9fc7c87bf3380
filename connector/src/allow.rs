//! `PSBX_ALLOW`: the addresses this copy of the connector agrees to dial,
//! enforced again on the connector's side after the server's own list.
//! Exact `host:port` pairs only, like the addresses on a connection.

use std::collections::HashSet;

use psbx_wire::Endpoint;

/// The parsed list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    targets: HashSet<Endpoint>,
}

impl AllowList {
    /// Parses a comma- and/or whitespace-separated list of `host:port`.
    /// An empty list is refused: it would refuse every stream, which is
    /// surely not what was meant (leave the variable unset to allow all).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let targets = raw
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|entry| !entry.is_empty())
            .map(|entry| entry.parse::<Endpoint>().map_err(|e| e.to_string()))
            .collect::<Result<HashSet<_>, _>>()?;
        if targets.is_empty() {
            return Err("the list is empty".into());
        }
        Ok(Self { targets })
    }

    /// Whether `host:port` is listed (host names compare case-insensitively).
    #[cfg(test)]
    pub fn allows(&self, host: &str, port: u16) -> bool {
        format!("{host}:{port}")
            .parse::<Endpoint>()
            .is_ok_and(|t| self.targets.contains(&t))
    }

    /// Whether `target` is listed.
    pub fn contains(&self, target: &Endpoint) -> bool {
        self.targets.contains(target)
    }

    /// How many addresses are listed.
    pub fn count(&self) -> usize {
        self.targets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commas_and_spaces_separate_entries() {
        let list =
            AllowList::parse(" db.internal:5432,redis.internal:6379\n10.0.0.5:80 ,").unwrap();
        assert_eq!(list.count(), 3);
        assert!(list.allows("db.internal", 5432));
        assert!(list.allows("DB.INTERNAL", 5432));
        assert!(list.allows("10.0.0.5", 80));
        assert!(!list.allows("10.0.0.5", 81));
        assert!(!list.allows("other.internal", 5432));
        assert!(list.contains(&"redis.internal:6379".parse::<Endpoint>().unwrap()));
    }

    #[test]
    fn bad_entries_and_empty_lists_are_refused() {
        assert!(AllowList::parse("db.internal:5432 db.internal").is_err());
        assert!(AllowList::parse("10.0.0.0/8:80").is_err());
        assert!(AllowList::parse(" , ").is_err());
    }
}
