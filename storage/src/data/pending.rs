//! Pending inference: the durable queue of texts awaiting their embeddings
//! (docs/architecture.md, "Memory model": embeddings follow the writes).
//!
//! A write that gives a record a text it has no vector for stores a [`PendingInference`] entry
//! at `("u", tenant, user, "pend", memory_id)` in the same transaction, sealed like every value
//! of the user, and marks the user in the work index `("pend", tenant, user)`, whose value is
//! when the user's oldest entry was queued (8 bytes, big-endian milliseconds; no personal
//! data). The pipeline finds work through the work index, reads the entries, and stores each
//! vector in a transaction that first checks the entry still holds the text that was embedded
//! ([`UserData::complete_pending`]); then it settles the user's mark.
//!
//! Invariants: an entry names a record written in the same transaction; the entry of a memory
//! is removed whenever its vector is stored or removed, or the record is; a user with entries
//! is marked (a mark without entries is possible, and harmless: the pipeline clears it);
//! forgetting a user removes both.
//!
//! The distillation queue ([`WorkQueue::Distillation`], [`PendingDistillation`]) follows the
//! same layout and rules with its own tag: one entry per message awaiting the generative
//! model, and its own work index.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::keyspace::{Keyspace, WorkQueue};
use crate::kv::{RangeOptions, Txn};
use crate::types::{Embedding, MemoryStatus, PendingDistillation, PendingInference, Timestamp};

use super::UserData;

/// The length of a work-index value: when the user's oldest pending entry was queued.
pub const PENDING_SINCE_LEN: usize = 8;

/// What became of a computed vector ([`UserData::complete_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Stored: the entry still held the embedded text and the record is live.
    Stored,
    /// Dropped: the entry is gone or holds another text (the record was deleted, forgotten,
    /// or rewritten since), or the record was deleted.
    Dropped,
}

/// A user marked in the work index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUser {
    /// Tenant.
    pub tenant: String,
    /// User.
    pub user: String,
    /// When the user's oldest pending entry was queued (as of the last write or settle).
    pub since: Timestamp,
    /// The work-index key (to read on after it).
    pub key: Vec<u8>,
}

fn since_bytes(at: Timestamp) -> [u8; PENDING_SINCE_LEN] {
    at.0.to_be_bytes()
}

fn since_of(value: &[u8]) -> Timestamp {
    Timestamp(value.try_into().map(i64::from_be_bytes).unwrap_or_default())
}

/// An entry of one of the work queues.
pub trait Pending: Serialize + DeserializeOwned {
    /// Its queue.
    const QUEUE: WorkQueue;
    /// What it is called in errors.
    const WHAT: &'static str;
    /// When it was queued.
    fn queued_at(&self) -> Timestamp;
}

impl Pending for PendingInference {
    const QUEUE: WorkQueue = WorkQueue::Embedding;
    const WHAT: &'static str = "pending inference";

    fn queued_at(&self) -> Timestamp {
        self.queued_at
    }
}

impl Pending for PendingDistillation {
    const QUEUE: WorkQueue = WorkQueue::Distillation;
    const WHAT: &'static str = "pending distillation";

    fn queued_at(&self) -> Timestamp {
        self.queued_at
    }
}

impl UserData<'_> {
    /// Queues `entry` as `id` in its queue and marks the user in the queue's work index
    /// (keeping an older mark's time).
    pub fn put_queued<P: Pending>(&mut self, id: &str, entry: &P) -> Result<()> {
        self.put(P::WHAT, &self.keys.pending(P::QUEUE, id), entry)?;
        let mark = self.keyspace.pending_user(P::QUEUE, self.tenant, self.user);
        if self.txn.get(&mark)?.is_none() {
            self.txn.set(&mark, &since_bytes(entry.queued_at()))?;
        }
        Ok(())
    }

    /// The entry `id` of a queue.
    pub fn queued<P: Pending>(&mut self, id: &str) -> Result<Option<P>> {
        self.get(P::WHAT, &self.keys.pending(P::QUEUE, id))
    }

    /// Removes the entry `id` of `queue`.
    pub fn clear_queued(&mut self, queue: WorkQueue, id: &str) -> Result<()> {
        self.txn.clear(&self.keys.pending(queue, id))
    }

    /// At most `limit` entries of the user in a queue, by id.
    pub fn queued_entries<P: Pending>(&mut self, limit: usize) -> Result<Vec<(String, P)>> {
        let range = self.keys.pendings(P::QUEUE);
        let rows =
            self.txn
                .get_range(&range.begin, &range.end, RangeOptions::first(limit.max(1)))?;
        rows.iter()
            .map(|(k, v)| {
                let id =
                    self.keys
                        .parse_pending(P::QUEUE, k)
                        .ok_or_else(|| crate::Error::Decode {
                            what: "pending key",
                            reason: format!("not a key of the {} queue", P::QUEUE.tag()),
                        })?;
                Ok((id, self.open(P::WHAT, k, v)?))
            })
            .collect()
    }

    /// Brings the user's mark in a queue's work index up to date: cleared when no entry is
    /// left, else stamped with the queue time of the first remaining entry, which it returns.
    pub fn settle_queue<P: Pending>(&mut self) -> Result<Option<Timestamp>> {
        let mark = self.keyspace.pending_user(P::QUEUE, self.tenant, self.user);
        match self.queued_entries::<P>(1)?.into_iter().next() {
            Some((_, first)) => {
                self.txn.set(&mark, &since_bytes(first.queued_at()))?;
                Ok(Some(first.queued_at()))
            }
            None => {
                self.txn.clear(&mark)?;
                Ok(None)
            }
        }
    }

    /// How many entries the user has in `queue` (keys only are counted).
    pub fn count_queued(&mut self, queue: WorkQueue) -> Result<usize> {
        let range = self.keys.pendings(queue);
        Ok(self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::default())?
            .len())
    }

    /// Queues `text` (what `memory_id` is indexed by) for embedding.
    pub fn put_pending(&mut self, memory_id: &str, entry: &PendingInference) -> Result<()> {
        self.put_queued(memory_id, entry)
    }

    /// The pending entry of a memory.
    pub fn pending(&mut self, memory_id: &str) -> Result<Option<PendingInference>> {
        self.queued(memory_id)
    }

    /// Removes the pending entry of a memory (its vector was stored or removed).
    pub fn clear_pending(&mut self, memory_id: &str) -> Result<()> {
        self.clear_queued(WorkQueue::Embedding, memory_id)
    }

    /// At most `limit` pending entries of the user, by memory id.
    pub fn pending_entries(&mut self, limit: usize) -> Result<Vec<(String, PendingInference)>> {
        self.queued_entries(limit)
    }

    /// Stores the vector of `text` for `memory_id` if its pending entry still holds that text
    /// and the record is not deleted, and removes the entry either way when it held that text.
    /// An entry for another text (the record was rewritten meanwhile) stays for its own vector.
    pub fn complete_pending(
        &mut self,
        memory_id: &str,
        text: &str,
        embedding: &Embedding,
    ) -> Result<Completion> {
        let Some(entry) = self.pending(memory_id)? else {
            return Ok(Completion::Dropped);
        };
        if entry.text != text {
            return Ok(Completion::Dropped);
        }
        match self.record(entry.kind, memory_id)? {
            Some(record) if record.status != MemoryStatus::Deleted => {
                // Clears the entry too.
                self.put_embedding(memory_id, embedding)?;
                Ok(Completion::Stored)
            }
            Some(_) | None => {
                self.clear_pending(memory_id)?;
                Ok(Completion::Dropped)
            }
        }
    }

    /// Brings the user's embedding work-index mark up to date ([`UserData::settle_queue`]).
    pub fn settle_pending(&mut self) -> Result<Option<Timestamp>> {
        self.settle_queue::<PendingInference>()
    }

    /// How many pending embedding entries the user has.
    pub fn count_pending(&mut self) -> Result<usize> {
        self.count_queued(WorkQueue::Embedding)
    }

    /// Removes the user's marks in every work index (the user is forgotten).
    pub(super) fn clear_pending_mark(&mut self) -> Result<()> {
        for queue in [WorkQueue::Embedding, WorkQueue::Distillation] {
            self.txn
                .clear(&self.keyspace.pending_user(queue, self.tenant, self.user))?;
        }
        Ok(())
    }
}

/// At most `limit` users of the work index of `queue`, by tenant then user, after the key
/// `after` (from the start when `None`): the pipeline's scan for work.
pub fn pending_users(
    txn: &mut Txn,
    keyspace: &Keyspace,
    queue: WorkQueue,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<PendingUser>> {
    let range = keyspace.pending_users(queue);
    let begin = match after {
        // The smallest key after `after`.
        Some(key) => [key, &[0u8]].concat(),
        None => range.begin,
    };
    let rows = txn.get_range(&begin, &range.end, RangeOptions::first(limit.max(1)))?;
    Ok(rows
        .into_iter()
        .filter_map(|(key, value)| {
            let (tenant, user) = keyspace.parse_pending_user(queue, &key)?;
            Some(PendingUser {
                tenant,
                user,
                since: since_of(&value),
                key,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests;
