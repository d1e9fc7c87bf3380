//! The master key and what it encrypts: AES-256-GCM with a fresh 96-bit nonce
//! per value and the owner's identity (account and name) as associated data,
//! so a ciphertext moved to another row does not decrypt.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the master key file {path}: {reason}")]
    KeyFile { path: String, reason: String },
    #[error("a stored value does not decrypt under this server's master key")]
    Decrypt,
    #[error("the operating system's random generator failed: {0}")]
    Random(#[from] getrandom::Error),
}

/// The server's master key. `Debug` never shows it.
pub struct Vault {
    cipher: Aes256Gcm,
    /// HMAC-SHA256 under the master key, for values derived from it.
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vault(****)")
    }
}

/// A value as stored: nonce and ciphertext (with its tag).
pub struct Sealed {
    pub nonce: [u8; 12],
    pub ciphertext: Vec<u8>,
}

impl Sealed {
    /// Nonce, then ciphertext, in one byte string (one `BYTEA` column:
    /// box URL keys, disk keys); [`Vault::open_packed`] reads it back.
    pub fn packed(&self) -> Vec<u8> {
        let mut bytes = self.nonce.to_vec();
        bytes.extend_from_slice(&self.ciphertext);
        bytes
    }
}

impl Vault {
    pub fn from_key(key: &[u8; 32]) -> Self {
        Self {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)),
            // HMAC pads a short key with zeros to its block size (64 bytes):
            // the padded key is the same key, and takes no fallible path.
            mac: {
                let mut block = [0u8; 64];
                block[..32].copy_from_slice(key);
                <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into())
            },
        }
    }

    /// A value derived from the master key for `purpose` and `data`
    /// (HMAC-SHA256 of both, the purpose NUL-terminated): the same on every
    /// replica, and unlike for every other purpose or datum.
    pub fn derive(&self, purpose: &str, data: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(purpose.as_bytes());
        mac.update(&[0]);
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// Reads the 32-byte key file, creating it (mode 0600, random) when absent.
    /// A file of another size, or readable by others, is refused.
    pub fn open_or_create(path: &Path) -> Result<Self, VaultError> {
        use std::os::unix::fs::PermissionsExt;
        let fail = |reason: String| VaultError::KeyFile {
            path: path.display().to_string(),
            reason,
        };
        if !path.exists() {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key)?;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
            }
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()))
                .map_err(|e| fail(format!("cannot create it: {e}")))?;
            tracing::info!(path = %path.display(), "created the master key");
        }
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(fail(format!(
                "it is readable by others (mode {:o}); chmod 600 it",
                meta.permissions().mode() & 0o777
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
        let key: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| fail(format!("it holds {} bytes, not 32", bytes.len())))?;
        Ok(Self::from_key(&key))
    }

    pub fn seal(&self, owner: &str, plaintext: &[u8]) -> Result<Sealed, VaultError> {
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce)?;
        let ciphertext = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Decrypt)?;
        Ok(Sealed { nonce, ciphertext })
    }

    pub fn open(
        &self,
        owner: &str,
        nonce: &[u8],
        ciphertext: &[u8],
    ) -> Result<Vec<u8>, VaultError> {
        if nonce.len() != 12 {
            return Err(VaultError::Decrypt);
        }
        self.cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: owner.as_bytes(),
                },
            )
            .map_err(|_| VaultError::Decrypt)
    }

    /// [`Vault::open`] of a [`Sealed::packed`] value (too short is a
    /// value that does not open).
    pub fn open_packed(&self, owner: &str, packed: &[u8]) -> Result<Vec<u8>, VaultError> {
        let (nonce, ciphertext) = packed.split_at(packed.len().min(12));
        self.open(owner, nonce, ciphertext)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_are_bound_to_their_owner() {
        let vault = Vault::from_key(&[7u8; 32]);
        let sealed = vault.seal("acct_a\0TOKEN", b"hunter2hunter2").unwrap();
        assert!(!sealed.ciphertext.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            vault
                .open("acct_a\0TOKEN", &sealed.nonce, &sealed.ciphertext)
                .unwrap(),
            b"hunter2hunter2"
        );
        assert!(
            vault
                .open("acct_b\0TOKEN", &sealed.nonce, &sealed.ciphertext)
                .is_err()
        );
        let other = Vault::from_key(&[8u8; 32]);
        assert!(
            other
                .open("acct_a\0TOKEN", &sealed.nonce, &sealed.ciphertext)
                .is_err()
        );
        let again = vault.seal("acct_a\0TOKEN", b"hunter2hunter2").unwrap();
        assert_ne!(again.nonce, sealed.nonce, "nonces repeat");
    }

    #[test]
    fn the_key_file_is_made_private_and_checked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys/master.key");
        let a = Vault::open_or_create(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(std::fs::read(&path).unwrap().len(), 32);
        let sealed = a.seal("x", b"value").unwrap();
        let b = Vault::open_or_create(&path).unwrap();
        assert_eq!(
            b.open("x", &sealed.nonce, &sealed.ciphertext).unwrap(),
            b"value"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            Vault::open_or_create(&path)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        std::fs::write(dir.path().join("short.key"), b"abc").unwrap();
        std::fs::set_permissions(
            dir.path().join("short.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert!(Vault::open_or_create(&dir.path().join("short.key")).is_err());
    }
}
