//! A user's transactions: every write is fenced by the lease of the user's shard and records
//! its request id in the same transaction (a retry replays the stored acknowledgement); the
//! actor's index is updated after the commit, and the pipeline told of the texts it queued.

use std::sync::Arc;

use engram_storage::data::UserData;
use engram_storage::types::{IdempotencyEntry, MemoryKind, MemoryRecord, WrittenUnder};

use super::ops::{Outcome, Prepared, WriteScope, session_rule};
use super::{Replayable, UserArgs, UserState};
use crate::error::{Error, Result};
use crate::ownership::fenced_write;
use crate::placement::UserKey;
use crate::services::Services;

pub(super) use crate::ownership::Lease;

pub(super) fn written_under(lease: Option<&Lease>) -> Option<WrittenUnder> {
    lease.map(|(ownership, epoch)| WrittenUnder {
        node: ownership.node().to_owned(),
        epoch: *epoch,
    })
}

/// Runs a write transaction of `key`'s user, fenced by `lease` (see [`UserState::run`]); for
/// writes that run off the actor, such as the access times'.
pub(super) async fn run_fenced<T, F>(
    services: &Services,
    key: &UserKey,
    lease: Option<Lease>,
    body: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnMut(&mut engram_storage::Txn) -> engram_storage::Result<T> + Send + 'static,
{
    let shard = key.shard(services.settings.shards);
    let written = fenced_write(&services.store, &services.keyspace, shard, lease, body).await;
    if let Err(Error::NotOwner(_)) = &written {
        tracing::warn!(user = %services.log_id(key), shard, "write fenced: the shard moved");
    }
    written
}

enum Written<T> {
    Fresh(T, Vec<MemoryRecord>),
    Replay(T),
    Rejected(Error),
}

impl UserState {
    pub(super) fn scope_parts(&self) -> (Services, UserKey) {
        (self.args.services.clone(), self.args.key.clone())
    }

    /// Runs a write as one transaction that first checks and then records the request id.
    /// `turn` is the (session, text) of the turn the write appends, for the episodic memory
    /// it forms.
    pub(super) async fn write<T, F>(
        &mut self,
        request_id: &str,
        prepared: Prepared,
        turn: Option<String>,
        mut body: F,
    ) -> Result<T>
    where
        T: Replayable,
        F: FnMut(&mut UserData<'_>, &WriteScope<'_>) -> Outcome<T> + Send + 'static,
    {
        let (services, key) = self.scope_parts();
        let now = services.clock.now();
        let rule = session_rule(services.settings.retention_ms);
        let request_id = request_id.to_owned();
        let ks = services.keyspace.clone();
        let prepared = Arc::new(prepared);
        let in_txn = Arc::clone(&prepared);
        let lease = self.lease()?;
        let under = written_under(lease.as_ref());
        let caller = self.caller.clone();
        let written = self
            .run(lease, move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                let seen = match u.idempotency_of(&caller, &request_id)? {
                    Some(entry) => Some(entry),
                    None => u.idempotency(&request_id)?,
                };
                if let Some(entry) = seen {
                    return Ok(match replayed::<T>(&entry.response) {
                        Ok(mut ack) => {
                            super::replay::refresh(&mut u, &mut ack)?;
                            Written::Replay(ack)
                        }
                        Err(err) => Written::Rejected(err),
                    });
                }
                let scope = WriteScope {
                    tenant: &key.tenant,
                    user: &key.user,
                    now,
                    rule,
                    prepared: &in_txn,
                    lease: under.clone(),
                };
                match body(&mut u, &scope)? {
                    Ok((ack, changed)) => {
                        let response = stored_reply(&super::replay::stored(&ack))?;
                        let entry = IdempotencyEntry { at: now, response };
                        u.put_idempotency_of(&caller, &request_id, &entry)?;
                        Ok(Written::Fresh(ack, changed))
                    }
                    Err(rejection) => Ok(Written::Rejected(rejection)),
                }
            })
            .await?;
        match written {
            Written::Fresh(ack, changed) => {
                let queued = prepared.write_behind && !changed.is_empty();
                self.cache(changed, turn.as_deref(), &prepared);
                if queued && let Some(pipeline) = &self.args.services.pipeline {
                    pipeline.notify(&self.args.key, now);
                }
                if prepared.distil_queued
                    && let Some(lane) = self
                        .args
                        .services
                        .distillation
                        .as_ref()
                        .and_then(|d| d.pipeline.as_ref())
                {
                    lane.notify(&self.args.key, now);
                }
                Ok(ack)
            }
            Written::Replay(mut ack) => {
                ack.mark_replayed();
                Ok(ack)
            }
            Written::Rejected(err) => Err(err),
        }
    }

    /// The lease this node holds on the user's shard now (`None` without leases).
    pub(super) fn lease(&self) -> Result<Option<Lease>> {
        lease_of(&self.args)
    }

    /// Runs a write transaction of this user, fenced: it first checks that this node still
    /// holds the user's shard at the epoch it was given, and aborts otherwise, so a node that
    /// lost the shard (paused past its lease, partitioned) commits nothing.
    pub(super) async fn run<T, F>(&self, lease: Option<Lease>, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut engram_storage::Txn) -> engram_storage::Result<T> + Send + 'static,
    {
        run_fenced(&self.args.services, &self.args.key, lease, body).await
    }

    /// Runs a read-only transaction on the user's data.
    pub(super) async fn read<T, F>(&self, mut body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut UserData<'_>) -> engram_storage::Result<T> + Send + 'static,
    {
        let (services, key) = self.scope_parts();
        let ks = services.keyspace.clone();
        Ok(services
            .store
            .read(move |txn| body(&mut UserData::new(txn, &ks, &key.tenant, &key.user)))
            .await?)
    }

    /// Updates the index with committed records: an episodic memory formed from `turn_text`
    /// is indexed by it; a record is given the vector `prepared` holds for the text it is
    /// indexed by (others keep theirs).
    pub(super) fn cache(
        &mut self,
        changed: Vec<MemoryRecord>,
        turn_text: Option<&str>,
        prepared: &Prepared,
    ) {
        let extractor = Arc::clone(&self.args.services.extractor);
        for record in changed {
            let text = if record.kind == MemoryKind::Episodic {
                turn_text
                    .filter(|_| self.index.get(&record.memory_id).is_none())
                    .map(str::to_owned)
            } else {
                // Indexed by its summary, as it is now (a rewrite changes it).
                Some(record.summary_text.clone())
            };
            let vector = prepared
                .vectors
                .get(text.as_deref().unwrap_or(&record.summary_text))
                .cloned();
            if let Err(err) = self
                .index
                .upsert(&extractor, record.clone(), text.clone(), vector)
            {
                tracing::warn!(user = %self.args.services.log_id(&self.args.key), error = %err, "embedding refused by the index");
                let _ = self.index.upsert(&extractor, record, text, None);
            }
        }
        if self.index.needs_maintenance() {
            // A large user's graph has too many tombstones: rebuild it without stalling the
            // runtime's other tasks (this actor waits; its writes are serialised anyway).
            let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
            if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
                tokio::task::block_in_place(|| self.index.maintain());
            } else {
                self.index.maintain();
            }
        }
    }
}

/// The format of stored replies this build writes.
const REPLY_FORMAT: u32 = 1;

/// A stored reply: the kind of request it acknowledges, the format, and the acknowledgement
/// as JSON (self-describing, so fields added later with defaults still read).
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredReply {
    kind: String,
    format: u32,
    ack: serde_json::Value,
}

pub(crate) fn stored_reply<T: Replayable>(ack: &T) -> engram_storage::Result<Vec<u8>> {
    let encode_error = |e: serde_json::Error| engram_storage::Error::Encode {
        what: "acknowledgement",
        reason: e.to_string(),
    };
    let stored = StoredReply {
        kind: T::KIND.to_owned(),
        format: REPLY_FORMAT,
        ack: serde_json::to_value(ack).map_err(encode_error)?,
    };
    serde_json::to_vec(&stored).map_err(encode_error)
}

/// The acknowledgement a retried request replays. A reply stored for another kind of request
/// means the id was reused: refused. A reply of this kind that this build cannot read is
/// ours (500), not the client's. Replies stored before replies carried their kind are read
/// as they are.
pub(crate) fn replayed<T: Replayable>(bytes: &[u8]) -> Result<T> {
    let reused = || Error::invalid("request_id", "already used for a different request");
    match serde_json::from_slice::<StoredReply>(bytes) {
        Ok(stored) if stored.kind != T::KIND => Err(reused()),
        Ok(stored) => serde_json::from_value(stored.ack).map_err(|e| {
            Error::Internal(format!(
                "a stored {} reply (format {}) does not read: {e}",
                T::KIND,
                stored.format
            ))
        }),
        Err(_) => serde_json::from_slice(bytes).map_err(|_| reused()),
    }
}

/// The lease of `args`' user's shard, if this node holds it (`None` where no ownership
/// fences the writes).
pub(super) fn lease_of(args: &UserArgs) -> Result<Option<Lease>> {
    let services = &args.services;
    let shard = args.key.shard(services.settings.shards);
    Ok(match &services.ownership {
        Some(ownership) => Some((Arc::clone(ownership), ownership.lease(shard)?)),
        None => None,
    })
}

#[cfg(test)]
mod tests;
