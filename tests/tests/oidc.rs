//! psbx as an OIDC issuer, from outside: the discovery document (the OAuth
//! metadata with OIDC's fields, one issuer, the JWKS it names) and the JWKS
//! (one P-256 key from the first read, kept across a restart — it is stored,
//! sealed — and, past `oidc.rotate_after`, the new key published beside the
//! old one). Both answer without a credential, as IAM fetches them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use psbx_tests::{ServerProcess, TestDatabase};
use serde_json::Value;
use std::time::Duration;

fn get(url: &str) -> (u16, Option<String>, Value) {
    let answer = reqwest::blocking::get(url).unwrap();
    let status = answer.status().as_u16();
    let kind = answer
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, kind, answer.json().unwrap())
}

fn kids(jwks: &Value) -> Vec<String> {
    jwks["keys"]
        .as_array()
        .unwrap_or_else(|| panic!("no keys: {jwks}"))
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_discovery_document_and_the_jwks_across_a_restart_and_a_rotation() {
    let db = TestDatabase::new();
    let dir = tempfile::tempdir().unwrap();
    let start =
        || ServerProcess::without_boxes(dir.path(), &db, &[("PSBX_OIDC__ROTATE_AFTER", "4s")]);
    let server = start();
    let (status, _, doc) = get(&format!("{}/.well-known/openid-configuration", server.url));
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["issuer"], server.url.trim_end_matches('/'), "{doc}");
    let jwks_uri = doc["jwks_uri"].as_str().unwrap().to_owned();
    assert_eq!(
        jwks_uri,
        format!("{}/.well-known/jwks.json", doc["issuer"].as_str().unwrap())
    );
    assert_eq!(
        doc["id_token_signing_alg_values_supported"],
        serde_json::json!(["ES256"])
    );
    assert_eq!(
        doc["subject_types_supported"],
        serde_json::json!(["public"])
    );
    // The same document is the OAuth authorization server's.
    assert!(
        doc["token_endpoint"]
            .as_str()
            .unwrap()
            .ends_with("/oauth/token"),
        "{doc}"
    );

    let (status, kind, jwks) = get(&jwks_uri);
    assert_eq!(status, 200, "{jwks}");
    assert_eq!(kind.as_deref(), Some("application/jwk-set+json"));
    let first = kids(&jwks);
    assert_eq!(first.len(), 1, "{jwks}");
    let key = &jwks["keys"][0];
    assert_eq!(
        (&key["kty"], &key["crv"], &key["alg"], &key["use"]),
        (
            &"EC".into(),
            &"P-256".into(),
            &"ES256".into(),
            &"sig".into()
        ),
        "{jwks}"
    );
    assert!(
        key.get("d").is_none(),
        "the private key is published: {jwks}"
    );

    // Stored: a restarted server publishes the same key.
    server.kill();
    let server = start();
    let (_, _, again) = get(&format!("{}/.well-known/jwks.json", server.url));
    assert_eq!(kids(&again), first, "the key changed across a restart");

    // Past the rotation period: a new key, the old one still published.
    std::thread::sleep(Duration::from_millis(4500));
    let (_, _, rotated) = get(&format!("{}/.well-known/jwks.json", server.url));
    let now = kids(&rotated);
    assert_eq!(now.len(), 2, "{rotated}");
    assert_eq!(now[1], first[0], "{rotated}");
    assert_ne!(now[0], first[0], "{rotated}");
}
