//! Envelope encryption of user data at rest, and the keyed hashes of identity anchors.
//!
//! - Every user has a data key (32 random bytes), stored only wrapped by a [`KeyService`]
//!   under `("u", tenant, user, "dek")`. Forgetting a user clears that row in the same
//!   transaction as the rest of the user's keys, so every copy of their values anywhere (a
//!   backup, a node that was down, a freed page) is unreadable from then on (crypto-shredding).
//! - The key service wraps and unwraps data keys per tenant under a key id: [`MasterKeys`] (a
//!   key file, tenant keys derived locally) is one implementation; an external KMS is another.
//!   A wrapped data key names the key id that wrapped it, so adding a new master key (it
//!   becomes current) rotates without rewriting any data: new data keys are wrapped with it,
//!   old ones still open with theirs.
//! - Values are sealed with an AEAD [`Cipher`] chosen per deployment: AES-256-GCM (default)
//!   or SM4-GCM (GB/T 32907 with the GCM mode of GB/T 36624, for deployments bound to the
//!   Chinese national standards). A random 96-bit nonce each time, the value's key as
//!   associated data, so a sealed value moved under another key does not open. The format
//!   byte of a sealed value names its cipher, so values written under one cipher stay
//!   readable after the deployment switches to the other.
//! - SM4 takes 16-byte keys: an SM4 key is HKDF-SHA256 (RFC 5869, no salt) of the 32-byte
//!   material it stands for, with a label naming its use as the info, first 16 bytes. AES-256
//!   uses the material as is.
//!
//! Sealed value layout: the format byte ([`FORMAT_SEALED`] for AES-256-GCM,
//! [`FORMAT_SEALED_SM4`] for SM4-GCM), the 12-byte nonce, then ciphertext and tag.
//! Wrapped data key record: the key id (4 bytes, big-endian), then the key service's blob.
//!
//! Nothing here logs keys, plaintext or ciphertext.

mod master;

use std::sync::Arc;

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, AesGcm, Nonce};
use hkdf::Hkdf;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use sm4::Sm4;
pub use zeroize::Zeroizing;

pub use self::master::MasterKeys;
use crate::error::{Error, Result};

/// Format byte of a value sealed with AES-256-GCM (see [`crate::codec`]).
pub const FORMAT_SEALED: u8 = 0x02;
/// Format byte of a value sealed with SM4-GCM.
pub const FORMAT_SEALED_SM4: u8 = 0x03;
const NONCE: usize = 12;

/// SM4 in GCM mode with a 96-bit nonce and a 128-bit tag (SM4's block is 128 bits, as GCM
/// needs).
pub type Sm4Gcm = AesGcm<Sm4, U12>;

/// HKDF info of the SM4 key of a user's data key.
const SM4_DATA_KEY: &[u8] = b"engram sm4-gcm data key";

pub(crate) fn crypto_error(what: &'static str, reason: impl Into<String>) -> Error {
    Error::Decode {
        what,
        reason: reason.into(),
    }
}

/// The authenticated cipher values (and, with [`MasterKeys`], data keys) are sealed with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cipher {
    /// AES-256-GCM.
    #[default]
    #[serde(rename = "aes-256-gcm")]
    Aes256Gcm,
    /// SM4-GCM (Chinese national standards GB/T 32907 and GB/T 36624).
    #[serde(rename = "sm4-gcm")]
    Sm4Gcm,
}

impl Cipher {
    /// The name in configuration and logs.
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::Sm4Gcm => "sm4-gcm",
        }
    }

    /// The byte that names the cipher in stored records.
    pub(crate) fn id(self) -> u8 {
        match self {
            Cipher::Aes256Gcm => 1,
            Cipher::Sm4Gcm => 2,
        }
    }

    /// The cipher a stored byte names.
    pub(crate) fn from_id(id: u8) -> Option<Self> {
        [Cipher::Aes256Gcm, Cipher::Sm4Gcm]
            .into_iter()
            .find(|c| c.id() == id)
    }

    fn sealed_format(self) -> u8 {
        match self {
            Cipher::Aes256Gcm => FORMAT_SEALED,
            Cipher::Sm4Gcm => FORMAT_SEALED_SM4,
        }
    }
}

/// The SM4 key standing for 32 bytes of key material: HKDF-SHA256 with no salt and `label` as
/// the info, first 16 bytes.
pub(crate) fn sm4_key(material: &[u8; 32], label: &[u8]) -> Zeroizing<[u8; 16]> {
    let mut key = Zeroizing::new([0u8; 16]);
    Hkdf::<Sha256>::new(None, material)
        .expand(label, key.as_mut())
        .unwrap_or_else(|_| unreachable!("16 bytes is a valid HKDF-SHA256 length"));
    key
}

/// An AEAD instance of either cipher.
pub(crate) enum Sealer {
    Aes(Box<Aes256Gcm>),
    Sm4(Box<Sm4Gcm>),
}

impl Sealer {
    /// The cipher keyed by `material` (SM4: through [`sm4_key`] with `label`).
    pub(crate) fn new(cipher: Cipher, material: &[u8; 32], label: &[u8]) -> Self {
        match cipher {
            Cipher::Aes256Gcm => Sealer::Aes(Box::new(Aes256Gcm::new(material.into()))),
            Cipher::Sm4Gcm => {
                let key = sm4_key(material, label);
                Sealer::Sm4(Box::new(Sm4Gcm::new(key.as_ref().into())))
            }
        }
    }

    /// A fresh nonce, then the ciphertext and tag of `msg` bound to `aad`.
    pub(crate) fn seal(&self, aad: &[u8], msg: &[u8]) -> Option<Vec<u8>> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let payload = Payload { msg, aad };
        let sealed = match self {
            Sealer::Aes(c) => c.encrypt(&nonce, payload),
            Sealer::Sm4(c) => c.encrypt(&nonce, payload),
        }
        .ok()?;
        let mut out = Vec::with_capacity(NONCE + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend(sealed);
        Some(out)
    }

    /// Opens what [`Sealer::seal`] returned.
    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE {
            return None;
        }
        let (nonce, msg) = sealed.split_at(NONCE);
        let nonce = Nonce::<U12>::from_slice(nonce);
        let payload = Payload { msg, aad };
        match self {
            Sealer::Aes(c) => c.decrypt(nonce, payload),
            Sealer::Sm4(c) => c.decrypt(nonce, payload),
        }
        .ok()
    }
}

/// A user's data key: seals with the deployment's cipher, opens values of either cipher.
pub struct DataKey {
    seal_with: Cipher,
    aes: Sealer,
    sm4: Sealer,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataKey")
            .field("seal_with", &self.seal_with)
            .finish_non_exhaustive()
    }
}

impl DataKey {
    /// The data key of 32 bytes of `material`, sealing new values with `seal_with`.
    pub fn new(material: &[u8; 32], seal_with: Cipher) -> Self {
        DataKey {
            seal_with,
            aes: Sealer::new(Cipher::Aes256Gcm, material, SM4_DATA_KEY),
            sm4: Sealer::new(Cipher::Sm4Gcm, material, SM4_DATA_KEY),
        }
    }

    /// Seals `plain`, bound to `aad` (the value's key).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let sealer = match self.seal_with {
            Cipher::Aes256Gcm => &self.aes,
            Cipher::Sm4Gcm => &self.sm4,
        };
        let body = sealer.seal(aad, plain).ok_or_else(|| Error::Encode {
            what: "sealed value",
            reason: "encryption failed".into(),
        })?;
        let mut out = Vec::with_capacity(1 + body.len());
        out.push(self.seal_with.sealed_format());
        out.extend(body);
        Ok(out)
    }

    /// Opens a value sealed by [`DataKey::seal`] under the same `aad`, whichever cipher its
    /// format byte names.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>> {
        let (sealer, body) = match sealed.split_first() {
            Some((&FORMAT_SEALED, body)) => (&self.aes, body),
            Some((&FORMAT_SEALED_SM4, body)) => (&self.sm4, body),
            Some(_) | None => return Err(crypto_error("sealed value", "not a sealed value")),
        };
        sealer
            .open(aad, body)
            .ok_or_else(|| crypto_error("sealed value", "does not open with the user's data key"))
    }
}

/// Whether a stored value is sealed (by either cipher).
pub fn is_sealed(value: &[u8]) -> bool {
    matches!(
        value.first(),
        Some(&FORMAT_SEALED) | Some(&FORMAT_SEALED_SM4)
    )
}

/// Where data keys are wrapped and identity anchors keyed: a key file ([`MasterKeys`]) or an
/// external key management service.
///
/// Implementations are called inside storage transactions (on a blocking thread, within
/// FoundationDB's 5-second limit): a remote service must answer quickly, and report its
/// failures as [`Error::KeyService`]. They never log keys or what they wrap.
pub trait KeyService: Send + Sync + std::fmt::Debug {
    /// The key id new data keys are wrapped under.
    fn current(&self) -> u32;

    /// Every key id that still unwraps, current first (anchors written under an older key
    /// are looked up under each).
    fn key_ids(&self) -> Vec<u32>;

    /// Wraps 32 bytes of a data key of a user of `tenant` under key `key_id`; the blob is
    /// stored as is and must unwrap only for the same tenant.
    fn wrap(&self, tenant: &str, key_id: u32, material: &[u8; 32]) -> Result<Vec<u8>>;

    /// Unwraps a blob [`KeyService::wrap`] returned for `tenant` under `key_id`.
    fn unwrap(&self, tenant: &str, key_id: u32, wrapped: &[u8]) -> Result<Zeroizing<[u8; 32]>>;

    /// HMAC-SHA256 of `message` under the identity-anchor key of `tenant` for key `key_id`:
    /// a key of its own, never one that wraps data keys.
    fn anchor_mac(&self, tenant: &str, key_id: u32, message: &[u8]) -> Result<[u8; 32]>;
}

/// A keyspace's encryption at rest: the key service and the cipher new values are sealed
/// with. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Encryption {
    keys: Arc<dyn KeyService>,
    cipher: Cipher,
}

impl Encryption {
    /// Values sealed with `cipher` under data keys that `keys` wraps.
    pub fn new(keys: Arc<dyn KeyService>, cipher: Cipher) -> Self {
        Encryption { keys, cipher }
    }

    /// The cipher new values are sealed with.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// The key service.
    pub fn key_service(&self) -> &dyn KeyService {
        self.keys.as_ref()
    }

    /// A fresh data key for a user of `tenant`, and the record to store at the user's
    /// `"dek"` row: the current key id, then the key service's blob.
    pub fn new_data_key(&self, tenant: &str) -> Result<(DataKey, Vec<u8>)> {
        let mut material = Zeroizing::new([0u8; 32]);
        material.copy_from_slice(&Aes256Gcm::generate_key(&mut OsRng));
        let id = self.keys.current();
        let blob = self.keys.wrap(tenant, id, &material)?;
        let mut record = Vec::with_capacity(4 + blob.len());
        record.extend_from_slice(&id.to_be_bytes());
        record.extend(blob);
        Ok((DataKey::new(&material, self.cipher), record))
    }

    /// Opens a stored data-key record of a user of `tenant`.
    pub fn open_data_key(&self, tenant: &str, record: &[u8]) -> Result<DataKey> {
        let Some((id, blob)) = record.split_first_chunk::<4>() else {
            return Err(crypto_error("data key", "too short"));
        };
        let material = self.keys.unwrap(tenant, u32::from_be_bytes(*id), blob)?;
        Ok(DataKey::new(&material, self.cipher))
    }

    /// The keyed hashes of an identity anchor's `message` under every key id, current first.
    pub fn anchor_macs(&self, tenant: &str, message: &[u8]) -> Result<Vec<(u32, [u8; 32])>> {
        let current = self.keys.current();
        let mut ids = self.keys.key_ids();
        ids.retain(|id| *id != current);
        ids.insert(0, current);
        ids.into_iter()
            .map(|id| Ok((id, self.keys.anchor_mac(tenant, id, message)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
