//! Versioned value encoding: one format byte, then the body.
//!
//! | format | body |
//! |---|---|
//! | `0x01` | postcard of the current type |
//! | `0x02` | a `0x01` value sealed with AES-256-GCM ([`crate::crypto`]) |
//! | `0x03` | a `0x01` value sealed with SM4-GCM ([`crate::crypto`]) |
//!
//! The format byte lets values be migrated (a new body layout gets a new byte and a decoder)
//! and wrapped (each encrypted envelope has its own byte; [`crate::data`] opens them). Decoding an unknown format or
//! a malformed body is an [`Error::Decode`], never a panic.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Postcard body, plaintext.
pub const FORMAT_POSTCARD: u8 = 0x01;

/// Encodes `value` with the current format. `what` names the value kind in errors.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>> {
    postcard::to_extend(value, vec![FORMAT_POSTCARD]).map_err(|e| Error::Encode {
        what,
        reason: e.to_string(),
    })
}

/// Decodes a value written by [`encode`].
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_POSTCARD, body)) => postcard::from_bytes(body).map_err(|e| Error::Decode {
            what,
            reason: e.to_string(),
        }),
        Some((format, _)) => Err(Error::Decode {
            what,
            reason: format!("unknown format byte {format:#04x}"),
        }),
        None => Err(Error::Decode {
            what,
            reason: "empty value".into(),
        }),
    }
}

#[cfg(test)]
mod tests;
