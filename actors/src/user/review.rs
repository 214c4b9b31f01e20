//! Decisions about a memory's status taken outside the memory model: a status set through
//! the API, and the review of contradictions the model could not resolve on its own
//! ([`crate::model::conflict::Resolution::Flag`]): a reviewer keeps the old memory, the new
//! one, or both, and the flag goes in the same transaction.

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{MemoryRecord, MemoryStatus, Timestamp};

use super::ops::{Outcome, PURGE_GRACE_MS, Prepared, WriteScope, find_record};
use super::{UserState, validate};
use crate::error::{Error, Result};
use crate::model::policy::expiry;
use crate::request::user::{ConflictChoice, MemoryAck, ResolveAck, ResolveConflict, StatusChange};

/// Activates, suppresses or deletes a memory. Deleted memories are purged after a grace
/// period; their embedding goes at once.
pub fn set_status(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &StatusChange,
) -> Outcome<MemoryAck> {
    let Some(mut record) = find_record(u, &req.memory_id)? else {
        return Ok(Err(Error::NotFound {
            what: format!("memory {}", req.memory_id),
        }));
    };
    apply_status(u, &mut record, req.status, scope.now)?;
    let action = match req.status {
        MemoryStatus::Active => "activated",
        MemoryStatus::Suppressed => "suppressed",
        MemoryStatus::Deleted => "deleted",
        MemoryStatus::Candidate => "demoted",
        MemoryStatus::Expired => "expired",
    };
    Ok(Ok((
        MemoryAck {
            memory: record.clone(),
            action: action.into(),
            replayed: false,
        },
        vec![record],
    )))
}

/// Gives `record` `status` at `now` and stores it: a deleted record is purged after the grace
/// period (its embedding goes at once), a suppressed one stops holding (`valid_to`), an
/// activated one is seen now and its TTL starts again.
pub(super) fn apply_status(
    u: &mut UserData<'_>,
    record: &mut MemoryRecord,
    status: MemoryStatus,
    now: Timestamp,
) -> StorageResult<()> {
    record.status = status;
    match status {
        MemoryStatus::Deleted => {
            record.expires_at = Some(now.plus_millis(PURGE_GRACE_MS));
            record.valid_to = Some(now);
            u.remove_embedding(&record.memory_id)?;
        }
        MemoryStatus::Suppressed => record.valid_to = Some(now),
        MemoryStatus::Active => {
            record.last_seen_at = now;
            record.expires_at = expiry(record.kind, MemoryStatus::Active, record.salience, now);
        }
        MemoryStatus::Candidate | MemoryStatus::Expired => {}
    }
    u.put_record(record)
}

/// Settles the flag `req` names (404 when there is none): the memory held back (stored
/// suppressed when it was flagged) becomes active for `keep_new` and `keep_both`, and the
/// one it contradicts is suppressed for `keep_new`. A memory deleted since stays deleted.
pub fn resolve_conflict(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    req: &ResolveConflict,
) -> Outcome<ResolveAck> {
    let Some(flag) = u.flags()?.into_iter().find(|f| f.flag_id == req.flag_id) else {
        return Ok(Err(Error::NotFound {
            what: format!("conflict {}", req.flag_id),
        }));
    };
    let (new_status, old_status) = match req.choice {
        ConflictChoice::KeepOld => (MemoryStatus::Suppressed, None),
        ConflictChoice::KeepNew => (MemoryStatus::Active, Some(MemoryStatus::Suppressed)),
        ConflictChoice::KeepBoth => (MemoryStatus::Active, None),
    };
    let mut changed = Vec::new();
    for (memory_id, status) in [
        (&flag.memory_id, Some(new_status)),
        (&flag.conflicts_with, old_status),
    ] {
        let Some(mut record) = find_record(u, memory_id)? else {
            continue;
        };
        if let Some(status) = status
            && !matches!(record.status, MemoryStatus::Deleted | MemoryStatus::Expired)
        {
            apply_status(u, &mut record, status, scope.now)?;
        }
        changed.push(record);
    }
    u.remove_flag(&flag.flag_id)?;
    Ok(Ok((
        ResolveAck {
            flag_id: flag.flag_id,
            choice: req.choice,
            memories: changed.clone(),
            replayed: false,
        },
        changed,
    )))
}

impl UserState {
    pub(super) async fn resolve_conflict(&mut self, req: ResolveConflict) -> Result<ResolveAck> {
        validate::resolve_conflict(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, Prepared::default(), None, move |u, scope| {
            resolve_conflict(u, scope, &req)
        })
        .await
    }
}
