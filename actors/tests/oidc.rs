//! psbx as an OIDC issuer on a real PostgreSQL: the first JWKS read makes a
//! key; a token verifies against the published key and says what it was
//! signed for; the private key is stored sealed (another master key cannot
//! use it); a rotation publishes the new key beside the old one, whose tokens
//! still verify; two issuers (two replicas) rotating at once leave one
//! current key; 1,000 JWKS requests at once make a few store reads
//! (review-2 L7: the JWKS is open to anyone).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use psbx_actors::oidc::{Claims, Issuer};
use psbx_actors::secrets::vault::Vault;
use psbx_actors::store::{PoolOptions, Store};
use psbx_tests::TestDatabase;
use ring::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

fn store(db: &TestDatabase) -> Store {
    Store::open(db.url(), PoolOptions::short_lived(3)).unwrap()
}

/// What a verifier (STS) does with a token and the JWKS: the claims, once
/// the signature checks out with the key its `kid` names.
fn verify(token: &str, jwks: &Value) -> Value {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let header: Value = serde_json::from_slice(&B64.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(
        (&header["alg"], &header["typ"]),
        (&"ES256".into(), &"JWT".into())
    );
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == header["kid"])
        .unwrap_or_else(|| panic!("kid {} is not published: {jwks}", header["kid"]));
    assert_eq!((&key["kty"], &key["crv"]), (&"EC".into(), &"P-256".into()));
    let point = [
        vec![4u8],
        B64.decode(key["x"].as_str().unwrap()).unwrap(),
        B64.decode(key["y"].as_str().unwrap()).unwrap(),
    ]
    .concat();
    UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
        .verify(
            format!("{}.{}", parts[0], parts[1]).as_bytes(),
            &B64.decode(parts[2]).unwrap(),
        )
        .expect("the signature verifies with the published key");
    serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap()
}

fn claims() -> Claims {
    Claims {
        subject: "tenant:acct_1:env:dev".into(),
        audience: "sts.amazonaws.com".into(),
        ttl: Duration::from_secs(600),
    }
}

#[tokio::test]
async fn tokens_verify_against_the_published_keys_across_a_rotation() {
    let db = TestDatabase::new();
    let vault = Arc::new(Vault::from_key(&[7u8; 32]));
    let issuer = Issuer::new(
        store(&db),
        vault.clone(),
        "https://psbx.example/",
        Duration::from_secs(2),
    );
    let jwks = issuer.jwks().await.unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1, "{jwks}");
    let token = issuer.sign(&claims()).await.unwrap();
    let said = verify(&token, &jwks);
    assert_eq!(said["iss"], "https://psbx.example");
    assert_eq!(said["sub"], "tenant:acct_1:env:dev");
    assert_eq!(said["aud"], "sts.amazonaws.com");
    let (iat, exp) = (said["iat"].as_i64().unwrap(), said["exp"].as_i64().unwrap());
    assert_eq!(exp - iat, 600);
    assert!((iat - chrono::Utc::now().timestamp()).abs() < 5);

    // Sealed: the row holds no usable key without this master key.
    let other = Issuer::new(
        store(&db),
        Arc::new(Vault::from_key(&[8u8; 32])),
        "https://psbx.example",
        Duration::from_secs(3600),
    );
    let refused = other.sign(&claims()).await.unwrap_err().to_string();
    assert!(refused.contains("master key"), "{refused}");

    // Past the rotation period: a new key signs, the old one is still
    // published and its token still verifies.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let newer = issuer.sign(&claims()).await.unwrap();
    let jwks = issuer.jwks().await.unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 2, "{jwks}");
    verify(&token, &jwks);
    verify(&newer, &jwks);
    let kid = |t: &str| -> Value {
        serde_json::from_slice::<Value>(&B64.decode(t.split('.').next().unwrap()).unwrap()).unwrap()
            ["kid"]
            .clone()
    };
    assert_ne!(kid(&token), kid(&newer));
    assert_eq!(jwks["keys"][0]["kid"], kid(&newer), "newest first");

    // Keys retired long ago are forgotten.
    let s = store(&db);
    let gone = s
        .delete_old_oidc_keys(chrono::Utc::now() + chrono::Duration::hours(2))
        .unwrap();
    assert_eq!(gone, 1);
}

#[tokio::test]
async fn two_replicas_rotating_at_once_leave_one_current_key() {
    let db = TestDatabase::new();
    let vault = Arc::new(Vault::from_key(&[7u8; 32]));
    let issuers: Vec<Issuer> = (0..4)
        .map(|_| {
            Issuer::new(
                store(&db),
                vault.clone(),
                "https://psbx.example",
                Duration::from_secs(3600),
            )
        })
        .collect();
    let claims = claims();
    let tokens = futures_util::future::join_all(issuers.iter().map(|i| i.sign(&claims))).await;
    let jwks = issuers[0].jwks().await.unwrap();
    assert_eq!(jwks["keys"].as_array().unwrap().len(), 1, "{jwks}");
    for token in tokens {
        verify(&token.unwrap(), &jwks);
    }
}

#[tokio::test]
async fn a_thousand_jwks_requests_make_a_few_store_reads() {
    let db = TestDatabase::new();
    let issuer = Issuer::new(
        store(&db),
        Arc::new(Vault::from_key(&[7u8; 32])),
        "https://psbx.example",
        Duration::from_secs(3600),
    );
    let all = futures_util::future::join_all((0..1_000).map(|_| issuer.jwks())).await;
    let first = all[0].as_ref().unwrap();
    assert_eq!(first["keys"].as_array().unwrap().len(), 1, "{first}");
    assert!(all.iter().all(|j| j.as_ref().unwrap() == first));
    // The current key (none, made, read back) and the JWKS once.
    let reads = issuer.store_reads();
    assert!(reads <= 4, "{reads} store reads for 1,000 JWKS requests");
    // A token signed now verifies against the JWKS served from memory.
    let token = issuer.sign(&claims()).await.unwrap();
    verify(&token, &issuer.jwks().await.unwrap());
    assert_eq!(issuer.store_reads(), reads);
}
