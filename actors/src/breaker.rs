//! The circuit breaker of sensitive reads: reads that serve a user's high-PII memories, and
//! matches of identifiers against the user's anchors, are counted per (principal, user) over
//! a sliding window; beyond the thresholds (5 reads and 10 matches in 24 hours by default)
//! further ones are refused until an admin approves, which clears the counts of every
//! principal for that user.
//!
//! Per principal (the API key id), so that one gateway reaching the limit does not lock every
//! other gateway out of the user. Extra keys do not multiply an attacker's budget in practice:
//! minting a key needs an admin key, and an admin reads the user's text in full anyway.
//!
//! Counted: [`Counter::SensitiveRead`] for list, search, session and context reads that serve
//! at least one high-PII turn or record (masked or not: the mask is what a gateway sees, and
//! the count is what bounds how often it may look); [`Counter::AnchorMatch`] for every
//! well-formed identifier matched, whatever the answer, so that the hidden digits of a masked
//! ID number cannot be brute-forced through `anchors/match`.
//!
//! The counts live in storage (`("u", tenant, user, "breaker", principal, counter)`,
//! timestamps only, no content; a key id is not personal data), so they survive restarts and
//! fail-over and are erased when the user is forgotten. They are counted by the node that
//! serves the user (requests are forwarded to the owner), in a serializable transaction:
//! concurrent reads conflict and retry, so none is missed.

use engram_storage::codec::{decode, encode};
use engram_storage::kv::RangeOptions;
use engram_storage::model::Timestamp;
use serde::{Deserialize, Serialize};

use crate::placement::UserKey;
use crate::services::Services;

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Sensitive reads a principal may make of one user within the window (0: no limit).
    pub threshold: u32,
    /// Anchor matches a principal may make against one user within the window (0: no
    /// limit).
    pub match_threshold: u32,
    /// The window, in milliseconds.
    pub window_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            threshold: 5,
            match_threshold: 10,
            window_ms: 24 * 3_600 * 1_000,
        }
    }
}

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// A read that serves high-PII turns or records.
    SensitiveRead,
    /// An identifier matched against the user's anchors.
    AnchorMatch,
}

impl Counter {
    /// The name in the storage key.
    pub fn as_str(self) -> &'static str {
        match self {
            Counter::SensitiveRead => "read",
            Counter::AnchorMatch => "match",
        }
    }

    fn threshold(self, policy: Policy) -> u32 {
        match self {
            Counter::SensitiveRead => policy.threshold,
            Counter::AnchorMatch => policy.match_threshold,
        }
    }
}

/// Counted events of one (principal, user, counter) within the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Row {
    reads: Vec<Timestamp>,
}

/// What the breaker says about one more counted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, and counted.
    Allowed,
    /// Refused: `reads` events were counted within the window already.
    Refused {
        /// Events counted within the window.
        reads: u32,
    },
}

/// Counts one event of `counter` by `principal` on `key` at `now`, or refuses it.
pub async fn count(
    services: &Services,
    key: &UserKey,
    principal: &str,
    counter: Counter,
    policy: Policy,
    now: Timestamp,
) -> crate::Result<Verdict> {
    let threshold = counter.threshold(policy);
    if threshold == 0 {
        return Ok(Verdict::Allowed);
    }
    let row_key = services
        .keyspace
        .user(&key.tenant, &key.user)
        .breaker(principal, counter.as_str());
    let verdict = services
        .store
        .run(move |txn| {
            let mut row: Row = txn
                .get(&row_key)?
                .map(|v| decode("sensitive reads", &v))
                .transpose()?
                .unwrap_or_default();
            row.reads
                .retain(|at| at.0 > now.0.saturating_sub(policy.window_ms));
            let reads = u32::try_from(row.reads.len()).unwrap_or(u32::MAX);
            if reads >= threshold {
                return Ok(Verdict::Refused { reads });
            }
            row.reads.push(now);
            txn.set(&row_key, &encode("sensitive reads", &row)?)?;
            Ok(Verdict::Allowed)
        })
        .await?;
    Ok(verdict)
}

/// An admin's approval: clears the user's counts of every principal and counter, so reads
/// and matches are allowed again up to the thresholds. Returns how many events were cleared.
pub async fn approve(services: &Services, key: &UserKey) -> crate::Result<u32> {
    let user = services.keyspace.user(&key.tenant, &key.user);
    let (rows, legacy) = (user.breakers(), user.sensitive_reads());
    let cleared = services
        .store
        .run(move |txn| {
            let mut cleared = 0usize;
            for (_, value) in txn.get_range(&rows.begin, &rows.end, RangeOptions::first(0))? {
                let row: Row = decode("sensitive reads", &value)?;
                cleared += row.reads.len();
            }
            if let Some(value) = txn.get(&legacy)? {
                let row: Row = decode("sensitive reads", &value)?;
                cleared += row.reads.len();
                txn.clear(&legacy)?;
            }
            txn.clear_range(&rows.begin, &rows.end)?;
            Ok(u32::try_from(cleared).unwrap_or(u32::MAX))
        })
        .await?;
    Ok(cleared)
}
