//! The tenant actor's transactions and upkeep: fenced writes with their request ids, the
//! sweep of what expired, the last uses of served examples, and reading entries again after a
//! write this actor did not apply.

use std::sync::Arc;

use engram_storage::shared::TenantData;
use engram_storage::types::{IdempotencyEntry, Timestamp};

use super::{IDEMPOTENCY_MS, SWEEP_BATCH, TenantState, examples};
use crate::error::Result;
use crate::ownership::{Lease, fenced_write};
use crate::user::Replayable;
use crate::user::txn::{replayed, stored_reply};

impl TenantState {
    /// The lease this node holds on the tenant's shard now (`None` without leases).
    pub(super) fn lease(&self) -> Result<Option<Lease>> {
        let services = &self.args.services;
        let shard = self.args.key.shard(services.settings.shards);
        Ok(match &services.ownership {
            Some(ownership) => Some((Arc::clone(ownership), ownership.lease(shard)?)),
            None => None,
        })
    }

    /// Runs a write of the shared sets as one transaction fenced by the tenant shard's lease.
    pub(super) async fn run<T, F>(&self, mut body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut TenantData<'_>) -> engram_storage::Result<T> + Send + 'static,
    {
        let services = &self.args.services;
        let shard = self.args.key.shard(services.settings.shards);
        let (ks, tenant) = (services.keyspace.clone(), self.tenant().to_owned());
        fenced_write(
            &services.store,
            &services.keyspace,
            shard,
            self.lease()?,
            move |txn| body(&mut TenantData::new(txn, &ks, &tenant)),
        )
        .await
    }

    /// The stored answer of `request_id`, marked replayed, if it was written before.
    pub(super) async fn replayed_answer<T: Replayable>(
        &self,
        request_id: &str,
    ) -> Result<Option<T>> {
        let (ks, tenant, id) = (
            self.args.services.keyspace.clone(),
            self.tenant().to_owned(),
            request_id.to_owned(),
        );
        let stored = self
            .args
            .services
            .store
            .read(move |txn| TenantData::new(txn, &ks, &tenant).idempotency(&id))
            .await?;
        stored
            .map(|entry| {
                let mut ack: T = replayed(&entry.response)?;
                ack.mark_replayed();
                Ok(ack)
            })
            .transpose()
    }

    /// Runs an idempotent write: a retry of `request_id` replays the stored answer; a
    /// rejection (the inner error) writes nothing.
    pub(super) async fn write<T, F>(&self, request_id: &str, mut body: F) -> Result<T>
    where
        T: Replayable + Clone,
        F: FnMut(&mut TenantData<'_>, Timestamp) -> engram_storage::Result<Result<T>>
            + Send
            + 'static,
    {
        crate::user::check_id("request_id", request_id)?;
        let now = self.now();
        let request_id = request_id.to_owned();
        let outcome = self
            .run(move |t| {
                if let Some(entry) = t.idempotency(&request_id)? {
                    return Ok(Err(entry.response));
                }
                match body(t, now)? {
                    Ok(ack) => {
                        let response = stored_reply(&ack)?;
                        t.put_idempotency(&request_id, &IdempotencyEntry { at: now, response })?;
                        Ok(Ok(Ok(ack)))
                    }
                    Err(rejection) => Ok(Ok(Err(rejection))),
                }
            })
            .await?;
        match outcome {
            Ok(result) => result,
            Err(bytes) => {
                let mut ack: T = replayed(&bytes)?;
                ack.mark_replayed();
                Ok(ack)
            }
        }
    }

    /// Removes what expired (SQL entries, unused examples, old idempotency entries), at most
    /// [`SWEEP_BATCH`] of each a transaction and until nothing is left, and writes the last
    /// uses of served examples.
    pub(super) async fn sweep(&mut self) -> Result<()> {
        self.flush_used().await?;
        loop {
            let now = self.now();
            let mut sql: Vec<String> = self
                .sql
                .values()
                .filter(|e| e.expires_at <= now)
                .map(|e| e.id.clone())
                .take(SWEEP_BATCH)
                .collect();
            let room = SWEEP_BATCH - sql.len();
            sql.extend(self.stale_sql.drain(..room.min(self.stale_sql.len())));
            let mut examples: Vec<String> = self
                .examples
                .values()
                .filter(|e| examples::expired(e, now))
                .map(|e| e.id.clone())
                .take(SWEEP_BATCH)
                .collect();
            let room = SWEEP_BATCH - examples.len();
            examples.extend(
                self.stale_examples
                    .drain(..room.min(self.stale_examples.len())),
            );
            if sql.is_empty() && examples.is_empty() {
                break;
            }
            let (s, x) = (sql.clone(), examples.clone());
            self.run(move |t| {
                for id in &s {
                    t.delete_sql_entry(id)?;
                }
                for id in &x {
                    t.delete_example(id)?;
                }
                Ok(())
            })
            .await?;
            for id in &sql {
                self.uncache_sql(id);
            }
            for id in &examples {
                self.uncache_example(id);
            }
            tracing::debug!(tenant = %self.tenant(), sql = sql.len(), examples = examples.len(), "expired shared entries removed");
        }
        self.sql_index.maintain();
        self.example_index.maintain();
        // Old idempotency entries: a bounded page a transaction, from where the last sweep
        // stopped, until the range ends.
        let before = self.now().plus_millis(-IDEMPOTENCY_MS);
        loop {
            let after = self.idempotency_cursor.take();
            let (_, next) = self
                .run(move |t| t.prune_idempotency_page(after.as_deref(), SWEEP_BATCH, before))
                .await?;
            self.idempotency_cursor = next;
            if self.idempotency_cursor.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Writes the last uses of the examples served since the last flush, [`SWEEP_BATCH`] a
    /// transaction; what a failed transaction did not write is kept for the next flush.
    pub(super) async fn flush_used(&mut self) -> Result<()> {
        while !self.used.is_empty() {
            let batch: Vec<(String, Timestamp)> = self
                .used
                .iter()
                .take(SWEEP_BATCH)
                .map(|(id, at)| (id.clone(), *at))
                .collect();
            let stamps = batch.clone();
            self.run(move |t| {
                for (id, at) in &stamps {
                    if let Some(mut example) = t.example(id)?
                        && example.last_used_at < *at
                    {
                        example.last_used_at = *at;
                        t.put_example(&example)?;
                    }
                }
                Ok(())
            })
            .await?;
            for (id, at) in batch {
                if self.used.get(&id) == Some(&at) {
                    self.used.remove(&id);
                }
            }
        }
        Ok(())
    }

    /// Reads SQL cache entries again from storage into the cache: after a write whose outcome
    /// this actor did not apply (a replay, or an error after which the commit is unknown).
    pub(super) async fn refresh_sql(&mut self, ids: Vec<String>) {
        let read = |t: &mut TenantData<'_>, id: &str| t.sql_entry(id);
        self.refresh(ids, read, Self::cache_sql, Self::uncache_sql)
            .await;
    }

    /// Reads few-shot examples again from storage into the cache (see [`Self::refresh_sql`]).
    pub(super) async fn refresh_examples(&mut self, ids: Vec<String>) {
        let read = |t: &mut TenantData<'_>, id: &str| t.example(id);
        self.refresh(ids, read, Self::cache_example, Self::uncache_example)
            .await;
    }

    /// Reads `ids` of one set with `read` and caches what is stored (`cache`) or forgets what
    /// is not (`uncache`). When the read fails the outcome is unknown: none of them is served
    /// rather than a stale one.
    async fn refresh<T: Send + 'static>(
        &mut self,
        ids: Vec<String>,
        read: fn(&mut TenantData<'_>, &str) -> engram_storage::Result<Option<T>>,
        cache: fn(&mut Self, T),
        uncache: fn(&mut Self, &str),
    ) {
        let (ks, tenant) = (
            self.args.services.keyspace.clone(),
            self.tenant().to_owned(),
        );
        let wanted = ids.clone();
        let found = self
            .args
            .services
            .store
            .read(move |txn| {
                let mut t = TenantData::new(txn, &ks, &tenant);
                wanted
                    .iter()
                    .map(|id| read(&mut t, id))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await;
        match found {
            Ok(found) => {
                for (id, stored) in ids.iter().zip(found) {
                    match stored {
                        Some(stored) => cache(self, stored),
                        None => uncache(self, id),
                    }
                }
            }
            Err(err) => {
                tracing::warn!(tenant = %self.tenant(), error = %err, "shared entries not read again; dropped from the cache");
                for id in &ids {
                    uncache(self, id);
                }
            }
        }
    }
}
