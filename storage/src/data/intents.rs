//! Intent versions (with their expiry-index entries) and the model's turn summaries.

use super::UserData;
use crate::error::Result;
use crate::keyspace::ExpiryTarget;
use crate::kv::RangeOptions;
use crate::types::{Intent, Timestamp, TurnSummary};

impl UserData<'_> {
    /// Writes one version of an intent, with its expiry-index entry when it expires
    /// ([`Intent::expires_at`]).
    pub fn put_intent(&mut self, intent: &Intent) -> Result<()> {
        if let Some(at) = intent.expires_at() {
            self.txn
                .set(&self.expiry_key(at, &intent_target(intent)), b"")?;
        }
        self.put(
            "intent",
            &self.keys.intent(&intent.intent_type, intent.version),
            intent,
        )
    }

    /// Removes one version of an intent and its expiry-index entry.
    pub fn delete_intent(&mut self, intent_type: &str, version: Timestamp) -> Result<()> {
        let key = self.keys.intent(intent_type, version);
        if let Some(intent) = self.get::<Intent>("intent", &key)?
            && let Some(at) = intent.expires_at()
        {
            self.txn
                .clear(&self.expiry_key(at, &intent_target(&intent)))?;
        }
        self.txn.clear(&key)
    }

    /// Every version of every intent type, by type then version.
    pub fn all_intents(&mut self) -> Result<Vec<Intent>> {
        let range = self.keys.all_intents();
        self.decode_range("intent", &range.begin, &range.end)
    }

    /// Removes the versions past their expiry at `now`; returns how many.
    pub fn expire_intents(&mut self, now: Timestamp) -> Result<usize> {
        let mut removed = 0;
        for intent in self.all_intents()? {
            if intent.expires_at().is_some_and(|at| at <= now) {
                self.delete_intent(&intent.intent_type, intent.version)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The versions of an intent type, oldest first.
    pub fn intents(&mut self, intent_type: &str) -> Result<Vec<Intent>> {
        let range = self.keys.intents(intent_type);
        self.decode_range("intent", &range.begin, &range.end)
    }

    /// At most `limit` versions of an intent type older than `before` (every version when
    /// `None`), newest first: one bounded range read.
    pub fn newest_intents(
        &mut self,
        intent_type: &str,
        before: Option<Timestamp>,
        limit: usize,
    ) -> Result<Vec<Intent>> {
        let range = self.keys.intents(intent_type);
        let end = match before {
            Some(version) => self.keys.intent(intent_type, version),
            None => range.end,
        };
        let rows = self
            .txn
            .get_range(&range.begin, &end, RangeOptions::last(limit.max(1)))?;
        rows.iter()
            .map(|(k, v)| self.open("intent", k, v))
            .collect()
    }

    /// Removes every version of an intent type older than `version` (one range clear, after
    /// their expiry-index entries).
    pub fn prune_intents_before(&mut self, intent_type: &str, version: Timestamp) -> Result<()> {
        let range = self.keys.intents(intent_type);
        let end = self.keys.intent(intent_type, version);
        for intent in self.decode_range::<Intent>("intent", &range.begin, &end)? {
            if let Some(at) = intent.expires_at() {
                self.txn
                    .clear(&self.expiry_key(at, &intent_target(&intent)))?;
            }
        }
        self.txn.clear_range(&range.begin, &end)
    }

    /// Stores the model's summary of a turn that still exists; returns whether it did.
    pub fn put_summary(&mut self, session: &str, seq: u64, summary: &TurnSummary) -> Result<bool> {
        if self.turn(session, seq)?.is_none() {
            return Ok(false);
        }
        self.put("turn summary", &self.keys.summary(session, seq), summary)?;
        Ok(true)
    }

    /// The model's summaries of a session's turns, by sequence number.
    pub fn summaries(&mut self, session: &str) -> Result<Vec<(u64, TurnSummary)>> {
        let range = self.keys.summaries(session);
        let rows = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::default())?;
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in &rows {
            if let Some(seq) = self.keys.parse_summary(k) {
                out.push((seq, self.open("turn summary", k, v)?));
            }
        }
        Ok(out)
    }
}

pub(super) fn intent_target(intent: &Intent) -> ExpiryTarget {
    ExpiryTarget::Intent {
        intent_type: intent.intent_type.clone(),
        version: intent.version,
    }
}
