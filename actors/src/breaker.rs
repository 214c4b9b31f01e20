//! The circuit breaker of sensitive reads: reads that return a user's high-PII memories are
//! counted per user over a sliding window; beyond the threshold (5 in 24 hours by default)
//! further such reads are refused until an admin approves, which clears the count.
//!
//! The count lives in storage (`("u", tenant, user, "breaker")`, timestamps only, no content),
//! so it survives restarts and fail-over and is erased when the user is forgotten. It is
//! counted by the node that serves the user (requests are forwarded to the owner), in its own
//! serializable transaction: concurrent reads conflict and retry, so none is missed.

use engram_storage::codec::{decode, encode};
use engram_storage::model::Timestamp;
use serde::{Deserialize, Serialize};

use crate::placement::UserKey;
use crate::services::Services;

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Sensitive reads allowed within the window (0: the breaker is off).
    pub threshold: u32,
    /// The window, in milliseconds.
    pub window_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            threshold: 5,
            window_ms: 24 * 3_600 * 1_000,
        }
    }
}

/// Sensitive reads of a user within the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Row {
    reads: Vec<Timestamp>,
}

/// What the breaker says about one more sensitive read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, and counted.
    Allowed,
    /// Refused: `reads` sensitive reads happened within the window already.
    Refused {
        /// Reads counted within the window.
        reads: u32,
    },
}

/// Counts one sensitive read of `key` at `now`, or refuses it.
pub async fn count_read(
    services: &Services,
    key: &UserKey,
    policy: Policy,
    now: Timestamp,
) -> crate::Result<Verdict> {
    if policy.threshold == 0 {
        return Ok(Verdict::Allowed);
    }
    let row_key = services
        .keyspace
        .user(&key.tenant, &key.user)
        .sensitive_reads();
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
            if reads >= policy.threshold {
                return Ok(Verdict::Refused { reads });
            }
            row.reads.push(now);
            txn.set(&row_key, &encode("sensitive reads", &row)?)?;
            Ok(Verdict::Allowed)
        })
        .await?;
    Ok(verdict)
}

/// An admin's approval: clears the user's count, so sensitive reads are allowed again up to
/// the threshold. Returns how many reads were cleared.
pub async fn approve(services: &Services, key: &UserKey) -> crate::Result<u32> {
    let row_key = services
        .keyspace
        .user(&key.tenant, &key.user)
        .sensitive_reads();
    let cleared = services
        .store
        .run(move |txn| {
            let row: Row = txn
                .get(&row_key)?
                .map(|v| decode("sensitive reads", &v))
                .transpose()?
                .unwrap_or_default();
            txn.clear(&row_key)?;
            Ok(u32::try_from(row.reads.len()).unwrap_or(u32::MAX))
        })
        .await?;
    Ok(cleared)
}
