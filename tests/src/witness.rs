//! No secret in any output: the secret values and tokens the tests created,
//! and the check that none of them appears unmasked in what the suite's
//! servers, connectors and boxes wrote.
//!
//! The harness registers what passes through it: the value of every
//! `PUT /v1/secrets/{name}` ([`crate::api::call`]), and every token-shaped word
//! (`psbx_...`, `psbx_conn_...`, `psbx_at_...`, `psbxup_...`) in an answer of
//! the API or of an MCP client, once that answer was checked (the answer
//! that hands a token out is where it belongs; a later one repeating it is
//! not). It checks every later answer, the log of every `psbx serve` it
//! stopped ([`crate::ServerProcess`]), the log files of connectors
//! ([`CheckedFile`]) and the consoles of the boxes a [`crate::vm::BoxServer`]
//! left. A value found fails the test that wrote it, naming where.
//!
//! The registry is the test process's: nextest runs each test in a process
//! of its own, so each test is checked against what it created itself.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// Values shorter than this are not masked by psbx either.
const MIN_LEN: usize = 8;
/// The prefixes of psbx's credentials, and how many characters follow at
/// least: OAuth access and refresh tokens and codes, connector tokens,
/// upload tokens; an API key is `psbx_` and then letters and digits only
/// (so `psbx_inst_...` table names and the like are not taken for one).
const TOKEN_PREFIXES: [&str; 5] = ["psbx_at_", "psbx_rt_", "psbx_ac_", "psbx_conn_", "psbxup_"];
const API_KEY_PREFIX: &str = "psbx_";
const MIN_TOKEN_TAIL: usize = 20;

static KNOWN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// A secret value a test gave psbx: no output may show it.
pub fn secret(value: &str) {
    if value.len() >= MIN_LEN {
        KNOWN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(value.to_owned());
    }
}

/// Registers every token in `text` (an answer that handed it out).
pub fn tokens_in(text: &str) {
    for token in tokens(text) {
        secret(&token);
    }
}

/// The token-shaped words of `text`.
fn tokens(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    // A connector token is `psbx_conn_<issuer, base64url>.<secret>`.
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    for (at, _) in text.match_indices("psbx") {
        if at > 0 && text[..at].chars().next_back().is_some_and(word) {
            continue;
        }
        let end = text[at..]
            .find(|c: char| !word(c))
            .map_or(text.len(), |n| at + n);
        let candidate = text[at..end].trim_end_matches(['.', '-']);
        let long = |tail: &str| tail.len() >= MIN_TOKEN_TAIL;
        let token = TOKEN_PREFIXES
            .iter()
            .any(|p| candidate.strip_prefix(p).is_some_and(long));
        let key = candidate
            .strip_prefix(API_KEY_PREFIX)
            .is_some_and(|tail| long(tail) && tail.chars().all(|c| c.is_ascii_alphanumeric()));
        if token || key {
            found.push(candidate.to_owned());
        }
    }
    found
}

/// Fails the test when `text` (what `source` wrote) shows a registered value.
/// Does nothing while the thread is already panicking (a test that failed
/// for another reason keeps its own message).
pub fn assert_unseen(source: &str, text: &str) {
    if std::thread::panicking() {
        return;
    }
    let known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(value) = known.iter().find(|v| text.contains(v.as_str())) {
        let line = text
            .lines()
            .find(|l| l.contains(value.as_str()))
            .unwrap_or_default();
        panic!(
            "{source} shows a secret value or token the test created ({value}), unmasked: {line}"
        );
    }
}

/// A file a child writes its log to, checked with [`assert_unseen`] when
/// this is dropped (a connector's log file, say).
pub struct CheckedFile {
    source: &'static str,
    path: std::path::PathBuf,
}

impl CheckedFile {
    pub fn new(source: &'static str, path: std::path::PathBuf) -> Self {
        Self { source, path }
    }
}

impl Drop for CheckedFile {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read(&self.path) {
            assert_unseen(self.source, &String::from_utf8_lossy(&text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tokens_and_secret_values() {
        let key = "psbx_0123456789abcdefghijABCDEFGHIJ0123456789";
        assert_eq!(
            tokens(&format!("key {key}. id key_1, x-psbx_notatoken")),
            [key]
        );
        let conn = "psbx_conn_aHR0cDovL2V4YW1wbGU.8gi93gsw1h3ftzfdhptfro7rpkqef9x3";
        assert_eq!(tokens(&format!("PSBX_CONNECTOR_TOKEN={conn} \\")), [conn]);
        assert!(tokens("psbx_short and psbx serve, table psbx_inst_ry8nq45ezujomlwm").is_empty());
        tokens_in(&format!("{{\"key\": \"{key}\"}}"));
        secret("hunter2-is-long");
        secret("short");
        assert_unseen("a clean log", "GET /v1/boxes 200; short; psbx_0123");
        let shown = std::panic::catch_unwind(|| assert_unseen("a log", "token=hunter2-is-long"));
        assert!(shown.is_err());
        let shown = std::panic::catch_unwind(|| assert_unseen("a log", &format!("Bearer {key}")));
        assert!(shown.is_err());
    }
}
