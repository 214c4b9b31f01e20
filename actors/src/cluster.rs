//! The lease round: heartbeats in the membership table, the live member set read from
//! storage, rendezvous placement of shards over it, and taking, handing off and dropping shard
//! leases with epochs (docs/architecture.md, "Leases and fencing"). What a write reads is in
//! [`crate::ownership`], which this module fills in; that module does not know this one.
//!
//! How it works:
//! - Each node runs a [`LeaseManager`] round every heartbeat interval: it writes its heartbeat
//!   (a one-row write transaction), reads the members and the lease rows (a read
//!   transaction, which holds no write lock), hands off the shards that rendezvous hashing
//!   now gives another live node (stop their user actors after their queued requests, then
//!   release their leases in one transaction), takes the shards rendezvous gives it whose
//!   lease is free or whose owner is presumed dead (left, or its heartbeat older than the
//!   lease timeout, or than the suspicion confirmation age while suspected: see the timing
//!   below), and drops the shards whose lease row names someone else (it was fenced out).
//! - Liveness rides on the node's heartbeat row: lease rows hold only (owner, epoch), so a
//!   thousand shards cost no renewals. Taking a lease bumps its epoch, which fences out the
//!   previous owner's writes ([`engram_storage::cluster::fence`]).
//!
//! The transport and forwarding live in `node` (this crate knows no network): a request for a
//! shard this node does not hold is refused with [`Error::NotOwner`] and forwarded there.
//! A draining node (status `Draining` in its row, set by [`request_drain`]) takes no shards
//! and hands off all of its own; [`LeaseManager::drained`] resolves when it holds none.
//!
//! Take-over timing. Write H for the heartbeat interval, L for the lease timeout, C for the
//! suspicion confirmation age (`suspect_confirm`, at most L) and S = min(L, C) / 2 for the
//! serving window ([`LeaseSettings::serve_for`]):
//! - A round stamps its heartbeat with the wall clock read at its start, and once it has
//!   completed, the node serves for S from that same start (monotonic clock). A node that
//!   cannot complete a round (storage down, process paused) serves nothing once S has passed.
//! - A peer is presumed dead when its heartbeat is older than L, or older than C while it is
//!   suspected: every transport link between it and this node closed
//!   ([`LeaseManager::suspect`], which `node` calls when its last session with the peer
//!   ends, unless `node` closed it itself for want of an answer; a killed process's
//!   connections close at once). Its shards are then placed over the other members and taken.
//! - Both thresholds are at least 2S, so the old owner stopped serving at least S before the
//!   earliest take-over, by either path. That S is the margin for wall clocks (an age is the
//!   taker's clock minus the owner's stamp) and for the rounds' own delays.
//! - The take transaction re-reads the previous owner's membership row and takes nothing from
//!   it if the row changed since the round read it: an owner that heartbeat in between is
//!   alive and keeps its shards, and one whose heartbeat commits after the take reads the new
//!   lease rows before it confirms a round, so it drops the shards without serving them.
//! - A dropped link alone never causes a take-over: a live peer keeps heartbeating, and C is
//!   more than 2H (the node's configuration checks it), so its heartbeat stays younger than
//!   C. Suspicion only shortens the silence after which a peer is presumed dead from L to C;
//!   it ends when a link to the peer is up again ([`LeaseManager::trust`]).
//! - Whatever the timing, the fence decides: every write re-reads its shard's row inside its
//!   transaction and aborts unless (owner, epoch) is still the writer's.
//!
//! So a killed node's shards are taken about C after its last heartbeat (C + H at worst, plus
//! a round), and a paused or storage-cut node's, whose links stay up, after L + H.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_storage::cluster;
use engram_storage::types::{Member, MemberStatus, ShardLease, Timestamp};
use engram_storage::{Keyspace, Store};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::clock::SharedClock;
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::ownership::{LeaseSettings, Ownership};

/// The owner of `shard` among `nodes` by rendezvous (highest random weight) hashing: the node
/// with the highest hash of (shard, node id); ties go to the smaller id. Deterministic, with
/// no coordinator, and a node joining or leaving moves only the shards it wins or held.
pub fn rendezvous<'a>(shard: u32, nodes: &[&'a str]) -> Option<&'a str> {
    nodes
        .iter()
        .copied()
        .max_by(|a, b| weight(shard, a).cmp(&weight(shard, b)).then(b.cmp(a)))
}

fn weight(shard: u32, node: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let h = shard
        .to_le_bytes()
        .into_iter()
        .chain(node.bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    // splitmix64's finaliser: FNV alone leaves the high bits of short inputs correlated.
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Whether `member` counts as alive at `now`: not left, and its heartbeat younger than the
/// lease timeout. A draining node is alive (its shards are not free until it releases them)
/// but takes no new shards.
pub fn is_live(member: &Member, now: Timestamp, lease_timeout: Duration) -> bool {
    let timeout = i64::try_from(lease_timeout.as_millis()).unwrap_or(i64::MAX);
    member.status != MemberStatus::Left && now.0.saturating_sub(member.heartbeat_at.0) <= timeout
}

/// Asks `node_id` to drain: its next round hands off all its shards, then it exits. Returns
/// the row as changed, or `None` when there is no such member or it already left.
pub async fn request_drain(
    store: &Store,
    keyspace: &Keyspace,
    node_id: &str,
) -> Result<Option<Member>> {
    let (ks, node) = (keyspace.clone(), node_id.to_owned());
    Ok(store
        .run(move |txn| {
            let Some(mut member) = cluster::member(txn, &ks, &node)? else {
                return Ok(None);
            };
            if member.status == MemberStatus::Left {
                return Ok(None);
            }
            member.status = MemberStatus::Draining;
            cluster::put_member(txn, &ks, &member)?;
            Ok(Some(member))
        })
        .await?)
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Live members seen (this node included).
    pub live: usize,
    /// Shards taken.
    pub taken: usize,
    /// Shards of those taken from a peer presumed dead (its lease still named it).
    pub taken_over: usize,
    /// Shards of those taken over early: the peer was suspected and its heartbeat older than
    /// the confirmation age, not yet the lease timeout.
    pub taken_over_early: usize,
    /// Shards handed off.
    pub handed_off: usize,
    /// Shards dropped after being fenced out.
    pub lost: usize,
    /// Shards held after the round.
    pub held: usize,
}

/// Runs the lease protocol of one node.
pub struct LeaseManager {
    settings: LeaseSettings,
    store: Store,
    keyspace: Keyspace,
    clock: SharedClock,
    ownership: Arc<Ownership>,
    directory: Arc<Directory>,
    shards: u32,
    member: Mutex<Member>,
    /// Peers whose every transport link to this node closed, until a link is up again.
    suspects: Mutex<HashSet<String>>,
    drained: tokio::sync::watch::Sender<bool>,
}

/// A shard this round means to take, as the round read it.
struct Claim {
    shard: u32,
    /// Its lease row.
    seen: Option<ShardLease>,
    /// The other node its row names, with that node's membership row: the node presumed dead.
    from: Option<(String, Option<Member>)>,
}

impl std::fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseManager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl LeaseManager {
    /// A manager for the node whose membership row is `member`, serving `directory`'s users
    /// (its services carry the same ownership).
    pub fn new(
        settings: LeaseSettings,
        member: Member,
        directory: Arc<Directory>,
    ) -> Result<Arc<Self>> {
        let services = directory.services();
        let ownership = services.ownership.clone().ok_or_else(|| {
            Error::Internal("a lease manager needs the services' ownership".into())
        })?;
        Ok(Arc::new(LeaseManager {
            store: services.store.clone(),
            keyspace: services.keyspace.clone(),
            clock: services.clock.clone(),
            shards: services.settings.shards,
            settings,
            ownership,
            directory,
            member: Mutex::new(member),
            suspects: Mutex::new(HashSet::new()),
            drained: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// The node's ownership view.
    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    /// Suspects `node`: every transport link between it and this node closed. From the next
    /// round on, its shards are taken as soon as its heartbeat is older than the confirmation
    /// age (`suspect_confirm`) instead of the lease timeout; while it keeps heartbeating,
    /// nothing changes.
    pub fn suspect(&self, node: &str) {
        if node != self.settings.node_id && self.suspects.lock().insert(node.to_owned()) {
            tracing::info!(node = %self.settings.node_id, peer = node, "peer suspected: its links closed");
        }
    }

    /// Ends the suspicion of `node`: a link to it is up again.
    pub fn trust(&self, node: &str) {
        if self.suspects.lock().remove(node) {
            tracing::info!(node = %self.settings.node_id, peer = node, "peer no longer suspected");
        }
    }

    /// One round: heartbeat, read the cluster, hand off, take over, drop what was lost.
    pub async fn round(&self) -> Result<RoundReport> {
        let result = self.try_round().await;
        if result.is_err() {
            self.ownership
                .metrics
                .failed_rounds
                .fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn try_round(&self) -> Result<RoundReport> {
        let started = Instant::now();
        let now = self.clock.now();
        let member = {
            let mut member = self.member.lock();
            member.heartbeat_at = now;
            member.clone()
        };
        let ks = self.keyspace.clone();
        // The heartbeat: one row read and written, so the write lock is held for little.
        let member = self
            .store
            .run(move |txn| {
                let mut member = member.clone();
                // An operator's drain request is recorded in the row: adopt it.
                if cluster::member(txn, &ks, &member.node_id)?
                    .is_some_and(|stored| stored.status == MemberStatus::Draining)
                {
                    member.status = MemberStatus::Draining;
                }
                cluster::put_member(txn, &ks, &member)?;
                Ok(member)
            })
            .await?;
        // Read after the heartbeat committed: it sees every lease this node took before.
        let ks = self.keyspace.clone();
        let (members, leases) = self
            .store
            .read(move |txn| {
                Ok((
                    cluster::members(txn, &ks)?,
                    cluster::shard_leases(txn, &ks)?,
                ))
            })
            .await?;
        let draining = member.status == MemberStatus::Draining;
        if draining && self.member.lock().status != MemberStatus::Draining {
            tracing::info!(node = %member.node_id, "draining: handing off every shard");
        }
        *self.member.lock() = member;
        let me = self.settings.node_id.as_str();
        let lease_timeout = self.settings.lease_timeout;
        // Presumed dead early: suspected, and silent for longer than the confirmation age.
        let early: HashSet<&str> = {
            let suspects = self.suspects.lock();
            members
                .iter()
                .filter(|m| m.node_id != me && suspects.contains(&m.node_id))
                .filter(|m| {
                    is_live(m, now, lease_timeout)
                        && !is_live(m, now, self.settings.suspect_confirm)
                })
                .map(|m| m.node_id.as_str())
                .collect()
        };
        let live: Vec<&str> = members
            .iter()
            .filter(|m| {
                m.node_id == me
                    || (is_live(m, now, lease_timeout) && !early.contains(m.node_id.as_str()))
            })
            .map(|m| m.node_id.as_str())
            .collect();
        // Shards are placed over the live members that take shards: not draining ones.
        let candidates: Vec<&str> = members
            .iter()
            .filter(|m| live.contains(&m.node_id.as_str()))
            .filter(|m| m.status == MemberStatus::Active && !(m.node_id == me && draining))
            .map(|m| m.node_id.as_str())
            .collect();
        let leases: HashMap<u32, ShardLease> = leases.into_iter().collect();
        let mut report = RoundReport {
            live: live.len(),
            ..RoundReport::default()
        };
        let mut gone = Vec::new();

        // Held shards whose row names someone else were fenced out: drop them.
        for (shard, epoch) in self.ownership.snapshot() {
            let still = leases
                .get(&shard)
                .is_some_and(|l| l.epoch == epoch && l.owner.as_deref() == Some(me));
            if !still {
                self.ownership.remove(shard);
                self.directory.stop_shard(shard).await;
                self.ownership.metrics.lost.fetch_add(1, Ordering::Relaxed);
                report.lost += 1;
                gone.push(shard);
            }
        }

        // Hand off what rendezvous now gives another live node: stop serving each and stop
        // its actors (after their queued requests), then release them all in one transaction
        // (one commit, not one a shard, so a scale-out round stays short).
        let leaving: Vec<(u32, u64)> = self
            .ownership
            .snapshot()
            .into_iter()
            .filter(|(shard, _)| rendezvous(*shard, &candidates) != Some(me))
            .collect();
        if !leaving.is_empty() {
            for (shard, _) in &leaving {
                self.ownership.remove(*shard);
                self.directory.stop_shard(*shard).await;
            }
            let (ks, owner, releases) = (self.keyspace.clone(), me.to_owned(), leaving.clone());
            let released = self
                .store
                .run(move |txn| {
                    for (shard, epoch) in &releases {
                        match cluster::release_shard(txn, &ks, *shard, &owner, *epoch) {
                            Ok(()) | Err(engram_storage::Error::Fenced { .. }) => {}
                            Err(err) => return Err(err),
                        }
                    }
                    Ok(())
                })
                .await;
            if let Err(err) = released {
                // Still ours: serve them again (their actors reload) until a round hands
                // them off; one that was taken meanwhile is dropped by the next round.
                for (shard, epoch) in &leaving {
                    self.ownership.insert(*shard, *epoch);
                }
                return Err(err.into());
            }
            self.ownership
                .metrics
                .handed_off
                .fetch_add(leaving.len() as u64, Ordering::Relaxed);
            report.handed_off = leaving.len();
            gone.extend(leaving.iter().map(|(shard, _)| *shard));
        }

        // Take what rendezvous gives this node and nobody alive holds.
        let alive: HashSet<&str> = live.iter().copied().collect();
        let held = self.ownership.snapshot();
        let claims: Vec<Claim> = (0..self.shards)
            .filter(|s| !held.contains_key(s) && rendezvous(*s, &candidates) == Some(me))
            .filter_map(|shard| {
                let seen = leases.get(&shard).cloned();
                let from = seen
                    .as_ref()
                    .and_then(|l| l.owner.clone())
                    .filter(|owner| owner != me);
                if from.as_deref().is_some_and(|owner| alive.contains(owner)) {
                    return None;
                }
                let from = from.map(|owner| {
                    let row = members.iter().find(|m| m.node_id == owner).cloned();
                    (owner, row)
                });
                Some(Claim { shard, seen, from })
            })
            .collect();
        if !claims.is_empty() {
            let taken = self.take(claims, now).await?;
            let mut from_dead: HashMap<&str, usize> = HashMap::new();
            for (shard, epoch, from) in &taken {
                self.ownership.insert(*shard, *epoch);
                if let Some(owner) = from {
                    *from_dead.entry(owner.as_str()).or_default() += 1;
                }
            }
            for (owner, shards) in from_dead {
                let early = early.contains(owner);
                report.taken_over += shards;
                if early {
                    report.taken_over_early += shards;
                }
                let age = members
                    .iter()
                    .find(|m| m.node_id == owner)
                    .map(|m| now.0.saturating_sub(m.heartbeat_at.0));
                tracing::info!(
                    node = me,
                    peer = owner,
                    shards,
                    early,
                    heartbeat_age_ms = age,
                    "took over the shards of a node presumed dead"
                );
            }
            let m = &self.ownership.metrics;
            m.taken.fetch_add(taken.len() as u64, Ordering::Relaxed);
            m.taken_over
                .fetch_add(report.taken_over as u64, Ordering::Relaxed);
            m.taken_over_early
                .fetch_add(report.taken_over_early as u64, Ordering::Relaxed);
            report.taken = taken.len();
        }
        // Serving is confirmed as of the round's start: the heartbeat others see.
        self.ownership.confirm(started);
        let took = started.elapsed();
        if took > self.settings.serve_for() {
            tracing::warn!(
                node = me,
                took_ms = took.as_millis(),
                serve_for_ms = self.settings.serve_for().as_millis(),
                "a lease round outlasted the serving window: this node served nothing meanwhile"
            );
        }
        let mut owners: HashMap<u32, String> = leases
            .iter()
            .filter_map(|(s, l)| Some((*s, l.owner.clone()?)))
            .collect();
        for shard in gone {
            owners.remove(&shard);
        }
        for shard in self.ownership.snapshot().keys() {
            owners.insert(*shard, me.to_owned());
        }
        let live_members = members
            .iter()
            .filter(|m| live.contains(&m.node_id.as_str()))
            .cloned()
            .collect();
        self.ownership.set_view(owners, live_members);
        // Counted before the drain's check reads it: a drained node reports so in the round
        // that handed off its last shard.
        report.held = self.ownership.held();
        if draining && report.held == 0 {
            self.drained.send_replace(true);
        }
        if report.taken + report.handed_off + report.lost > 0 {
            tracing::info!(
                node = me,
                live = report.live,
                taken = report.taken,
                handed_off = report.handed_off,
                lost = report.lost,
                held = report.held,
                "shard leases changed"
            );
        }
        Ok(report)
    }

    /// Takes the `claims` in one transaction: each only if its lease row is as the round read
    /// it and the node it names (if any) has not written its membership row since; an owner
    /// that heartbeat meanwhile is alive after all. Returns the shards taken, their new
    /// epochs and the node each was taken from.
    async fn take(
        &self,
        claims: Vec<Claim>,
        now: Timestamp,
    ) -> Result<Vec<(u32, u64, Option<String>)>> {
        let ks = self.keyspace.clone();
        let me = self.settings.node_id.clone();
        Ok(self
            .store
            .run(move |txn| {
                let mut rows: HashMap<&str, Option<Member>> = HashMap::new();
                let mut taken = Vec::new();
                for claim in &claims {
                    if cluster::shard_lease(txn, &ks, claim.shard)? != claim.seen {
                        continue;
                    }
                    if let Some((owner, seen)) = &claim.from {
                        let row = match rows.get(owner.as_str()) {
                            Some(row) => row.clone(),
                            None => {
                                let row = cluster::member(txn, &ks, owner)?;
                                rows.insert(owner, row.clone());
                                row
                            }
                        };
                        if row != *seen {
                            continue;
                        }
                    }
                    let epoch = cluster::take_shard(txn, &ks, claim.shard, &me, now)?;
                    taken.push((claim.shard, epoch, claim.from.as_ref().map(|f| f.0.clone())));
                }
                Ok(taken)
            })
            .await?)
    }

    /// Resolves once this node was asked to drain and has handed off every shard.
    pub async fn drained(&self) {
        let mut drained = self.drained.subscribe();
        let _ = drained.wait_for(|done| *done).await;
    }

    /// Runs rounds every heartbeat interval until `stop` resolves. A failed round is logged
    /// and retried at the next tick; the ownership view goes stale on its own.
    pub async fn run(self: Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        let mut stop = stop;
        let mut tick = tokio::time::interval(self.settings.heartbeat_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(err) = self.round().await {
                        tracing::warn!(node = %self.settings.node_id, error = %err, "lease round failed");
                    }
                }
                _ = stop.changed() => break,
            }
        }
    }

    /// Stops serving, stops every user actor, releases every held lease (so other nodes take
    /// the shards at once rather than after the lease timeout) and marks this node left.
    pub async fn leave(&self, timeout: Duration) -> Result<()> {
        self.ownership.suspend();
        self.directory.shutdown(timeout).await;
        let held = self.ownership.snapshot();
        for shard in held.keys() {
            self.ownership.remove(*shard);
        }
        let ks = self.keyspace.clone();
        let owner = self.settings.node_id.clone();
        let member = {
            let mut member = self.member.lock();
            member.heartbeat_at = self.clock.now();
            member.status = MemberStatus::Left;
            member.clone()
        };
        self.store
            .run(move |txn| {
                for (shard, epoch) in &held {
                    match cluster::release_shard(txn, &ks, *shard, &owner, *epoch) {
                        Ok(()) | Err(engram_storage::Error::Fenced { .. }) => {}
                        Err(err) => return Err(err),
                    }
                }
                cluster::put_member(txn, &ks, &member)
            })
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
