//! Review of contradictions the memory model could not resolve on its own
//! ([`crate::model::conflict::Resolution::Flag`]): a reviewer keeps the old memory, the new
//! one, or both, and the flag goes in the same transaction.

use engram_storage::data::UserData;
use engram_storage::model::MemoryStatus;

use super::api::{ConflictChoice, ResolveAck, ResolveConflict};
use super::ops::{Outcome, WriteScope, apply_status, find_record};
use crate::error::Error;

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
