//! A user's idempotency entries: the stored acknowledgement of each write, by the key that
//! made it and its request id, read by a retry and pruned after the retention.

use super::{UserData, open_with};
use crate::error::Result;
use crate::types::{IdempotencyEntry, Timestamp};

impl UserData<'_> {
    /// The stored outcome of an acknowledged request, if it was seen before.
    pub fn idempotency(&mut self, request_id: &str) -> Result<Option<IdempotencyEntry>> {
        self.get("idempotency entry", &self.keys.idempotency(request_id))
    }

    /// Records the outcome of a request, in the same transaction as its effects, under the
    /// request id alone (as entries were written before they were scoped to keys; for tests
    /// of reading those).
    pub fn put_idempotency(&mut self, request_id: &str, entry: &IdempotencyEntry) -> Result<()> {
        self.put(
            "idempotency entry",
            &self.keys.idempotency(request_id),
            entry,
        )
    }

    /// The stored outcome of a request that key `principal` made, if it was seen before.
    pub fn idempotency_of(
        &mut self,
        principal: &str,
        request_id: &str,
    ) -> Result<Option<IdempotencyEntry>> {
        self.get(
            "idempotency entry",
            &self.keys.idempotency_of(principal, request_id),
        )
    }

    /// Records the outcome of a request key `principal` made, in the same transaction as its
    /// effects.
    pub fn put_idempotency_of(
        &mut self,
        principal: &str,
        request_id: &str,
        entry: &IdempotencyEntry,
    ) -> Result<()> {
        self.put(
            "idempotency entry",
            &self.keys.idempotency_of(principal, request_id),
            entry,
        )
    }

    /// Reads up to `limit` of this user's idempotency entries after the key `after` (from the
    /// start when `None`) and removes those recorded before `before`. Returns how many it
    /// removed and the key to go on from (`None`: the range ended). Bounded reads, so pruning
    /// never exceeds a transaction's limits however many entries there are.
    pub fn prune_idempotency_page(
        &mut self,
        after: Option<&[u8]>,
        limit: usize,
        before: Timestamp,
    ) -> Result<(usize, Option<Vec<u8>>)> {
        let range = self.keys.idempotencies();
        self.load_data_key(false)?;
        let (txn, data_key) = (&mut *self.txn, self.data_key.as_ref());
        crate::idempotency::prune_page(txn, range, after, limit, before, |key, value| {
            open_with(data_key, "idempotency entry", key, value)
        })
    }
}
