//! What an idempotency entry keeps of the memories an acknowledgement shows, and what a
//! replay shows of them: entries are stored with the records' texts withheld, and a replay
//! reads each record again as it is now, so a memory deleted (or purged) since its request
//! was first answered comes back as deleted, without its text, never whole and active.

use engram_storage::data::UserData;
use engram_storage::types::{MemoryRecord, MemoryStatus};

use super::Replayable;
use crate::request::user::{MemoryAck, ResolveAck};

impl Replayable for MemoryAck {
    const KIND: &'static str = "memory";

    fn mark_replayed(&mut self) {
        self.replayed = true;
    }

    fn records_mut(&mut self) -> Vec<&mut MemoryRecord> {
        vec![&mut self.memory]
    }
}

impl Replayable for ResolveAck {
    const KIND: &'static str = "resolve-conflict";

    fn mark_replayed(&mut self) {
        self.replayed = true;
    }

    fn records_mut(&mut self) -> Vec<&mut MemoryRecord> {
        self.memories.iter_mut().collect()
    }
}

/// `record` without its texts, as an idempotency entry keeps it.
pub(super) fn withhold(record: &mut MemoryRecord) {
    record.summary_text.clear();
    "null".clone_into(&mut record.payload);
}

/// The acknowledgement `ack` as an idempotency entry stores it: its records without texts.
pub(super) fn stored<T: Replayable>(ack: &T) -> T {
    let mut kept = ack.clone();
    for record in kept.records_mut() {
        withhold(record);
    }
    kept
}

/// Reads the records `ack` shows again, in the replaying transaction: as stored now, or as
/// deleted without text when they are deleted or gone.
pub(super) fn refresh<T: Replayable>(
    u: &mut UserData<'_>,
    ack: &mut T,
) -> engram_storage::Result<()> {
    for record in ack.records_mut() {
        match u.record(record.kind, &record.memory_id)? {
            Some(now) if now.status != MemoryStatus::Deleted => *record = now,
            _ => {
                withhold(record);
                record.status = MemoryStatus::Deleted;
            }
        }
    }
    Ok(())
}
