//! The circuit breaker of sensitive reads: reads that return a user's high-PII memories, and
//! identity-anchor matches, are counted per (reading principal, user) over a sliding window;
//! beyond the threshold (5 in 24 hours by default) that principal's further such reads of the
//! user are refused (or, for contexts, served with the sensitive memories withheld) until an
//! admin approves, which clears every principal's count of the user.
//!
//! Counting per principal keeps one gateway from locking every other gateway out of a user.
//! The counts live under the user's prefix (timestamps and key ids only, no content), sealed
//! like every value of the user, and are written by the user's actor inside its fenced
//! transactions ([`crate::user`]): they survive restarts and fail-over, a node that lost the
//! shard cannot write them, and forgetting the user erases them. This module is the pure
//! rule; the actor runs it.

use engram_storage::types::Timestamp;
use serde::{Deserialize, Serialize};

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Sensitive reads allowed within the window (0: the breaker is off).
    pub threshold: u32,
    /// Identity-anchor matches allowed within the window, counted apart from reads (0: not
    /// limited).
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
    /// A read that showed high-PII items.
    Read,
    /// An identity-anchor match.
    Match,
}

impl Counter {
    fn tag(self) -> &'static str {
        match self {
            Counter::Read => "read",
            Counter::Match => "match",
        }
    }

    /// The events of this counter allowed within the window under `policy` (0: no limit).
    pub fn threshold(self, policy: Policy) -> u32 {
        match self {
            Counter::Read => policy.threshold,
            Counter::Match => policy.match_threshold,
        }
    }
}

/// Sensitive reads and anchor matches of one user within the window, per reading principal
/// and counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    by_principal: Vec<(String, Vec<Timestamp>)>,
}

/// The row of one principal's counter.
fn row(principal: &str, counter: Counter) -> String {
    format!("{principal}/{}", counter.tag())
}

/// What the breaker says about one more sensitive read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, and counted.
    Allowed,
    /// Refused: `reads` sensitive reads by this principal happened within the window already.
    Refused {
        /// Reads counted within the window.
        reads: u32,
    },
}

impl Counts {
    /// Counts one event of `counter` by `principal` at `now`, or refuses it. Forgets events
    /// that left the window, and principals left with none.
    pub fn count(
        &mut self,
        principal: &str,
        counter: Counter,
        policy: Policy,
        now: Timestamp,
    ) -> Verdict {
        self.count_many(principal, counter, policy, now, 1)
    }

    /// Counts `events` events of `counter` by `principal` at `now` (a search with several
    /// identifiers is as many guesses), or refuses them all when they would pass the limit.
    /// Forgets events that left the window, and principals left with none.
    pub fn count_many(
        &mut self,
        principal: &str,
        counter: Counter,
        policy: Policy,
        now: Timestamp,
        events: u32,
    ) -> Verdict {
        let threshold = counter.threshold(policy);
        if threshold == 0 || events == 0 {
            return Verdict::Allowed;
        }
        let principal = row(principal, counter);
        let principal = principal.as_str();
        let since = now.0.saturating_sub(policy.window_ms);
        for (_, reads) in &mut self.by_principal {
            reads.retain(|at| at.0 > since);
        }
        self.by_principal.retain(|(_, reads)| !reads.is_empty());
        let at = match self.by_principal.iter().position(|(p, _)| p == principal) {
            Some(at) => at,
            None => {
                self.by_principal.push((principal.to_owned(), Vec::new()));
                self.by_principal.len() - 1
            }
        };
        let reads = &mut self.by_principal[at].1;
        let counted = u32::try_from(reads.len()).unwrap_or(u32::MAX);
        if counted.saturating_add(events) > threshold {
            if reads.is_empty() {
                self.by_principal.remove(at);
            }
            return Verdict::Refused { reads: counted };
        }
        reads.extend(std::iter::repeat_n(now, events as usize));
        Verdict::Allowed
    }

    /// Events counted in all, every principal and counter together (what an approval
    /// clears).
    pub fn total(&self) -> u32 {
        let n: usize = self.by_principal.iter().map(|(_, r)| r.len()).sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Events of `counter` by `principal` counted (within the window as of the last count).
    pub fn of(&self, principal: &str, counter: Counter) -> u32 {
        let principal = row(principal, counter);
        self.by_principal
            .iter()
            .find(|(p, _)| *p == principal)
            .map_or(0, |(_, r)| u32::try_from(r.len()).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests;
