//! The audit trail's writer: every authenticated request that reads or writes memory
//! content, forgets a user, manages keys or approves sensitive reads is recorded (principal,
//! tenant, user pseudonym, action, ids, client address, time, outcome) in the append-only
//! audit keyspace before its answer leaves the node. Refused requests (403) are recorded too.
//!
//! Entries are written in batches (one transaction for everything queued, a few batches
//! committing at once), and the request waits for its batch to commit: an answer is never
//! sent for an action whose entry was lost. If the trail cannot be written the request is
//! answered 503. Every request is recorded once, by the node that accepted it (a user another
//! node owns is asked through the front door; no HTTP request is replayed on the owner).
//! Entries older than `security.audit-retention` are purged hourly.
//!
//! This module knows no HTTP: the middleware that records each request
//! (`http/middleware/audit.rs`) builds the entries; the user an entry names is the one the
//! request's handler named ([`AuditedUser`](crate::caller::AuditedUser)), never one parsed
//! out of a query or a body here.

use std::sync::Arc;
use std::time::Duration;

use engram_actors::clock::SharedClock;
use engram_storage::access::{self, AuditEntry, Scope};
use engram_storage::{Keyspace, Store};
use tokio::sync::{mpsc, oneshot};

use crate::caller::Caller;
use crate::metrics::NodeMetrics;

/// Entries waiting for the writer, at most.
const QUEUE: usize = 4_096;
/// Entries written in one transaction, at most.
const BATCH: usize = 512;
/// Batches being committed at once, at most.
const IN_FLIGHT_BATCHES: usize = 4;
/// The most audit entries not yet durable at any moment: all that a crash can lose of the
/// batched reads (`security.audit-reads = "batched"`); no answer waiting for its entry is
/// ever sent for a lost one.
pub const MAX_UNWRITTEN: usize = QUEUE + BATCH * IN_FLIGHT_BATCHES;
/// Actions of masked gateway reads, audited without waiting when reads are batched.
const MASKED_READS: [&str; 8] = [
    "context.read",
    "sqlcache.lookup",
    "fewshot.search",
    "memory.list",
    "memory.search",
    "session.list",
    "session.read",
    "conflict.list",
];

/// Marks an answer that showed a user's high-PII items to its reader (the sensitive-read
/// breaker counted it): its audit entry is always durable before the answer leaves.
#[derive(Debug, Clone, Copy)]
pub struct SensitiveRead;
/// How often old entries are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3_600);

type Pending = (AuditEntry, oneshot::Sender<bool>);

/// The node's writer of audit entries.
pub struct AuditLog {
    tx: mpsc::Sender<Pending>,
    pepper: [u8; 32],
    clock: SharedClock,
    enabled: bool,
    batched_reads: bool,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Reads (or makes) the pseudonym key and starts the writer and the hourly purge. A log
    /// not `enabled` records nothing (`security.audit = false`, for measuring its cost);
    /// with `batched_reads`, masked gateway reads do not wait for their entries.
    pub async fn start(
        store: Store,
        keyspace: Keyspace,
        clock: SharedClock,
        (retention, enabled, batched_reads): (Duration, bool, bool),
        metrics: Arc<NodeMetrics>,
    ) -> engram_storage::Result<Arc<AuditLog>> {
        let fresh = rand::random::<[u8; 32]>();
        let ks = keyspace.clone();
        let pepper = store
            .run(move |txn| access::audit_pepper(txn, &ks, fresh))
            .await?;
        if enabled && batched_reads {
            tracing::info!(
                max_unwritten = MAX_UNWRITTEN,
                "masked gateway reads are audited without waiting"
            );
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(store.clone(), keyspace.clone(), rx, metrics));
        let purge_clock = clock.clone();
        tokio::spawn(async move {
            let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
            let mut every = tokio::time::interval(PURGE_EVERY);
            loop {
                every.tick().await;
                let cutoff = purge_clock.now().plus_millis(-retention_ms);
                let ks = keyspace.clone();
                match store
                    .run(move |txn| access::purge_audit_before(txn, &ks, cutoff))
                    .await
                {
                    Ok(tenants) => tracing::debug!(tenants, "old audit entries purged"),
                    Err(err) => tracing::warn!(%err, "purging old audit entries failed"),
                }
            }
        });
        Ok(Arc::new(AuditLog {
            tx,
            pepper,
            clock,
            enabled,
            batched_reads,
        }))
    }

    /// The pseudonym of a user in the trail.
    pub fn pseudonym(&self, tenant: &str, user: &str) -> String {
        access::user_pseudonym(&self.pepper, tenant, user)
    }

    /// Records an entry; `true` once it is durable.
    pub async fn append(&self, entry: AuditEntry) -> bool {
        if !self.enabled {
            return true;
        }
        let (done, written) = oneshot::channel();
        if self.tx.send((entry, done)).await.is_err() {
            return false;
        }
        written.await.unwrap_or(false)
    }

    /// Queues an entry without waiting for it to be durable (waits only for room in the
    /// queue, so the entries not yet durable stay within [`MAX_UNWRITTEN`]).
    pub async fn append_batched(&self, entry: AuditEntry) {
        if !self.enabled {
            return;
        }
        // Nobody waits on the outcome; a failed batch is logged and counted by the writer.
        let (done, _) = oneshot::channel();
        let _ = self.tx.send((entry, done)).await;
    }

    /// Whether an entry of `action` by a key of `scope` is queued without waiting for it to be
    /// durable: masked gateway reads that showed nothing sensitive, when reads are batched.
    pub fn batches(&self, scope: Scope, action: &str, sensitive: bool) -> bool {
        self.batched_reads
            && scope == Scope::Gateway
            && MASKED_READS.contains(&action)
            && !sensitive
    }

    /// An entry of `caller` at now, with a fresh id.
    pub fn entry(
        &self,
        caller: &Caller,
        user: Option<&str>,
        action: &str,
        ids: Vec<String>,
        outcome: u16,
    ) -> AuditEntry {
        AuditEntry {
            id: uuid::Uuid::new_v4().to_string(),
            at: self.clock.now(),
            principal: caller.principal.clone(),
            tenant: caller.tenant.clone(),
            user: user.map(|u| self.pseudonym(&caller.tenant, u)),
            action: action.to_owned(),
            ids,
            client: caller.client.clone(),
            outcome,
        }
    }
}

async fn write_loop(
    store: Store,
    keyspace: Keyspace,
    mut rx: mpsc::Receiver<Pending>,
    metrics: Arc<NodeMetrics>,
) {
    // Batches commit concurrently (SQLite's group commit makes them share durable commits),
    // so a request waits for about one commit, not for the batch before its own.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_BATCHES));
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let (store, ks, metrics) = (store.clone(), keyspace.clone(), Arc::clone(&metrics));
        tokio::spawn(async move {
            let entries: Vec<AuditEntry> = batch.iter().map(|(e, _)| e.clone()).collect();
            let written = store
                .run(move |txn| access::append_audit(txn, &ks, &entries))
                .await;
            drop(permit);
            if let Err(err) = &written {
                tracing::error!(%err, entries = batch.len(), "writing audit entries failed");
            }
            metrics.audited(written.is_ok(), batch.len() as u64);
            for (_, done) in batch {
                let _ = done.send(written.is_ok());
            }
        });
    }
}

/// Ids a handler adds to its request's audit entry (e.g. the id of a key it made), as a
/// response extension.
#[derive(Debug, Clone, Default)]
pub struct AuditIds(pub Vec<String>);
