//! Sweeps of one user, run by the maintenance jobs ([`crate::jobs`]) through the user's
//! actor: memory records past their TTL are expired and later purged, distilled intent
//! versions past theirs removed, idle session windows closed, raw turns past the retention
//! period deleted (keeping what the tenant's archive mode keeps of them: nothing by default,
//! digests, or the full text), and archived turns past the archive retention period purged.
//!
//! Archiving rewrites turns, so one transaction archives at most [`ARCHIVE_BUDGET`] bytes; a
//! sweep runs further transactions for the rest (up to [`MAX_ARCHIVE_ROUNDS`]), and whatever
//! is left stays due for the next run of the job.

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::data::archive::RetentionRule;
use engram_storage::types::{MemoryRecord, MemoryStatus, Timestamp};

use super::UserState;
use super::ops::{PURGE_GRACE_MS, Prepared, WriteScope, session_rule};
use super::txn::written_under;
use crate::error::Result;
use crate::request::user::{SweepReport, SweepScope};

/// Bytes of archived turns one sweep transaction writes at most (FoundationDB advises
/// transactions under 1 MB).
pub const ARCHIVE_BUDGET: usize = 512 * 1024;
/// Transactions one sweep runs at most to move a backlog of raw turns into the archive.
pub const MAX_ARCHIVE_ROUNDS: usize = 64;

/// What one sweep transaction did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Counts.
    pub report: SweepReport,
    /// Records changed (for the actor's cache).
    pub changed: Vec<MemoryRecord>,
    /// Ids of records purged.
    pub purged: Vec<String>,
    /// Whether the archive budget ran out with raw turns perhaps still due.
    pub more: bool,
}

/// Expires records past their TTL, purges expired and deleted records past their grace
/// period, closes session windows idle past their time, applies `retention` to sessions
/// whose oldest turns are due (archiving within [`ARCHIVE_BUDGET`]), and purges archived
/// turns past the archive period.
pub fn sweep(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    retention: RetentionRule,
    what: SweepScope,
    records: &[MemoryRecord],
) -> StorageResult<Swept> {
    let mut swept = Swept::default();
    for record in records
        .iter()
        .filter(|r| what.records && r.expires_at.is_some_and(|at| at <= scope.now))
    {
        match record.status {
            MemoryStatus::Expired | MemoryStatus::Deleted => {
                u.remove_record(record.kind, &record.memory_id)?;
                swept.purged.push(record.memory_id.clone());
                swept.report.purged += 1;
            }
            MemoryStatus::Active | MemoryStatus::Candidate | MemoryStatus::Suppressed => {
                let mut record = record.clone();
                record.status = MemoryStatus::Expired;
                record.expires_at = Some(scope.now.plus_millis(PURGE_GRACE_MS));
                u.put_record(&record)?;
                swept.changed.push(record);
                swept.report.expired += 1;
            }
        }
    }
    if what.records {
        swept.report.intents_expired += u.expire_intents(scope.now)?;
    }
    let rule = retention;
    let mut budget = ARCHIVE_BUDGET;
    for session in u.sessions()? {
        if what.sessions && u.close_idle_window(&session.session_id, scope.now)? {
            swept.report.sessions_closed += 1;
        }
        if what.turns && session.retain_until <= scope.now {
            if budget == 0 {
                swept.more = true;
                continue;
            }
            swept.report.turns_removed +=
                u.apply_retention(&session.session_id, rule, &mut budget)?;
            swept.more |= budget == 0;
        }
    }
    if what.turns {
        for row in u.archive_rows()? {
            if row.purge_at <= scope.now {
                swept.report.archive_purged += u.purge_archive(&row.session_id, rule)?;
            }
        }
    }
    Ok(swept)
}

/// The retention of `tenant`'s raw turns and archive at `now`.
pub fn retention_rule(
    settings: &crate::services::Settings,
    tenant: &str,
    now: Timestamp,
) -> RetentionRule {
    RetentionRule {
        now,
        retention_ms: settings.retention_ms,
        archive_ms: settings.archive_retention_ms,
        mode: settings.archive_mode(tenant),
    }
}

fn add(total: &mut SweepReport, one: SweepReport) {
    total.expired += one.expired;
    total.purged += one.purged;
    total.turns_removed += one.turns_removed;
    total.archive_purged += one.archive_purged;
    total.sessions_closed += one.sessions_closed;
    total.intents_expired += one.intents_expired;
}

impl UserState {
    /// Sweeps the user: one transaction, then more for a backlog of raw turns to archive.
    pub(super) async fn sweep(&mut self, what: SweepScope) -> Result<SweepReport> {
        let mut total = SweepReport::default();
        let mut scope = what;
        for _ in 0..MAX_ARCHIVE_ROUNDS {
            let more = self.sweep_once(scope, &mut total).await?;
            if !more {
                break;
            }
            scope = SweepScope {
                records: false,
                turns: true,
                sessions: false,
            };
        }
        self.pruning.prune(&self.args).await?;
        Ok(total)
    }

    async fn sweep_once(&mut self, what: SweepScope, total: &mut SweepReport) -> Result<bool> {
        let (services, key) = self.scope_parts();
        let now = services.clock.now();
        let rule = session_rule(services.settings.retention_ms);
        let retention = retention_rule(&services.settings, &key.tenant, now);
        let records = self.cached_records();
        let ks = services.keyspace.clone();
        let prepared = Prepared::default();
        let lease = self.lease()?;
        let under = written_under(lease.as_ref());
        let swept = self
            .run(lease, move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                let scope = WriteScope {
                    tenant: &key.tenant,
                    user: &key.user,
                    now,
                    rule,
                    prepared: &prepared,
                    lease: under.clone(),
                };
                sweep(&mut u, &scope, retention, what, &records)
            })
            .await?;
        for id in &swept.purged {
            self.index.remove(id);
        }
        self.cache(swept.changed, None, &Prepared::default());
        add(total, swept.report);
        Ok(swept.more)
    }
}
