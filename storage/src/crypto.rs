//! Envelope encryption of user data at rest.
//!
//! - Every user has a data key (AES-256, random), stored only wrapped: sealed with the
//!   tenant's key-encryption key under `("u", tenant, user, "dek")`. Forgetting a user clears
//!   that row in the same transaction as the rest of the user's keys, so every copy of their
//!   values anywhere (a backup, a node that was down, a freed page) is unreadable from then on
//!   (crypto-shredding).
//! - A tenant's key-encryption key is derived from a master key (HMAC-SHA256 of the tenant
//!   name under the master key), so one master key file serves every tenant and no tenant's
//!   key opens another's data.
//! - Master keys carry an id; a wrapped data key names the master key that wrapped it. Adding
//!   a new master key (it becomes current) rotates without rewriting any data: new data keys
//!   are wrapped with it, old ones still open with theirs.
//! - Values are sealed with AES-256-GCM (a random 96-bit nonce each time), the value's key as
//!   associated data, so a sealed value moved under another key does not open.
//!
//! Sealed value layout: [`FORMAT_SEALED`], the 12-byte nonce, then ciphertext and tag.
//! Wrapped data key layout: the master key id (4 bytes, big-endian), the nonce, ciphertext.
//!
//! Nothing here logs keys, plaintext or ciphertext.

use std::collections::BTreeMap;
use std::path::Path;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// Format byte of a sealed value (see [`crate::codec`]).
pub const FORMAT_SEALED: u8 = 0x02;
const NONCE: usize = 12;

fn crypto_error(what: &'static str, reason: impl Into<String>) -> Error {
    Error::Decode {
        what,
        reason: reason.into(),
    }
}

/// A user's data key.
pub struct DataKey(Aes256Gcm);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    fn from_bytes(bytes: &[u8; 32]) -> Self {
        DataKey(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(bytes)))
    }

    /// Seals `plain`, bound to `aad` (the value's key).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = self
            .0
            .encrypt(&nonce, Payload { msg: plain, aad })
            .map_err(|_| Error::Encode {
                what: "sealed value",
                reason: "encryption failed".into(),
            })?;
        let mut out = Vec::with_capacity(1 + NONCE + sealed.len());
        out.push(FORMAT_SEALED);
        out.extend_from_slice(&nonce);
        out.extend(sealed);
        Ok(out)
    }

    /// Opens a value sealed by [`DataKey::seal`] under the same `aad`.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>> {
        let body = match sealed.split_first() {
            Some((&FORMAT_SEALED, body)) if body.len() >= NONCE => body,
            Some(_) | None => return Err(crypto_error("sealed value", "not a sealed value")),
        };
        let (nonce, ciphertext) = body.split_at(NONCE);
        self.0
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .map_err(|_| crypto_error("sealed value", "does not open with the user's data key"))
    }
}

/// Master keys by id; the highest id is current.
pub struct MasterKeys {
    keys: BTreeMap<u32, [u8; 32]>,
}

impl std::fmt::Debug for MasterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKeys")
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl MasterKeys {
    /// Master keys from `(id, key)` pairs.
    pub fn new(keys: impl IntoIterator<Item = (u32, [u8; 32])>) -> Result<Self> {
        let keys: BTreeMap<u32, [u8; 32]> = keys.into_iter().collect();
        if keys.is_empty() {
            return Err(Error::Open("no master key".into()));
        }
        Ok(MasterKeys { keys })
    }

    /// Reads a key file: one master key a line, `<id> <64 hex digits>`; blank lines and lines
    /// starting with `#` are ignored. The highest id is current.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Open(format!("master key file {}: {e}", path.display())))?;
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || {
                Error::Open(format!(
                    "master key file {} line {}: expected `<id> <64 hex digits>`",
                    path.display(),
                    n + 1
                ))
            };
            let (id, hex) = line.split_once(char::is_whitespace).ok_or_else(bad)?;
            let id: u32 = id.parse().map_err(|_| bad())?;
            let hex = hex.trim();
            if hex.len() != 64 {
                return Err(bad());
            }
            let mut key = [0u8; 32];
            for (i, byte) in key.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
            }
            keys.push((id, key));
        }
        MasterKeys::new(keys)
    }

    /// The id new data keys are wrapped with.
    pub fn current(&self) -> u32 {
        self.keys.keys().next_back().copied().unwrap_or_default()
    }

    /// The tenant's key-encryption key under master key `id`.
    fn kek(&self, id: u32, tenant: &str) -> Result<Aes256Gcm> {
        let master = self
            .keys
            .get(&id)
            .ok_or_else(|| crypto_error("data key", format!("master key {id} is not loaded")))?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(master)
            .map_err(|_| crypto_error("data key", "bad master key"))?;
        mac.update(b"engram tenant kek\0");
        mac.update(tenant.as_bytes());
        let derived = mac.finalize().into_bytes();
        Ok(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&derived)))
    }

    /// A fresh data key for a user of `tenant`, and its wrapped form to store.
    pub fn new_data_key(&self, tenant: &str) -> Result<(DataKey, Vec<u8>)> {
        let key = Aes256Gcm::generate_key(&mut OsRng);
        let raw: [u8; 32] = key.into();
        let id = self.current();
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let wrapped = self
            .kek(id, tenant)?
            .encrypt(
                &nonce,
                Payload {
                    msg: &raw,
                    aad: tenant.as_bytes(),
                },
            )
            .map_err(|_| Error::Encode {
                what: "data key",
                reason: "wrapping failed".into(),
            })?;
        let mut out = Vec::with_capacity(4 + NONCE + wrapped.len());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend(wrapped);
        Ok((DataKey::from_bytes(&raw), out))
    }

    /// Unwraps a stored data key of a user of `tenant`.
    pub fn open_data_key(&self, tenant: &str, wrapped: &[u8]) -> Result<DataKey> {
        if wrapped.len() < 4 + NONCE {
            return Err(crypto_error("data key", "too short"));
        }
        let (id, rest) = wrapped.split_at(4);
        let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
        let (nonce, ciphertext) = rest.split_at(NONCE);
        let raw = self
            .kek(id, tenant)?
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: tenant.as_bytes(),
                },
            )
            .map_err(|_| crypto_error("data key", "does not unwrap"))?;
        let raw: [u8; 32] = raw
            .try_into()
            .map_err(|_| crypto_error("data key", "wrong length"))?;
        Ok(DataKey::from_bytes(&raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_place() {
        let keys = MasterKeys::new([(1, [7u8; 32])]).unwrap();
        let (key, wrapped) = keys.new_data_key("acme").unwrap();
        let sealed = key.seal(b"k1", b"hello").unwrap();
        assert_eq!(sealed[0], FORMAT_SEALED);
        assert!(!sealed.windows(5).any(|w| w == b"hello"));
        assert_eq!(key.open(b"k1", &sealed).unwrap(), b"hello");
        assert!(key.open(b"k2", &sealed).is_err(), "bound to its key");
        let reopened = keys.open_data_key("acme", &wrapped).unwrap();
        assert_eq!(reopened.open(b"k1", &sealed).unwrap(), b"hello");
        assert!(
            keys.open_data_key("other", &wrapped).is_err(),
            "bound to its tenant"
        );
        let (other, _) = keys.new_data_key("acme").unwrap();
        assert!(other.open(b"k1", &sealed).is_err());
    }

    #[test]
    fn rotation_keeps_old_data_keys_open() {
        let old = MasterKeys::new([(1, [1u8; 32])]).unwrap();
        let (_, wrapped_old) = old.new_data_key("acme").unwrap();
        let rotated = MasterKeys::new([(1, [1u8; 32]), (2, [2u8; 32])]).unwrap();
        assert_eq!(rotated.current(), 2);
        assert!(rotated.open_data_key("acme", &wrapped_old).is_ok());
        let (_, wrapped_new) = rotated.new_data_key("acme").unwrap();
        assert_eq!(&wrapped_new[..4], &2u32.to_be_bytes());
        assert!(
            old.open_data_key("acme", &wrapped_new).is_err(),
            "key 2 is not loaded there"
        );
    }
}
