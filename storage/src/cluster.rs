//! Cluster bookkeeping in storage: membership rows, shard lease rows, and the fence that
//! every write transaction of a shard passes.
//!
//! Policy (who should own what, when a lease may be taken) lives in `actors`; this module
//! only reads and writes the rows, in the caller's transaction.

use crate::codec::{decode, encode};
use crate::error::{Error, Result};
use crate::keyspace::Keyspace;
use crate::kv::{RangeOptions, Txn};
use crate::types::{Member, ShardLease, Timestamp};

/// The lease row of `shard`, if it was ever taken.
pub fn shard_lease(txn: &mut Txn, keyspace: &Keyspace, shard: u32) -> Result<Option<ShardLease>> {
    txn.get(&keyspace.shard(shard))?
        .map(|v| decode("shard lease", &v))
        .transpose()
}

/// Every lease row, by shard (shards never taken have none).
pub fn shard_leases(txn: &mut Txn, keyspace: &Keyspace) -> Result<Vec<(u32, ShardLease)>> {
    let range = keyspace.shards();
    let rows = txn.get_range(&range.begin, &range.end, RangeOptions::default())?;
    rows.iter()
        .map(|(k, v)| {
            let shard = keyspace.parse_shard(k).ok_or_else(|| Error::Decode {
                what: "shard lease key",
                reason: "not a shard key".into(),
            })?;
            Ok((shard, decode("shard lease", v)?))
        })
        .collect()
}

/// Makes `owner` the holder of `shard` with the next epoch, and returns that epoch.
/// The caller decides whether taking it is allowed (the previous owner released it or its
/// heartbeat is stale); the epoch bump fences out the previous owner's writes.
pub fn take_shard(
    txn: &mut Txn,
    keyspace: &Keyspace,
    shard: u32,
    owner: &str,
    now: Timestamp,
) -> Result<u64> {
    let epoch = shard_lease(txn, keyspace, shard)?.map_or(0, |l| l.epoch) + 1;
    let lease = ShardLease {
        owner: Some(owner.to_owned()),
        epoch,
        acquired_at: now,
    };
    txn.set(&keyspace.shard(shard), &encode("shard lease", &lease)?)?;
    Ok(epoch)
}

/// Releases `shard` if `owner` holds it at `epoch` (a clean hand-off); the epoch stays so
/// that the next taker bumps past it. Fails with [`Error::Fenced`] otherwise.
pub fn release_shard(
    txn: &mut Txn,
    keyspace: &Keyspace,
    shard: u32,
    owner: &str,
    epoch: u64,
) -> Result<()> {
    let mut lease = fence(txn, keyspace, shard, owner, epoch)?;
    lease.owner = None;
    txn.set(&keyspace.shard(shard), &encode("shard lease", &lease)?)
}

/// Checks, inside a write transaction, that `owner` still holds `shard` at `epoch`.
///
/// Reading the row puts it in the transaction's read set, so a concurrent take-over either
/// commits before this read (and the check fails) or conflicts with this transaction (and it
/// retries and then fails): two nodes that both believe they own a shard cannot both commit.
/// On failure the caller's closure returns the error and nothing it wrote is committed.
pub fn fence(
    txn: &mut Txn,
    keyspace: &Keyspace,
    shard: u32,
    owner: &str,
    epoch: u64,
) -> Result<ShardLease> {
    let lease = shard_lease(txn, keyspace, shard)?;
    match lease {
        Some(lease) if lease.epoch == epoch && lease.owner.as_deref() == Some(owner) => Ok(lease),
        Some(lease) => Err(Error::Fenced {
            shard,
            epoch,
            holder: lease.owner,
            holder_epoch: lease.epoch,
        }),
        None => Err(Error::Fenced {
            shard,
            epoch,
            holder: None,
            holder_epoch: 0,
        }),
    }
}

/// Writes a node's membership row (registration and heartbeats).
pub fn put_member(txn: &mut Txn, keyspace: &Keyspace, member: &Member) -> Result<()> {
    txn.set(&keyspace.node(&member.node_id), &encode("member", member)?)
}

/// One node's membership row.
pub fn member(txn: &mut Txn, keyspace: &Keyspace, node_id: &str) -> Result<Option<Member>> {
    txn.get(&keyspace.node(node_id))?
        .map(|v| decode("member", &v))
        .transpose()
}

/// Every membership row, by node id.
pub fn members(txn: &mut Txn, keyspace: &Keyspace) -> Result<Vec<Member>> {
    let range = keyspace.nodes();
    let rows = txn.get_range(&range.begin, &range.end, RangeOptions::default())?;
    rows.iter().map(|(_, v)| decode("member", v)).collect()
}

#[cfg(test)]
mod tests;
