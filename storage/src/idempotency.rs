//! Pruning idempotency entries (a write's stored reply), shared by the users' and the
//! tenants' shared sets' keyspaces: a page of entries at a time, so that a sweep never
//! exceeds a transaction's limits however many entries there are.

use crate::error::Result;
use crate::keyspace::KeyRange;
use crate::kv::{RangeOptions, Txn};
use crate::types::{IdempotencyEntry, Timestamp};

/// Reads up to `limit` entries of `range` after the key `after` (from the start when `None`),
/// each opened with `open(key, value)`, and removes those recorded before `before`. Returns
/// how many it removed and the key to go on from (`None`: the range ended).
pub(crate) fn prune_page(
    txn: &mut Txn,
    range: KeyRange,
    after: Option<&[u8]>,
    limit: usize,
    before: Timestamp,
    mut open: impl FnMut(&[u8], &[u8]) -> Result<IdempotencyEntry>,
) -> Result<(usize, Option<Vec<u8>>)> {
    let begin = match after {
        Some(after) => [after, &[0u8]].concat(),
        None => range.begin,
    };
    let rows = txn.get_range(&begin, &range.end, RangeOptions::first(limit))?;
    let next = (rows.len() == limit && limit > 0).then(|| rows[rows.len() - 1].0.clone());
    let mut removed = 0;
    for (key, value) in rows {
        if open(&key, &value)?.at < before {
            txn.clear(&key)?;
            removed += 1;
        }
    }
    Ok((removed, next))
}
