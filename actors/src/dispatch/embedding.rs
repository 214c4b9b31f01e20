//! One round of the pipeline: read the pending entries of a few users, embed them (one pool
//! call per tenant, in the background class), store the users' vectors in one transaction
//! that fences each user's shard on its own, and hand the stored ones to the users' actors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use engram_storage::data::UserData;
use engram_storage::data::pending::{Completion, Pending};
use engram_storage::types::{Embedding, PendingInference, Timestamp};
use tokio::task::JoinSet;

use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::ownership::{fenced_write, fenced_write_each};
use crate::pipeline::{PipelineConfig, PipelineMetrics};
use crate::placement::UserKey;
use crate::user::{EmbeddedText, UserMsg};

/// How a round ended, for the dispatcher's queue.
#[derive(Debug, Default)]
pub(crate) struct RoundOutcome {
    /// Users done with, and when their entries left over (if any) were queued.
    pub(crate) finished: Vec<(UserKey, Option<Timestamp>)>,
    /// Users whose shard this node does not serve (now): dropped from memory.
    pub(crate) not_served: Vec<UserKey>,
    /// Whether the pool refused part of the round (back off a little).
    pub(crate) refused: bool,
}

/// A user's part of the round.
pub(super) struct Part<P = PendingInference> {
    pub(super) key: UserKey,
    pub(super) since: Timestamp,
    /// The lease it is written under (`None`: no leases).
    pub(super) epoch: Option<u64>,
    pub(super) entries: Vec<(String, P)>,
    /// Whether it has more entries than the round took (the rest are found when its
    /// transaction settles its mark).
    pub(super) more: bool,
}

/// Runs one round for `users` (as the queue gave them, each with when its oldest entry was
/// queued).
pub(crate) async fn run(
    directory: &Arc<Directory>,
    config: &PipelineConfig,
    metrics: &PipelineMetrics,
    users: Vec<(UserKey, Timestamp)>,
) -> RoundOutcome {
    metrics.rounds.fetch_add(1, Ordering::Relaxed);
    let mut outcome = RoundOutcome::default();
    let parts = leased(directory.services(), users, &mut outcome);
    let parts = match read(directory, config, parts).await {
        Ok(parts) => parts,
        Err(err) => {
            // Nothing was done: the users wait in the queue (or in storage) for a next round.
            metrics.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "reading pending inference failed");
            outcome.refused = true;
            return outcome;
        }
    };
    let vectors = embed(directory, &parts).await;
    let mut embedded = Vec::new();
    for (part, vectors) in parts.into_iter().zip(vectors) {
        if part.entries.is_empty() && part.more {
            // The round's texts were all taken before this user's turn.
            outcome.finished.push((part.key, Some(part.since)));
            continue;
        }
        let Some(vectors) = vectors else {
            outcome.refused = true;
            metrics.refused.fetch_add(1, Ordering::Relaxed);
            outcome.finished.push((part.key, Some(part.since)));
            continue;
        };
        embedded.push((part, vectors));
    }
    if embedded.is_empty() {
        return outcome;
    }
    let keys: Vec<(UserKey, Timestamp)> = embedded
        .iter()
        .map(|(part, _)| (part.key.clone(), part.since))
        .collect();
    let written = match store(directory, embedded).await {
        Ok(written) => written,
        Err(err) => {
            metrics.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %err, "storing vectors failed; the entries wait");
            for (key, since) in keys {
                outcome.finished.push((key, Some(since)));
            }
            return outcome;
        }
    };
    for ((key, _), written) in keys.into_iter().zip(written) {
        let Some(written) = written else {
            outcome.not_served.push(key);
            continue;
        };
        metrics
            .stored
            .fetch_add(written.stored.len() as u64, Ordering::Relaxed);
        metrics
            .dropped
            .fetch_add(written.dropped as u64, Ordering::Relaxed);
        if !written.stored.is_empty()
            && let Some(actor) = directory.running(&key)
        {
            let _ = actor.cast(UserMsg::Embedded(written.stored));
        }
        outcome.finished.push((key, written.left));
    }
    outcome
}

/// The lease each of `users` is written under; users of shards this node does not hold go
/// to `outcome.not_served`.
pub(super) fn leased(
    services: &crate::services::Services,
    users: Vec<(UserKey, Timestamp)>,
    outcome: &mut RoundOutcome,
) -> Vec<(UserKey, Timestamp, Option<u64>)> {
    let mut parts = Vec::new();
    for (key, since) in users {
        let shard = key.shard(services.settings.shards);
        match &services.ownership {
            Some(ownership) => match ownership.lease(shard) {
                Ok(epoch) => parts.push((key, since, Some(epoch))),
                Err(_) => outcome.not_served.push(key),
            },
            None => parts.push((key, since, None)),
        }
    }
    parts
}

/// Runs `body` on the user's data in one transaction fenced by `key`'s shard at `epoch`
/// (unfenced without leases); a fenced transaction is [`Error::NotOwner`].
pub(super) async fn fenced<T, F>(
    directory: &Directory,
    key: &UserKey,
    epoch: Option<u64>,
    mut body: F,
) -> Result<T>
where
    T: Send + 'static,
    F: FnMut(&mut UserData<'_>) -> engram_storage::Result<T> + Send + 'static,
{
    let services = directory.services();
    let (ks, key) = (services.keyspace.clone(), key.clone());
    let shard = key.shard(services.settings.shards);
    let lease = match (&services.ownership, epoch) {
        (Some(ownership), Some(epoch)) => Some((Arc::clone(ownership), epoch)),
        (Some(_) | None, Some(_) | None) => None,
    };
    fenced_write(&services.store, &ks.clone(), shard, lease, move |txn| {
        body(&mut UserData::new(txn, &ks, &key.tenant, &key.user))
    })
    .await
}

/// Reads the users' entries in one read transaction, at most `round_texts` in all and
/// `entries_per_user` each.
pub(super) async fn read<P: Pending + Send + 'static>(
    directory: &Directory,
    config: &PipelineConfig,
    users: Vec<(UserKey, Timestamp, Option<u64>)>,
) -> Result<Vec<Part<P>>> {
    let services = directory.services();
    let ks = services.keyspace.clone();
    let (total, each) = (config.round_texts.max(1), config.entries_per_user.max(1));
    Ok(services
        .store
        .read(move |txn| {
            let mut parts = Vec::with_capacity(users.len());
            let mut left = total;
            for (key, since, epoch) in &users {
                let take = each.min(left);
                let mut entries = if take == 0 {
                    Vec::new()
                } else {
                    UserData::new(txn, &ks, &key.tenant, &key.user).queued_entries::<P>(take + 1)?
                };
                let more = take == 0 || entries.len() > take;
                entries.truncate(take);
                left -= entries.len();
                parts.push(Part {
                    key: key.clone(),
                    since: *since,
                    epoch: *epoch,
                    entries,
                    more,
                });
            }
            Ok(parts)
        })
        .await?)
}

/// The vectors of each part's entries (`None` for a part whose tenant's call failed), one
/// concurrent pool call per tenant.
pub(super) async fn embed(directory: &Directory, parts: &[Part]) -> Vec<Option<Vec<Vec<f32>>>> {
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        if !part.entries.is_empty() {
            by_tenant
                .entry(part.key.tenant.as_str())
                .or_default()
                .push(i);
        }
    }
    let mut results: Vec<Option<Vec<Vec<f32>>>> = parts
        .iter()
        .map(|p| p.entries.is_empty().then(Vec::new))
        .collect();
    let Some(embedder) = directory.services().embedder.clone() else {
        return results;
    };
    let mut calls = JoinSet::new();
    for (tenant, members) in by_tenant {
        let texts: Vec<String> = members
            .iter()
            .flat_map(|&i| parts[i].entries.iter().map(|(_, e)| e.text.clone()))
            .collect();
        let sizes: Vec<(usize, usize)> = members
            .iter()
            .map(|&i| (i, parts[i].entries.len()))
            .collect();
        let (embedder, tenant) = (embedder.clone(), tenant.to_owned());
        calls.spawn(async move { (sizes, embedder.background(&tenant, texts).await) });
    }
    while let Some(joined) = calls.join_next().await {
        let Ok((sizes, vectors)) = joined else {
            continue;
        };
        match vectors {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for (i, n) in sizes {
                    results[i] = Some(vectors.by_ref().take(n).collect());
                }
            }
            Err(err) => {
                tracing::debug!(error = %err, "the pool refused a round's texts; they wait");
            }
        }
    }
    results
}

/// What storing a user's vectors did.
pub(super) struct Written {
    pub(super) stored: Vec<EmbeddedText>,
    pub(super) dropped: usize,
    /// When the entries left were queued, if any are left.
    pub(super) left: Option<Timestamp>,
}

/// A record's embedding as the round computed it: (memory id, embedded text, vector).
type Computed = (String, String, Vec<f32>);

/// Stores the vectors of the round's users in one transaction that fences each user's shard
/// on its own: a user whose shard this node no longer holds writes nothing and gets `None`,
/// the others' vectors commit. A record's vector is stored only if the record still holds the
/// embedded text (otherwise it is dropped and counted).
pub(super) async fn store(
    directory: &Directory,
    parts: Vec<(Part, Vec<Vec<f32>>)>,
) -> Result<Vec<Option<Written>>> {
    let services = directory.services();
    let Some(embedder) = &services.embedder else {
        return Err(Error::Internal("no embedding pool".into()));
    };
    let model = embedder.model_name().to_owned();
    let shards = parts
        .iter()
        .map(|(part, _)| (part.key.shard(services.settings.shards), part.epoch))
        .collect();
    let users: Vec<(UserKey, Vec<Computed>)> = parts
        .into_iter()
        .map(|(part, vectors)| {
            let items = part
                .entries
                .into_iter()
                .zip(vectors)
                .map(|((id, entry), vector)| (id, entry.text, vector))
                .collect();
            (part.key, items)
        })
        .collect();
    let ks = services.keyspace.clone();
    let (written, _) = fenced_write_each(
        &services.store,
        &services.keyspace,
        services.ownership.as_ref(),
        shards,
        move |txn, held| {
            let mut written = Vec::with_capacity(users.len());
            for ((key, items), &held) in users.iter().zip(held) {
                if !held {
                    written.push(None);
                    continue;
                }
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                written.push(Some(complete(&mut u, &model, items)?));
            }
            Ok(written)
        },
    )
    .await?;
    Ok(written)
}

/// Stores one user's vectors (each only if its record still holds the text) and settles the
/// user's pending entries.
fn complete(
    u: &mut UserData<'_>,
    model: &str,
    items: &[Computed],
) -> engram_storage::Result<Written> {
    let mut stored = Vec::new();
    let mut dropped = 0;
    for (memory_id, text, vector) in items {
        let embedding = Embedding {
            model: model.to_owned(),
            vector: vector.clone(),
        };
        match u.complete_pending(memory_id, text, &embedding)? {
            Completion::Stored => stored.push(EmbeddedText {
                memory_id: memory_id.clone(),
                text: text.clone(),
                vector: vector.clone(),
            }),
            Completion::Dropped => dropped += 1,
        }
    }
    let left = u.settle_pending()?;
    Ok(Written {
        stored,
        dropped,
        left,
    })
}
