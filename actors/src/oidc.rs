//! psbx as an OIDC issuer (environments.txt, "AWS permissions inside a
//! box"): the signing keys, the JWKS that publishes them, and the short
//! identity tokens boxes trade with AWS STS (`AssumeRoleWithWebIdentity`).
//!
//! Keys are ECDSA P-256 (`ES256`, which STS accepts), made with `ring` —
//! already the workspace's crypto provider — and stored with their private
//! half (PKCS#8) sealed under the master key (`secrets::vault`), associated
//! data `oidc-key\0<kid>`. The `kid` is the key's RFC 7638 thumbprint. One key
//! signs at a time; it is replaced once it is older than the rotation period,
//! and a replaced key stays in the JWKS for [`PUBLISHED_AFTER_RETIREMENT`]
//! (longer than any token it signed lives), then is forgotten.
//!
//! The JWKS is open to anyone (IAM fetches it without a credential), so this
//! replica keeps what it read for [`JWKS_KEPT`] (review-2 L7), read by one
//! caller while the others wait, and reads it again sooner only when the key
//! it signs with is not in it (a rotation): a flood of JWKS requests costs
//! one store read per interval.
//!
//! A token is a compact JWS written here (`base64url(header).base64url(claims)
//! .base64url(r‖s)`): `jsonwebtoken` would bring a second crypto backend
//! beside ring for what is three base64 strings and one signature.

use crate::blocking::blocking;
use crate::secrets::vault::{Vault, VaultError};
use crate::store::{NewOidcKey, OidcKeyRow, Store, StoreError};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use chrono::{DateTime, Utc};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long an identity token for a box is valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(600);
/// How long a replaced key is still published (every token it signed has
/// expired well before).
pub const PUBLISHED_AFTER_RETIREMENT: Duration = Duration::from_secs(3600);
/// The default age at which the signing key is replaced.
pub const DEFAULT_ROTATE_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long this replica uses the current key it read before reading again
/// (another replica may have rotated it).
const REREAD_AFTER: Duration = Duration::from_secs(60);
/// The signing algorithm, as JOSE names it.
pub const ALGORITHM: &str = "ES256";
/// How long this replica serves the JWKS it read.
pub const JWKS_KEPT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the OIDC signing key: {0}")]
    Vault(#[from] VaultError),
    #[error("the OIDC signing key cannot be used: {0}")]
    Key(String),
}

/// The key that signs, decoded.
struct Signing {
    kid: String,
    pair: Arc<EcdsaKeyPair>,
    created_at: DateTime<Utc>,
    read_at: Instant,
}

/// The issuer; cheap to clone.
#[derive(Clone)]
pub struct Issuer {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    vault: Arc<Vault>,
    url: String,
    rotate_after: Duration,
    current: Mutex<Option<Arc<Signing>>>,
    /// One rotation at a time in this replica.
    rotating: tokio::sync::Mutex<()>,
    /// The JWKS as read, and when.
    published: Mutex<Option<(Instant, Value)>>,
    /// One JWKS read at a time in this replica.
    publishing: tokio::sync::Mutex<()>,
    /// Key reads from the store (what tests count).
    reads: AtomicU64,
}

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub subject: String,
    pub audience: String,
    pub ttl: Duration,
}

impl Issuer {
    /// The issuer `url` (the server's public URL, no trailing `/`), its keys
    /// in `store`, sealed with `vault`, replaced after `rotate_after`.
    pub fn new(store: Store, vault: Arc<Vault>, url: &str, rotate_after: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                vault,
                url: url.trim_end_matches('/').to_owned(),
                rotate_after,
                current: Mutex::new(None),
                rotating: tokio::sync::Mutex::new(()),
                published: Mutex::new(None),
                publishing: tokio::sync::Mutex::new(()),
                reads: AtomicU64::new(0),
            }),
        }
    }

    /// The issuer's URL (the `iss` of its tokens).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Where its JWKS is served.
    pub fn jwks_uri(&self) -> String {
        format!("{}/.well-known/jwks.json", self.inner.url)
    }

    /// How many times keys were read from the store.
    pub fn store_reads(&self) -> u64 {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// The JWKS: the current key (made first when there is none) and the
    /// keys replaced less than [`PUBLISHED_AFTER_RETIREMENT`] ago; the one
    /// read less than [`JWKS_KEPT`] ago while it holds the signing key.
    pub async fn jwks(&self) -> Result<Value, OidcError> {
        let signing = self.signing().await?;
        if let Some(keys) = self.published(&signing.kid) {
            return Ok(keys);
        }
        let _one = self.inner.publishing.lock().await;
        if let Some(keys) = self.published(&signing.kid) {
            return Ok(keys);
        }
        let since = Utc::now() - chrono_duration(PUBLISHED_AFTER_RETIREMENT);
        let store = self.inner.store.clone();
        self.inner.reads.fetch_add(1, Ordering::Relaxed);
        let rows = blocking(move || store.published_oidc_keys(since)).await?;
        let keys = json!({ "keys": rows.into_iter().map(|r| r.public_jwk).collect::<Vec<_>>() });
        if let Ok(mut published) = self.inner.published.lock() {
            *published = Some((Instant::now(), keys.clone()));
        }
        Ok(keys)
    }

    /// The JWKS read less than [`JWKS_KEPT`] ago, if it holds `kid`.
    fn published(&self, kid: &str) -> Option<Value> {
        let published = self.inner.published.lock().ok()?;
        let (at, keys) = published.as_ref()?;
        let holds = keys["keys"]
            .as_array()
            .is_some_and(|keys| keys.iter().any(|k| k["kid"] == kid));
        (at.elapsed() < JWKS_KEPT && holds).then(|| keys.clone())
    }

    /// A signed token: `iss` this issuer, `sub`, `aud`, `iat`, `nbf`, `exp`
    /// (`ttl` from now) and a random `jti`.
    pub async fn sign(&self, claims: &Claims) -> Result<String, OidcError> {
        let signing = self.signing().await?;
        let now = Utc::now().timestamp();
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|e| OidcError::Key(e.to_string()))?;
        let ttl = i64::try_from(claims.ttl.as_secs()).unwrap_or(i64::MAX);
        let header = json!({"alg": ALGORITHM, "typ": "JWT", "kid": signing.kid});
        let body = json!({
            "iss": self.inner.url,
            "sub": claims.subject,
            "aud": claims.audience,
            "iat": now,
            "nbf": now,
            "exp": now.saturating_add(ttl),
            "jti": hex::encode(jti),
        });
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(body.to_string())
        );
        let signature = signing
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .map_err(|_| OidcError::Key("ECDSA signing failed".into()))?;
        Ok(format!("{input}.{}", B64.encode(signature.as_ref())))
    }

    /// The key that signs now: the one read lately, else the stored current
    /// one, replaced first when it is due (or made when there is none).
    async fn signing(&self) -> Result<Arc<Signing>, OidcError> {
        if let Some(fresh) = self.cached() {
            return Ok(fresh);
        }
        let _one = self.inner.rotating.lock().await;
        if let Some(fresh) = self.cached() {
            return Ok(fresh);
        }
        for _ in 0..3 {
            let store = self.inner.store.clone();
            self.inner.reads.fetch_add(1, Ordering::Relaxed);
            let row = blocking(move || store.current_oidc_key()).await?;
            let due = row.as_ref().is_none_or(|r| {
                Utc::now() - r.created_at >= chrono_duration(self.inner.rotate_after)
            });
            if let (Some(row), false) = (&row, due) {
                let signing = Arc::new(self.decode(row)?);
                if let Ok(mut current) = self.inner.current.lock() {
                    *current = Some(signing.clone());
                }
                return Ok(signing);
            }
            self.rotate(row.map(|r| r.kid)).await?;
        }
        Err(OidcError::Key(
            "another replica kept replacing the signing key; try again".into(),
        ))
    }

    /// The key read less than [`REREAD_AFTER`] ago, if it is not due.
    fn cached(&self) -> Option<Arc<Signing>> {
        let current = self.inner.current.lock().ok()?.clone()?;
        let due = Utc::now() - current.created_at >= chrono_duration(self.inner.rotate_after);
        (current.read_at.elapsed() < REREAD_AFTER && !due).then_some(current)
    }

    /// Makes a new key the current one, retiring `expected` (another
    /// replica's rotation may win: then its key is used), and forgets keys
    /// no longer published.
    async fn rotate(&self, expected: Option<String>) -> Result<(), OidcError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| OidcError::Key("cannot make a P-256 key".into()))?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|e| OidcError::Key(e.to_string()))?;
        let jwk = public_jwk(pair.public_key().as_ref())?;
        let kid = jwk["kid"].as_str().unwrap_or_default().to_owned();
        let sealed = self.inner.vault.seal(&owner(&kid), pkcs8.as_ref())?;
        let store = self.inner.store.clone();
        let rotated = blocking(move || {
            let stored = store.rotate_oidc_key(
                expected.as_deref(),
                &NewOidcKey {
                    kid: &kid,
                    public_jwk: &jwk,
                    nonce: &sealed.nonce,
                    sealed_key: &sealed.ciphertext,
                },
            )?;
            let forget = Utc::now() - chrono_duration(PUBLISHED_AFTER_RETIREMENT);
            store.delete_old_oidc_keys(forget)?;
            Ok::<_, StoreError>(stored.then_some(kid))
        })
        .await?;
        if let Some(kid) = rotated {
            tracing::info!(kid, "made a new OIDC signing key");
        }
        Ok(())
    }

    /// A stored key, its private half opened.
    fn decode(&self, row: &OidcKeyRow) -> Result<Signing, OidcError> {
        let pkcs8 = self
            .inner
            .vault
            .open(&owner(&row.kid), &row.nonce, &row.sealed_key)?;
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &pkcs8,
            &SystemRandom::new(),
        )
        .map_err(|e| OidcError::Key(format!("key {}: {e}", row.kid)))?;
        Ok(Signing {
            kid: row.kid.clone(),
            pair: Arc::new(pair),
            created_at: row.created_at,
            read_at: Instant::now(),
        })
    }
}

/// The associated data a key is sealed with.
fn owner(kid: &str) -> String {
    format!("oidc-key\0{kid}")
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The JWK of an uncompressed P-256 public key (`04‖x‖y`), with its RFC 7638
/// thumbprint as `kid`.
fn public_jwk(point: &[u8]) -> Result<Value, OidcError> {
    let (x, y) = match point {
        [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
        _ => return Err(OidcError::Key("not an uncompressed P-256 point".into())),
    };
    let (x, y) = (B64.encode(x), B64.encode(y));
    // RFC 7638: the required members, sorted, no white space.
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    let kid = B64.encode(Sha256::digest(canonical.as_bytes()));
    Ok(json!({
        "kty": "EC",
        "crv": "P-256",
        "x": x,
        "y": y,
        "kid": kid,
        "use": "sig",
        "alg": ALGORITHM,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwk_has_the_points_and_its_thumbprint() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let jwk = public_jwk(point).unwrap();
        assert_eq!(
            B64.decode(jwk["x"].as_str().unwrap()).unwrap(),
            point[1..33]
        );
        assert_eq!(B64.decode(jwk["y"].as_str().unwrap()).unwrap(), point[33..]);
        assert_eq!(jwk["kid"].as_str().unwrap().len(), 43);
        assert!(public_jwk(&point[1..]).is_err());
    }

    /// RFC 7638 §3.1's example, adapted: the thumbprint covers exactly the
    /// sorted required members.
    #[test]
    fn thumbprints_change_with_the_key() {
        let a = public_jwk(&[[4u8].as_slice(), &[1u8; 64]].concat()).unwrap();
        let b = public_jwk(&[[4u8].as_slice(), &[2u8; 64]].concat()).unwrap();
        assert_ne!(a["kid"], b["kid"]);
    }
}
