//! Identity anchors: that a user gave an identifier (a resident ID or passport number), kept
//! as the identifier's keyed hash so it can be matched later but never read back.
//!
//! The hash is HMAC-SHA256 of `kind ‖ 0x00 ‖ normalised identifier` under the tenant's anchor
//! key (from the key service, apart from the keys that wrap data keys); the anchor's key is
//! `("u", tenant, user, "anchor", hash)`, so forgetting the user removes it, and its value
//! ([`Anchor`]: kind, first seen, key id) is sealed like every user value. Without a key
//! service nothing is anchored: an unkeyed hash of an 18-digit number is no protection (the
//! space is small enough to enumerate). Normalising the identifier is the caller's business.

use crate::error::Result;
use crate::types::{Anchor, AnchorKind, Timestamp};

use super::UserData;

/// What recording an identity anchor did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorWrite {
    /// A new anchor was written.
    Recorded,
    /// The user had given the identifier before (under the current or an older key).
    Known,
    /// The keyspace has no key service: nothing was written.
    Unkeyed,
}

/// An identifier looked up under every key id.
struct Lookup {
    /// Its anchor, if the user gave it.
    found: Option<Anchor>,
    /// The current key id.
    key_id: u32,
    /// Its hash under the current key id.
    mac: [u8; 32],
}

fn message(kind: AnchorKind, value: &str) -> Vec<u8> {
    [kind.as_str().as_bytes(), &[0], value.as_bytes()].concat()
}

impl UserData<'_> {
    /// The anchor of `value` under any key id; `None` without a key service.
    fn lookup_anchor(&mut self, kind: AnchorKind, value: &str) -> Result<Option<Lookup>> {
        let Some(encryption) = self.keyspace.encryption() else {
            return Ok(None);
        };
        let macs = encryption.anchor_macs(self.tenant, &message(kind, value))?;
        let (key_id, current) = macs[0];
        let mut found = None;
        for (_, mac) in macs {
            found = self.get::<Anchor>("identity anchor", &self.keys.anchor(&mac))?;
            if found.is_some() {
                break;
            }
        }
        Ok(Some(Lookup {
            found,
            key_id,
            mac: current,
        }))
    }

    /// Records that the user gave the identifier `value` (normalised) of `kind` at `now`.
    pub fn record_anchor(
        &mut self,
        kind: AnchorKind,
        value: &str,
        now: Timestamp,
    ) -> Result<AnchorWrite> {
        match self.lookup_anchor(kind, value)? {
            None => Ok(AnchorWrite::Unkeyed),
            Some(Lookup { found: Some(_), .. }) => Ok(AnchorWrite::Known),
            Some(Lookup {
                found: None,
                key_id,
                mac,
            }) => {
                let anchor = Anchor {
                    kind,
                    first_seen: now,
                    key_id,
                };
                self.put("identity anchor", &self.keys.anchor(&mac), &anchor)?;
                Ok(AnchorWrite::Recorded)
            }
        }
    }

    /// The anchor of the identifier `value` (normalised) of `kind`, if the user gave it.
    /// Always `None` without a key service.
    pub fn find_anchor(&mut self, kind: AnchorKind, value: &str) -> Result<Option<Anchor>> {
        Ok(self
            .lookup_anchor(kind, value)?
            .and_then(|lookup| lookup.found))
    }

    /// Every anchor of the user (kinds and times; the identifiers are not stored).
    pub fn anchors(&mut self) -> Result<Vec<Anchor>> {
        let range = self.keys.anchors();
        self.decode_range("identity anchor", &range.begin, &range.end)
    }
}

#[cfg(test)]
mod tests;
