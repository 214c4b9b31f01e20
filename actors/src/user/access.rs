//! `last_accessed_at` without a write per read: the memories a context or a search served
//! are remembered in the user's actor and written in one fenced transaction at the actor's
//! next tick, before a sweep of the user, before it passivates or is evicted, or once
//! [`FLUSH_AT`] of them are waiting.
//! The time is advisory (for operators and the console): a flush that fails, or one lost
//! with a killed process, loses only access times.

use std::collections::HashMap;

use engram_storage::data::UserData;
use engram_storage::model::Timestamp;

use super::UserState;
use crate::model::context::MemoryContext;

/// Served memories waiting that make the actor flush at once.
pub const FLUSH_AT: usize = 256;

/// Memory ids served and not yet written, with the last time each was served.
#[derive(Debug, Default)]
pub struct Accessed(HashMap<String, Timestamp>);

impl Accessed {
    /// Notes `ids` as served at `at`.
    pub fn note<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>, at: Timestamp) {
        for id in ids {
            self.0.insert(id.to_owned(), at);
        }
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none wait.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets them all (the user was forgotten).
    pub fn clear(&mut self) {
        self.0.clear();
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

impl UserState {
    /// Writes the access times waiting, in one fenced transaction (a record gone or accessed
    /// later meanwhile is left as it is), then in the cache.
    pub(super) async fn flush_access(&mut self) {
        if self.accessed.is_empty() {
            return;
        }
        let waiting: Vec<_> = std::mem::take(&mut self.accessed.0)
            .into_iter()
            .filter_map(|(id, at)| self.index.get(&id).map(|r| (r.kind, id, at)))
            .collect();
        let (services, key) = self.scope_parts();
        let ks = services.keyspace.clone();
        let lease = match self.lease() {
            Ok(lease) => lease,
            Err(err) => {
                tracing::debug!(user = %self.args.services.log_id(&self.args.key), %err, "access times not written");
                return;
            }
        };
        let in_txn = waiting.clone();
        let written = self
            .run(lease, move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
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
            Ok(()) => {
                for (_, id, at) in waiting {
                    self.index.mark_accessed(&id, at);
                }
            }
            Err(err) => {
                tracing::debug!(user = %self.args.services.log_id(&self.args.key), %err, "access times not written");
            }
        }
    }
}
