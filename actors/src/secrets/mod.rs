//! The account's secrets: one list per account, values sealed under the
//! server's master key (`vault`), never returned by any read. Boxes receive the
//! ones named at start, as environment variables of every command.

pub mod vault;

use crate::blocking::blocking;
use crate::ids::AccountId;
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use vault::{Vault, VaultError};

/// Longest secret name, and value, accepted.
pub const MAX_NAME: usize = 128;
pub const MAX_VALUE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{0}")]
    Invalid(String),
    #[error("no secret {0:?} in this account")]
    NotFound(String),
    #[error(transparent)]
    Vault(#[from] VaultError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

/// Checks a secret name: it becomes an environment variable name.
pub fn validate_name(name: &str) -> Result<(), SecretError> {
    let mut chars = name.chars();
    let valid = name.len() <= MAX_NAME
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(SecretError::Invalid(format!(
            "{name:?} is not a valid secret name: secrets become environment variables, so a \
             name is a letter or _ followed by letters, digits or _ (at most {MAX_NAME})"
        )))
    }
}

/// The associated data binding a sealed value to its row.
fn owner(account: &AccountId, name: &str) -> String {
    format!("{account}\0{name}")
}

#[derive(Clone)]
pub struct Secrets {
    store: Store,
    vault: Arc<Vault>,
}

/// The meta key of the value that proves the master key is the right one.
const KEY_CHECK: &str = "master_key_check";

impl Secrets {
    /// Binds the store to the master key. The first server to start records a
    /// check value; later starts with another key are refused, instead of
    /// failing later on every secret.
    pub fn new(store: Store, vault: Vault) -> Result<Self, SecretError> {
        let sealed = vault.seal(KEY_CHECK, b"psbx")?;
        let fresh = format!("{}:{}", hex(&sealed.nonce), hex(&sealed.ciphertext));
        let kept = store.meta_set_once(KEY_CHECK, &fresh)?;
        let (nonce, ciphertext) = kept
            .split_once(':')
            .and_then(|(n, c)| Some((unhex(n)?, unhex(c)?)))
            .ok_or_else(|| {
                SecretError::Internal("the stored master key check is malformed".into())
            })?;
        if vault.open(KEY_CHECK, &nonce, &ciphertext).is_err() {
            return Err(SecretError::Invalid(
                "the master key is not the one this database's secrets were sealed with: give every \
                 replica the same master key file"
                    .into(),
            ));
        }
        Ok(Self {
            store,
            vault: Arc::new(vault),
        })
    }

    /// The master key, for other sealed values (environments' settings).
    pub fn vault(&self) -> Arc<Vault> {
        self.vault.clone()
    }

    pub async fn list(
        &self,
        account: &AccountId,
    ) -> Result<Vec<(String, DateTime<Utc>)>, SecretError> {
        let (store, account) = (self.store.clone(), account.clone());
        Ok(blocking(move || store.list_secrets(&account)).await?)
    }

    /// Stores a value; returns whether the secret is new and when it was set.
    pub async fn put(
        &self,
        account: &AccountId,
        name: &str,
        value: &str,
    ) -> Result<(bool, DateTime<Utc>), SecretError> {
        validate_name(name)?;
        if value.is_empty() || value.len() > MAX_VALUE {
            return Err(SecretError::Invalid(format!(
                "a secret value has 1 to {MAX_VALUE} bytes"
            )));
        }
        if value.contains('\0') {
            return Err(SecretError::Invalid(
                "a secret value cannot contain NUL: it becomes an environment variable".into(),
            ));
        }
        // Boxes reach psbx without psbx's own credentials: one stored as a
        // secret would only hand it to the code in every box.
        let store = self.store.clone();
        let v = value.to_owned();
        blocking(move || store.refuse_credentials(&v)).await?;
        let sealed = self.vault.seal(&owner(account, name), value.as_bytes())?;
        let (store, account, name) = (self.store.clone(), account.clone(), name.to_owned());
        Ok(
            blocking(move || store.put_secret(&account, &name, &sealed.nonce, &sealed.ciphertext))
                .await?,
        )
    }

    pub async fn delete(&self, account: &AccountId, name: &str) -> Result<(), SecretError> {
        let (store, a, n) = (self.store.clone(), account.clone(), name.to_owned());
        if blocking(move || store.delete_secret(&a, &n)).await? {
            Ok(())
        } else {
            Err(SecretError::NotFound(name.to_owned()))
        }
    }

    /// Checks that every name is a secret of the account (for a box start).
    pub async fn check_names(
        &self,
        account: &AccountId,
        names: &[String],
    ) -> Result<(), SecretError> {
        self.values(account, names).await.map(|_| ())
    }

    /// The named secrets' values (for a box at claim time); every name must exist.
    pub async fn values(
        &self,
        account: &AccountId,
        names: &[String],
    ) -> Result<Vec<(String, String)>, SecretError> {
        for name in names {
            validate_name(name)?;
        }
        let (store, a, n) = (self.store.clone(), account.clone(), names.to_vec());
        let rows = blocking(move || store.sealed_secrets(&a, &n)).await?;
        let mut out = Vec::with_capacity(rows.len());
        for name in names {
            let row = rows
                .iter()
                .find(|r| &r.name == name)
                .ok_or_else(|| SecretError::NotFound(name.clone()))?;
            let plain = self
                .vault
                .open(&owner(account, name), &row.nonce, &row.ciphertext)?;
            let value = String::from_utf8(plain)
                .map_err(|_| SecretError::Internal(format!("secret {name} is not UTF-8")))?;
            out.push((name.clone(), value));
        }
        Ok(out)
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_environment_variable_names() {
        for ok in ["GITHUB_TOKEN", "_x", "a1", "DB_PASSWORD_2"] {
            validate_name(ok).unwrap();
        }
        for bad in ["", "1ABC", "A-B", "A B", "Ä", "X=Y", &"A".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(
            unhex(&hex(&[0, 1, 254, 255])).unwrap(),
            vec![0, 1, 254, 255]
        );
        assert!(unhex("zz").is_none());
    }
}
