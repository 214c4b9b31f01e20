//! The key-file implementation of [`KeyService`]: master keys by id, the highest current.
//!
//! - A tenant's key-encryption key under master key `id` is HMAC-SHA256 of
//!   `"engram tenant kek\0" ‖ tenant` keyed by the master key; with SM4-GCM, its SM4 key is
//!   HKDF-SHA256 of that ([`super::sm4_key`]). One key file serves every tenant and no tenant's
//!   key opens another's data.
//! - A tenant's identity-anchor key is HMAC-SHA256 of `"engram tenant anchor key\0" ‖ tenant`
//!   keyed by the master key: a different label, so it is independent of the KEK.
//! - Wrapped blob: the cipher byte, the 12-byte nonce, then the ciphertext and tag of the 32
//!   bytes, with the tenant as associated data (61 bytes). Blobs of 60 bytes, without the
//!   cipher byte, were written before the cipher was configurable and are AES-256-GCM.

use std::collections::BTreeMap;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{Cipher, KeyService, Sealer, Zeroizing, crypto_error};
use crate::error::{Error, Result};

const KEK_LABEL: &[u8] = b"engram tenant kek\0";
const ANCHOR_LABEL: &[u8] = b"engram tenant anchor key\0";
/// HKDF info of the SM4 key of a tenant's KEK.
const SM4_KEK: &[u8] = b"engram sm4-gcm tenant kek";
/// Nonce, 32 bytes of ciphertext and the tag: a blob without the cipher byte.
const LEGACY_BLOB: usize = 12 + 32 + 16;

/// Master keys by id, read from a key file; the highest id is current.
pub struct MasterKeys {
    keys: BTreeMap<u32, Zeroizing<[u8; 32]>>,
    wrap_with: Cipher,
}

impl std::fmt::Debug for MasterKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKeys")
            .field("ids", &self.keys.keys().collect::<Vec<_>>())
            .field("wrap_with", &self.wrap_with)
            .finish()
    }
}

impl MasterKeys {
    /// Master keys from `(id, key)` pairs, wrapping with AES-256-GCM.
    pub fn new(keys: impl IntoIterator<Item = (u32, [u8; 32])>) -> Result<Self> {
        let keys: BTreeMap<u32, Zeroizing<[u8; 32]>> = keys
            .into_iter()
            .map(|(id, key)| (id, Zeroizing::new(key)))
            .collect();
        if keys.is_empty() {
            return Err(Error::Open("no master key".into()));
        }
        Ok(MasterKeys {
            keys,
            wrap_with: Cipher::Aes256Gcm,
        })
    }

    /// The same keys, wrapping new data keys with `cipher` (blobs of either cipher unwrap).
    pub fn with_cipher(mut self, cipher: Cipher) -> Self {
        self.wrap_with = cipher;
        self
    }

    /// The cipher new data keys are wrapped with.
    pub fn cipher(&self) -> Cipher {
        self.wrap_with
    }

    /// Reads a key file: one master key a line, `<id> <64 hex digits>`; blank lines and lines
    /// starting with `#` are ignored. The highest id is current.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| Error::Open(format!("master key file {}: {e}", path.display())))?,
        );
        Self::from_text(&text, path)
    }

    /// Reads the text of a key file (as [`MasterKeys::from_file`]) that the caller has read
    /// from `path`, named in errors.
    pub fn from_text(text: &str, path: &Path) -> Result<Self> {
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

    /// HMAC-SHA256 of `label ‖ tenant` under master key `id`.
    fn tenant_secret(&self, id: u32, label: &[u8], tenant: &str) -> Result<Zeroizing<[u8; 32]>> {
        let master = self
            .keys
            .get(&id)
            .ok_or_else(|| crypto_error("data key", format!("master key {id} is not loaded")))?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(master.as_ref())
            .map_err(|_| crypto_error("data key", "bad master key"))?;
        mac.update(label);
        mac.update(tenant.as_bytes());
        Ok(Zeroizing::new(mac.finalize().into_bytes().into()))
    }

    fn kek(&self, id: u32, tenant: &str, cipher: Cipher) -> Result<Sealer> {
        let secret = self.tenant_secret(id, KEK_LABEL, tenant)?;
        Ok(Sealer::new(cipher, &secret, SM4_KEK))
    }
}

impl KeyService for MasterKeys {
    fn current(&self) -> u32 {
        self.keys.keys().next_back().copied().unwrap_or_default()
    }

    fn key_ids(&self) -> Vec<u32> {
        self.keys.keys().rev().copied().collect()
    }

    fn wrap(&self, tenant: &str, key_id: u32, material: &[u8; 32]) -> Result<Vec<u8>> {
        let sealed = self
            .kek(key_id, tenant, self.wrap_with)?
            .seal(tenant.as_bytes(), material)
            .ok_or_else(|| Error::Encode {
                what: "data key",
                reason: "wrapping failed".into(),
            })?;
        let mut blob = Vec::with_capacity(1 + sealed.len());
        blob.push(self.wrap_with.id());
        blob.extend(sealed);
        Ok(blob)
    }

    fn unwrap(&self, tenant: &str, key_id: u32, wrapped: &[u8]) -> Result<Zeroizing<[u8; 32]>> {
        let (cipher, sealed) = if wrapped.len() == LEGACY_BLOB {
            (Cipher::Aes256Gcm, wrapped)
        } else {
            match wrapped.split_first() {
                Some((&id, sealed)) => (
                    Cipher::from_id(id)
                        .ok_or_else(|| crypto_error("data key", format!("unknown cipher {id}")))?,
                    sealed,
                ),
                None => return Err(crypto_error("data key", "empty")),
            }
        };
        let raw = Zeroizing::new(
            self.kek(key_id, tenant, cipher)?
                .open(tenant.as_bytes(), sealed)
                .ok_or_else(|| crypto_error("data key", "does not unwrap"))?,
        );
        let mut material = Zeroizing::new([0u8; 32]);
        if raw.len() != material.len() {
            return Err(crypto_error("data key", "wrong length"));
        }
        material.copy_from_slice(&raw);
        Ok(material)
    }

    fn anchor_mac(&self, tenant: &str, key_id: u32, message: &[u8]) -> Result<[u8; 32]> {
        let key = self.tenant_secret(key_id, ANCHOR_LABEL, tenant)?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_ref())
            .map_err(|_| crypto_error("identity anchor", "bad anchor key"))?;
        mac.update(message);
        Ok(mac.finalize().into_bytes().into())
    }
}
