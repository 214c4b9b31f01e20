//! What an idempotency entry keeps of the memories an acknowledgement shows, and what a
//! replay shows of them: entries are stored with the records' texts withheld, and a replay
//! reads each record again as it is now, so a memory deleted (or purged) since its request
//! was first answered comes back as deleted, without its text, never whole and active.

use engram_storage::data::UserData;
use engram_storage::model::{MemoryRecord, MemoryStatus};

use tokio::time::Instant;

use super::txn::{lease_of, run_fenced};
use super::{Replayable, UserArgs};
use crate::error::Result;
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

/// Idempotency entries one pruning transaction reads at most.
const PRUNE_PAGE: usize = 256;
/// Pages one pruning reads at most; what is left waits for the next.
const PRUNE_PAGES: usize = 64;
/// How often a live actor prunes its user's entries.
pub(super) const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// When a live actor last pruned its user's idempotency entries.
#[derive(Debug)]
pub(super) struct Pruning {
    last: Option<Instant>,
}

impl Pruning {
    /// Pruning as of an actor that starts now: the first is due an hour later.
    pub(super) fn started() -> Self {
        Pruning {
            last: Some(Instant::now()),
        }
    }

    /// Whether the hourly pruning is due.
    pub(super) fn due(&self) -> bool {
        self.last.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
    }

    /// Removes `args`' user's idempotency entries older than the retention
    /// (`memory.idempotency-retention`), a page a transaction. Run by a live actor at most
    /// once every [`PRUNE_EVERY`] (the first an hour after it started), and by every sweep
    /// of the user.
    pub(super) async fn prune(&mut self, args: &UserArgs) -> Result<usize> {
        self.last = Some(Instant::now());
        let (services, key) = (&args.services, &args.key);
        let before = services
            .clock
            .now()
            .plus_millis(-services.settings.idempotency_retention_ms);
        let mut after: Option<Vec<u8>> = None;
        let mut removed = 0;
        for _ in 0..PRUNE_PAGES {
            let (ks, user, from) = (services.keyspace.clone(), key.clone(), after.clone());
            let (n, next) = run_fenced(services, key, lease_of(args)?, move |txn| {
                UserData::new(txn, &ks, &user.tenant, &user.user).prune_idempotency_page(
                    from.as_deref(),
                    PRUNE_PAGE,
                    before,
                )
            })
            .await?;
            removed += n;
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(removed)
    }
}
