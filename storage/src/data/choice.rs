//! Counts of repeated choices (the same preference chosen three times becomes a profile
//! candidate), kept without the user's words in any key or in any unsealed value.
//!
//! A choice's key is `("u", tenant, user, "choice", hash)` where the hash is HMAC-SHA256 of
//! `"choice" ‖ 0x00 ‖ len(topic) ‖ topic ‖ value` under the tenant's anchor key (the keyed
//! hash identity anchors use; the `"choice"` prefix keeps the two apart) and its value, the
//! count, is sealed like every user value. After a master-key rotation a count is found under
//! its old key id and moved to the current one. Without a key service nothing is sealed
//! anywhere, and the hash is a plain SHA-256 of the same message: it keeps the words out of
//! the keyspace, and protects no more than the clear values next to it.
//!
//! Keys of versions before this one (`("choice", topic, value)`, a bare counter) are read
//! once and removed when the choice is next counted.

use sha2::{Digest, Sha256};

use crate::error::Result;

use super::UserData;

fn message(topic: &str, value: &str) -> Vec<u8> {
    let len = u32::try_from(topic.len()).unwrap_or(u32::MAX).to_be_bytes();
    [
        b"choice\0".as_slice(),
        &len,
        topic.as_bytes(),
        value.as_bytes(),
    ]
    .concat()
}

impl UserData<'_> {
    /// The keys a choice's count may sit under, the current one first.
    fn choice_keys(&self, topic: &str, value: &str) -> Result<Vec<Vec<u8>>> {
        let message = message(topic, value);
        Ok(match self.keyspace.encryption() {
            Some(encryption) => encryption
                .anchor_macs(self.tenant, &message)?
                .iter()
                .map(|(_, mac)| self.keys.choice(mac))
                .collect(),
            None => vec![self.keys.choice(&Sha256::digest(&message).into())],
        })
    }

    /// The count of a choice and the key it was found under, if any.
    fn find_choice(&mut self, topic: &str, value: &str) -> Result<(u64, Option<Vec<u8>>)> {
        for key in self.choice_keys(topic, value)? {
            if let Some(n) = self.get::<u64>("choice count", &key)? {
                return Ok((n, Some(key)));
            }
        }
        let legacy = self.keys.legacy_choice(topic, value);
        Ok(match self.txn.get(&legacy)? {
            Some(v) => (crate::kv::decode_counter(&v) as u64, Some(legacy)),
            None => (0, None),
        })
    }

    /// How many times a choice was made.
    pub fn choice_count(&mut self, topic: &str, value: &str) -> Result<u64> {
        Ok(self.find_choice(topic, value)?.0)
    }

    /// Adds one to the count of a choice and returns the new count.
    pub fn count_choice(&mut self, topic: &str, value: &str) -> Result<u64> {
        let (n, found) = self.find_choice(topic, value)?;
        let current = self
            .choice_keys(topic, value)?
            .into_iter()
            .next()
            .unwrap_or_default();
        if let Some(old) = found.filter(|old| *old != current) {
            self.txn.clear(&old)?;
        }
        self.put("choice count", &current, &(n + 1))?;
        Ok(n + 1)
    }
}

#[cfg(test)]
mod tests;
