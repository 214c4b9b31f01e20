//! `last_accessed_at` without a write per read: the memories a context or a search served
//! are remembered in the user's actor and written in one fenced transaction at the actor's
//! next tick, before a sweep of the user, before it passivates or is evicted, or once
//! [`FLUSH_AT`] of them are waiting. At a tick and at [`FLUSH_AT`] the write runs in a task of
//! its own while the actor goes on serving (a read does not wait for another read's access
//! times to commit); before a sweep, a passivation or an eviction the actor waits for it.
//! The time is advisory (for operators and the console): a flush that fails, or one lost
//! with a killed process, loses only access times.

use std::collections::HashMap;

use engram_storage::data::UserData;
use engram_storage::types::{MemoryKind, Timestamp};
use tokio::task::JoinHandle;

use super::txn::run_fenced;
use crate::error::Result;
use crate::model::context::MemoryContext;
use crate::model::index::MemoryIndex;
use crate::ownership::Lease;
use crate::placement::UserKey;
use crate::services::Services;

/// Served memories waiting that make the actor flush at once.
pub const FLUSH_AT: usize = 256;

/// Memory ids and the times they were served, as a flush writes them.
type Times = Vec<(String, Timestamp)>;

/// Memory ids served and not yet written, with the last time each was served, and the flush
/// running off the actor, if one is.
#[derive(Debug, Default)]
pub struct Accessed {
    waiting: HashMap<String, Timestamp>,
    /// Yields the times it wrote once committed (`None` if it wrote nothing).
    flight: Option<JoinHandle<Option<Times>>>,
}

impl Accessed {
    /// Notes `ids` as served at `at`.
    pub fn note<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>, at: Timestamp) {
        for id in ids {
            self.waiting.insert(id.to_owned(), at);
        }
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Forgets them all (the user was forgotten). A flush already running finds nothing of
    /// a forgotten user to write.
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.flight = None;
    }
}

/// The memory ids a context shows.
pub fn shown_in(ctx: &MemoryContext) -> impl Iterator<Item = &str> {
    ctx.profile
        .iter()
        .chain(&ctx.episodic)
        .chain(&ctx.corrections)
        .map(|m| m.memory_id.as_str())
}

/// Whose access times a flush writes: the services it writes through, the user, and the
/// lease that fences the write (or why this node may not write the user now).
pub struct Target {
    /// The node's services.
    pub services: Services,
    /// The user.
    pub key: UserKey,
    /// The user's shard's lease.
    pub lease: Result<Option<Lease>>,
}

impl Accessed {
    /// Starts writing the access times waiting in a task of its own, so that the actor goes
    /// on serving while it commits. One flush runs at a time: while one does, what is served
    /// meanwhile waits for the next. `index` is the user's cache, marked as the times commit.
    pub async fn flush_behind(
        &mut self,
        index: &mut MemoryIndex,
        mut target: impl FnMut() -> Target,
    ) {
        self.settle(index, false).await;
        if self.flight.is_none()
            && let Some(write) = self.write(index, &mut target)
        {
            self.flight = Some(tokio::spawn(write));
        }
    }

    /// Writes the access times waiting and waits for the write, after the flush already
    /// running, if one is.
    pub async fn flush(&mut self, index: &mut MemoryIndex, mut target: impl FnMut() -> Target) {
        self.settle(index, true).await;
        if let Some(write) = self.write(index, &mut target) {
            let written = write.await;
            mark_written(index, written);
        }
    }

    /// Takes the times of the flush running off the actor into the cache once it has
    /// committed: if it has finished, or after waiting for it if `wait`.
    async fn settle(&mut self, index: &mut MemoryIndex, wait: bool) {
        let Some(flight) = self.flight.take_if(|f| wait || f.is_finished()) else {
            return;
        };
        // A flush whose task failed wrote nothing to mark.
        let written = flight.await.ok().flatten();
        mark_written(index, written);
    }

    /// The write of the access times waiting, in one fenced transaction (a record gone or
    /// accessed later meanwhile is left as it is), yielding them once committed; `None` if
    /// none wait or the user's shard is not held.
    fn write(
        &mut self,
        index: &MemoryIndex,
        target: &mut dyn FnMut() -> Target,
    ) -> Option<impl Future<Output = Option<Times>> + Send + 'static + use<>> {
        if self.is_empty() {
            return None;
        }
        let waiting: Vec<(MemoryKind, String, Timestamp)> = std::mem::take(&mut self.waiting)
            .into_iter()
            .filter_map(|(id, at)| index.get(&id).map(|r| (r.kind, id, at)))
            .collect();
        let Target {
            services,
            key,
            lease,
        } = target();
        let lease = match lease {
            Ok(lease) => lease,
            Err(err) => {
                tracing::debug!(user = %services.log_id(&key), %err, "access times not written");
                return None;
            }
        };
        Some(async move {
            let (ks, in_txn) = (services.keyspace.clone(), waiting.clone());
            let user = key.clone();
            let written = run_fenced(&services, &key, lease, move |txn| {
                let mut u = UserData::new(txn, &ks, &user.tenant, &user.user);
                for (kind, id, at) in &in_txn {
                    if let Some(mut record) = u.record(*kind, id)?
                        && record.last_accessed_at.is_none_or(|seen| seen < *at)
                    {
                        record.last_accessed_at = Some(*at);
                        u.put_record(&record)?;
                    }
                }
                Ok(())
            })
            .await;
            match written {
                Ok(()) => Some(waiting.into_iter().map(|(_, id, at)| (id, at)).collect()),
                Err(err) => {
                    tracing::debug!(user = %services.log_id(&key), %err, "access times not written");
                    None
                }
            }
        })
    }
}

fn mark_written(index: &mut MemoryIndex, written: Option<Times>) {
    for (id, at) in written.into_iter().flatten() {
        index.mark_accessed(&id, at);
    }
}
