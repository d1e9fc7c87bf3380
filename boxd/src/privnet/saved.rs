//! The box's setup kept for a restarted boxd: once a claim's addresses are in
//! place (and again after every change of the box's wiring), the claim's
//! endpoints, the wiring and the address each name got are written to
//! `/run/psbx/privnet.json` (`crate::kept`: it outlives boxd, not the box's
//! boot). A boxd
//! that starts and finds it sets the same addresses up again (`restore` in
//! `mod.rs`): programs in the box cached what the names resolved to.

use super::addresses::{self, Assigned, Named};
use super::error::KeptError;
use psbx_wire::Endpoint;
use psbx_wire::boxd::Wiring;
use std::path::Path;

/// Where the setup is kept.
pub const PATH: &str = "/run/psbx/privnet.json";

/// What a restarted boxd needs to set the same addresses up again.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// The claim's endpoints as they came (a later claim is compared with
    /// them).
    pub endpoints: Vec<Endpoint>,
    /// Each address and where it is in the box.
    pub assigned: Vec<Assigned>,
    /// The box's declared services and links (none from an older boxd).
    #[serde(default)]
    pub wiring: Wiring,
    /// The addresses of the wiring's names that are not environment names.
    #[serde(default)]
    pub extra: Vec<Named>,
}

/// The setup kept at `path`: `Ok(None)` when there is none, an error when the
/// file cannot be read or does not hold a setup boxd could have made.
pub fn read(path: &Path) -> Result<Option<Saved>, String> {
    let Some(saved) = crate::kept::read::<Saved>(path)? else {
        return Ok(None);
    };
    if saved.endpoints.is_empty() && saved.wiring.is_empty() {
        return Err(KeptError::NoEndpoints.to_string());
    }
    addresses::check(&saved.endpoints, &saved.assigned).map_err(|e| e.to_string())?;
    addresses::check_extra(&saved.assigned, &saved.extra).map_err(|e| e.to_string())?;
    Ok(Some(saved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn endpoints() -> Vec<Endpoint> {
        [
            ("db.internal", 5432),
            ("10.9.8.7", 8080),
            ("DB.internal", 6432),
        ]
        .map(|(host, port)| Endpoint::new(psbx_wire::HostName::parse(host).unwrap(), port))
        .to_vec()
    }

    fn saved() -> Saved {
        let endpoints = endpoints();
        let assigned = addresses::assign(&endpoints).unwrap();
        Saved {
            endpoints,
            assigned,
            wiring: Wiring::default(),
            extra: Vec::new(),
        }
    }

    #[test]
    fn a_written_setup_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/psbx/privnet.json");
        assert_eq!(read(&path), Ok(None));
        crate::kept::write(&path, &saved()).unwrap();
        assert_eq!(read(&path), Ok(Some(saved())));
    }

    #[test]
    fn addresses_given_before_are_kept_not_given_again() {
        // An older boxd gave db.internal .9: a restart keeps .9.
        let mut kept = saved();
        for a in &mut kept.assigned {
            if a.endpoint.host.as_str() == "db.internal" {
                a.addr = Ipv4Addr::new(198, 18, 0, 9);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("privnet.json");
        crate::kept::write(&path, &kept).unwrap();
        let read = read(&path).unwrap().unwrap();
        assert_eq!(read.assigned[0].addr, Ipv4Addr::new(198, 18, 0, 9));
        // Read back through the host-name rule: in its canonical form.
        assert_eq!(read.endpoints[2].host.as_str(), "db.internal");
    }

    #[test]
    fn a_damaged_setup_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("privnet.json");
        let mut bad = vec![
            b"{\"endpoints\": [".to_vec(),
            b"{}".to_vec(),
            b"{\"endpoints\": [], \"assigned\": []}".to_vec(),
        ];
        // A host that is not one (the JSON edited: no value of the type is).
        let text = String::from_utf8(serde_json::to_vec(&saved()).unwrap()).unwrap();
        bad.push(text.replacen("\"db.internal\"", "\"a b\"", 1).into_bytes());
        let edits: [fn(&mut Saved); 7] = [
            |s| {
                s.assigned.pop();
            },
            |s| s.assigned.swap(0, 1),
            |s| s.assigned[0].addr = Ipv4Addr::new(198, 18, 0, 1),
            |s| s.assigned[0].addr = Ipv4Addr::new(10, 0, 0, 1),
            |s| s.assigned[1].addr = Ipv4Addr::new(10, 9, 8, 8),
            |s| s.assigned[2].addr = Ipv4Addr::new(198, 18, 0, 3),
            |s| s.assigned[0].addr = Ipv4Addr::new(10, 9, 8, 7),
        ];
        for edit in edits {
            let mut s = saved();
            edit(&mut s);
            bad.push(serde_json::to_vec(&s).unwrap());
        }
        for bytes in bad {
            std::fs::write(&path, &bytes).unwrap();
            assert!(read(&path).is_err(), "{}", String::from_utf8_lossy(&bytes));
        }
    }
}
