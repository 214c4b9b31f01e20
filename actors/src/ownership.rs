//! This node's view of which shards it serves: the leaf that every write of a user reads
//! before it starts ([`Ownership::lease`]) and the epoch it then passes to the fence inside its
//! transaction ([`engram_storage::cluster::fence`]). It knows nothing of how shards are won or
//! lost: the lease round ([`crate::cluster::LeaseManager`]) fills it in, and nothing here
//! imports the directory or the actors (docs/architecture.md, "Leases and fencing").
//!
//! - A shard is served only while it is held and the node's last complete round started
//!   less than [`LeaseSettings::serve_for`] ago (monotonic clock): half the earliest heartbeat
//!   age at which a peer may take this node's shards, which is the suspicion confirmation age
//!   (`suspect_confirm`, when a peer's links to it closed) or else the lease timeout. A node
//!   that cannot heartbeat (storage down, process paused) therefore stops serving everything
//!   before any other node may take its shards, by either path; a request meanwhile gets 503.
//!   The timing argument is in [`crate::cluster`].
//! - Safety never depends on clocks: every write transaction re-reads its shard's row and
//!   aborts unless (owner, epoch) is still this node's, so two nodes that both believe they
//!   own a shard can never both commit. [`Ownership::fenced`] records such an abort.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use engram_storage::types::Member;
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

use crate::error::{Error, Result};

/// A held shard lease: the node's ownership view and the epoch.
pub type Lease = (Arc<Ownership>, u64);

/// Runs `body` as one write transaction, fenced: it first checks that this node still holds
/// `shard` at the epoch of `lease` (unfenced without one), and aborts otherwise, so a node
/// that lost the shard (paused past its lease, partitioned) commits nothing. A fenced write
/// tells the ownership view the shard moved and is [`Error::NotOwner`].
pub async fn fenced_write<T, F>(
    store: &engram_storage::Store,
    keyspace: &engram_storage::Keyspace,
    shard: u32,
    lease: Option<Lease>,
    mut body: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnMut(&mut engram_storage::Txn) -> engram_storage::Result<T> + Send + 'static,
{
    let (ownership, epoch) = lease.map_or((None, None), |(o, e)| (Some(o), Some(e)));
    let (value, _) = fenced_write_each(
        store,
        keyspace,
        ownership.as_ref(),
        vec![(shard, epoch)],
        move |txn, held| {
            if held[0] {
                body(txn).map(Some)
            } else {
                Ok(None)
            }
        },
    )
    .await?;
    value.ok_or_else(|| {
        Error::NotOwner(format!(
            "shard {shard} moved to another node; retry on its owner"
        ))
    })
}

/// [`fenced_write`] for one transaction that writes for several shards: it checks each of
/// `shards` at the epoch it is written under (`None`: unfenced) and runs `body` with which of
/// them this node still holds, in the same order, so that `body` writes only for those. Each
/// shard found fenced is told to the ownership view; what `body` writes for the others
/// commits. Returns `body`'s value and which shards were held.
pub async fn fenced_write_each<T, F>(
    store: &engram_storage::Store,
    keyspace: &engram_storage::Keyspace,
    ownership: Option<&Arc<Ownership>>,
    shards: Vec<(u32, Option<u64>)>,
    mut body: F,
) -> Result<(T, Vec<bool>)>
where
    T: Send + 'static,
    F: FnMut(&mut engram_storage::Txn, &[bool]) -> engram_storage::Result<T> + Send + 'static,
{
    let (ks, in_txn, checks) = (keyspace.clone(), ownership.cloned(), shards.clone());
    let in_flight = ownership.map(|ownership| InFlight::enter(Arc::clone(ownership)));
    let result = store
        .run(move |txn| {
            let mut checked: HashMap<(u32, u64), bool> = HashMap::new();
            let mut held = Vec::with_capacity(checks.len());
            for &(shard, epoch) in &checks {
                let (Some(ownership), Some(epoch)) = (&in_txn, epoch) else {
                    held.push(true);
                    continue;
                };
                let ok = match checked.get(&(shard, epoch)) {
                    Some(&ok) => ok,
                    None => {
                        let ok = match engram_storage::cluster::fence(
                            txn,
                            &ks,
                            shard,
                            ownership.node(),
                            epoch,
                        ) {
                            Ok(_) => true,
                            Err(engram_storage::Error::Fenced { .. }) => false,
                            Err(err) => return Err(err),
                        };
                        checked.insert((shard, epoch), ok);
                        ok
                    }
                };
                held.push(ok);
            }
            Ok((body(txn, &held)?, held))
        })
        .await;
    drop(in_flight);
    let (value, held) = result?;
    if let Some(ownership) = ownership {
        let mut told = Vec::new();
        for (&(shard, epoch), &ok) in shards.iter().zip(&held) {
            if let (false, Some(epoch)) = (ok, epoch)
                && !told.contains(&(shard, epoch))
            {
                ownership.fenced(shard, epoch);
                told.push((shard, epoch));
            }
        }
    }
    Ok((value, held))
}

/// Counts one write in [`LeaseMetrics::writes_in_flight`] while it lives (a dropped future
/// leaves the gauge too).
struct InFlight(Arc<Ownership>);

impl InFlight {
    fn enter(ownership: Arc<Ownership>) -> Self {
        ownership
            .metrics
            .writes_in_flight
            .fetch_add(1, Ordering::Relaxed);
        InFlight(ownership)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .metrics
            .writes_in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Timings of the lease protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// This node's id.
    pub node_id: String,
    /// How often a round runs (heartbeat, hand-offs, take-overs).
    pub heartbeat_interval: Duration,
    /// Age of a heartbeat after which its node is presumed dead and its shards may be taken.
    pub lease_timeout: Duration,
    /// Age of a heartbeat after which a peer that is suspected (every transport link to it
    /// closed, [`crate::cluster::LeaseManager::suspect`]) is presumed dead: the early
    /// take-over. At most `lease_timeout`; equal to it, suspicion changes nothing.
    pub suspect_confirm: Duration,
}

impl LeaseSettings {
    /// How long after the start of its last complete round a node keeps serving: half the
    /// earliest heartbeat age at which a peer may take its shards,
    /// `min(lease_timeout, suspect_confirm) / 2`. Serving stops at this age and take-overs
    /// start at twice it, so the old owner has stopped before either kind of take-over;
    /// the other half is the margin for clocks (heartbeat ages are read on the taker's wall
    /// clock) and for the time a round takes.
    pub fn serve_for(&self) -> Duration {
        self.lease_timeout.min(self.suspect_confirm) / 2
    }
}

/// Counters of the lease protocol, exported as metrics.
#[derive(Debug, Default)]
pub struct LeaseMetrics {
    /// Shards taken (a fresh lease with a new epoch).
    pub taken: AtomicU64,
    /// Shards of those taken from a peer presumed dead (its lease still named it): by the
    /// lease timeout, or early.
    pub taken_over: AtomicU64,
    /// Shards of those taken over early: from a suspected peer (its links closed) whose
    /// heartbeat was older than the confirmation age but not yet the lease timeout.
    pub taken_over_early: AtomicU64,
    /// Shards handed off cleanly (actors stopped, lease released).
    pub handed_off: AtomicU64,
    /// Shards dropped because their lease row named another owner or epoch.
    pub lost: AtomicU64,
    /// Write transactions aborted by the fence.
    pub fenced_writes: AtomicU64,
    /// Fenced write transactions under way (past their ownership check, not yet committed
    /// or aborted): a gauge; writes waiting on a busy or stalled store show here.
    pub writes_in_flight: AtomicU64,
    /// Rounds that failed (heartbeat or lease transactions).
    pub failed_rounds: AtomicU64,
    /// Requests refused because this node does not serve the user's shard.
    pub refused: AtomicU64,
}

/// The shards this node serves, with their epochs.
#[derive(Debug)]
pub struct Ownership {
    node: String,
    fresh_for: Duration,
    held: RwLock<HashMap<u32, u64>>,
    confirmed_at: Mutex<Option<Instant>>,
    /// Every shard's owner and the live members, as of the last round.
    view: RwLock<(HashMap<u32, String>, Vec<Member>)>,
    /// Counters.
    pub metrics: LeaseMetrics,
}

impl Ownership {
    /// An empty view for `node` that serves nothing until its first round.
    pub fn new(settings: &LeaseSettings) -> Arc<Self> {
        Arc::new(Ownership {
            node: settings.node_id.clone(),
            fresh_for: settings.serve_for(),
            held: RwLock::new(HashMap::new()),
            confirmed_at: Mutex::new(None),
            view: RwLock::new((HashMap::new(), Vec::new())),
            metrics: LeaseMetrics::default(),
        })
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The epoch under which this node may write `shard` now, or why it may not.
    pub fn lease(&self, shard: u32) -> Result<u64> {
        let fresh = self
            .confirmed_at
            .lock()
            .is_some_and(|at| at.elapsed() <= self.fresh_for);
        let epoch = self.held.read().get(&shard).copied();
        match (fresh, epoch) {
            (true, Some(epoch)) => Ok(epoch),
            (false, Some(_)) => {
                self.metrics.refused.fetch_add(1, Ordering::Relaxed);
                Err(Error::NotOwner(format!(
                    "shard {shard}: this node could not confirm its leases in time; retry"
                )))
            }
            (true | false, None) => {
                self.metrics.refused.fetch_add(1, Ordering::Relaxed);
                Err(Error::NotOwner(format!(
                    "shard {shard} is not served by node {}; retry on its owner",
                    self.node
                )))
            }
        }
    }

    /// The owner of `shard` as of the last round, if it has one.
    pub fn owner(&self, shard: u32) -> Option<String> {
        self.view.read().0.get(&shard).cloned()
    }

    /// The live members as of the last round (this node included).
    pub fn live_members(&self) -> Vec<Member> {
        self.view.read().1.clone()
    }

    /// Whether this node holds `shard` (fresh or not; [`Ownership::lease`] says whether it
    /// may write it now). Counts nothing.
    pub fn holds(&self, shard: u32) -> bool {
        self.held.read().contains_key(&shard)
    }

    /// How many shards this node holds.
    pub fn held(&self) -> usize {
        self.held.read().len()
    }

    /// The held shards and their epochs.
    pub fn snapshot(&self) -> HashMap<u32, u64> {
        self.held.read().clone()
    }

    /// Records that a write found `shard` fenced at `epoch`: stop serving it (the next round
    /// stops its actors).
    pub fn fenced(&self, shard: u32, epoch: u64) {
        let mut held = self.held.write();
        if held.get(&shard) == Some(&epoch) {
            held.remove(&shard);
        }
        self.metrics.fenced_writes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn insert(&self, shard: u32, epoch: u64) {
        self.held.write().insert(shard, epoch);
    }

    pub(crate) fn remove(&self, shard: u32) -> Option<u64> {
        self.held.write().remove(&shard)
    }

    pub(crate) fn confirm(&self, at: Instant) {
        *self.confirmed_at.lock() = Some(at);
    }

    /// Records the cluster as the last round saw it: every shard's owner and the live members.
    pub(crate) fn set_view(&self, owners: HashMap<u32, String>, live: Vec<Member>) {
        *self.view.write() = (owners, live);
    }

    /// Stops serving everything until the next complete round.
    pub fn suspend(&self) {
        *self.confirmed_at.lock() = None;
    }
}

#[cfg(test)]
mod tests;
