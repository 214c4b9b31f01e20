//! Maintenance jobs over every user with something due: the expiry sweep (memory records past
//! their TTL), raw-turn retention (turns past the retention period move to the user's
//! archive; archived turns past the archive retention period are purged), and the session
//! cleanup (windows idle for 24 hours). Each finds its users through the expiry index, page
//! by page, and hands each user to its own actor (so the user's writes stay serialised and
//! its cache stays right). In a cluster every node runs every job and sweeps only the users of
//! the shards it holds ([`crate::ownership::Ownership::holds`]); the others' owners sweep
//! theirs. The index is ordered by time, not by shard, so each node reads all of it (keys
//! only of entries due) but starts no actor and sends no message for another node's user.
//! Scheduling (when to run) is the node's business.

use std::collections::HashSet;

use engram_storage::data::expired_page;
use engram_storage::keyspace::ExpiryTarget;

use crate::directory::Directory;
use crate::placement::UserKey;
use crate::request::user::SweepScope;
use crate::user::UserMsg;

/// Entries read from the expiry index per transaction.
const PAGE: usize = 1_000;

/// A maintenance job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Expire memory records past their TTL; purge expired and deleted ones past grace.
    ExpirySweep,
    /// Move raw turns older than the retention period to the archive; purge archived turns
    /// older than the archive retention period.
    Retention,
    /// Close session windows idle for 24 hours (the next turn opens a new one).
    SessionCleanup,
}

impl Job {
    /// The job's name in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Job::ExpirySweep => "expiry-sweep",
            Job::Retention => "retention",
            Job::SessionCleanup => "session-cleanup",
        }
    }

    fn scope(self) -> SweepScope {
        match self {
            Job::ExpirySweep => SweepScope {
                records: true,
                turns: false,
                sessions: false,
            },
            Job::Retention => SweepScope {
                records: false,
                turns: true,
                sessions: false,
            },
            Job::SessionCleanup => SweepScope {
                records: false,
                turns: false,
                sessions: true,
            },
        }
    }

    fn wants(self, target: &ExpiryTarget) -> bool {
        match target {
            ExpiryTarget::Record { .. } | ExpiryTarget::Intent { .. } => self == Job::ExpirySweep,
            ExpiryTarget::Session { .. } | ExpiryTarget::Archive { .. } => self == Job::Retention,
            ExpiryTarget::SessionIdle { .. } => self == Job::SessionCleanup,
        }
    }
}

/// What one run of a job did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobReport {
    /// Users swept.
    pub users: usize,
    /// Records marked expired.
    pub expired: usize,
    /// Records purged.
    pub purged: usize,
    /// Raw turns moved out of their sessions into the archive.
    pub turns_removed: usize,
    /// Archived turns purged.
    pub archive_purged: usize,
    /// Idle session windows closed.
    pub sessions_closed: usize,
    /// Distilled intent versions removed past their TTL.
    pub intents_expired: usize,
    /// Users whose sweep failed (retried at the next run).
    pub failed: usize,
    /// Users due whose shard another node holds: left to that node's run.
    pub not_owned: usize,
}

/// Runs `job` once over every user with entries due now whose shard this node holds (every
/// user when the node serves all shards, without ownership).
pub async fn run(directory: &Directory, job: Job) -> crate::Result<JobReport> {
    let services = directory.services().clone();
    let ownership = services.ownership.clone();
    let shards = services.settings.shards;
    let now = services.clock.now();
    let mut report = JobReport::default();
    let mut seen = HashSet::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let (ks, after) = (services.keyspace.clone(), cursor.clone());
        let (page, next) = services
            .store
            .read(move |txn| expired_page(txn, &ks, now, after.as_deref(), PAGE))
            .await?;
        for entry in page.into_iter().filter(|e| job.wants(&e.target)) {
            let key = UserKey::new(entry.tenant, entry.user);
            if !seen.insert(key.clone()) {
                continue;
            }
            if ownership
                .as_ref()
                .is_some_and(|o| !o.holds(key.shard(shards)))
            {
                report.not_owned += 1;
                continue;
            }
            match directory
                .call(&key, |reply| UserMsg::Sweep(job.scope(), reply))
                .await
            {
                Ok(swept) => {
                    report.users += 1;
                    report.expired += swept.expired;
                    report.purged += swept.purged;
                    report.turns_removed += swept.turns_removed;
                    report.archive_purged += swept.archive_purged;
                    report.sessions_closed += swept.sessions_closed;
                    report.intents_expired += swept.intents_expired;
                }
                Err(err) => {
                    report.failed += 1;
                    tracing::warn!(job = job.name(), user = %services.log_id(&key), %err, "sweep of a user failed");
                }
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(report)
}
