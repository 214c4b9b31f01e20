//! Promotion by use: a candidate memory a context served to a session becomes active when
//! that session's next turn succeeds (the gateway put it in the prompt, and the answer was
//! good). With a like, reinforcement to confidence 0.7 and an explicit activation, it is one
//! of the ways a candidate is confirmed (docs/architecture.md, "Status").
//!
//! What a context served is remembered in the user's actor only ([`Used`]): it is a cache,
//! like the rest of the actor's state, and a restart loses only the chance to promote what
//! the last contexts served. The promotion itself is written in the turn's own fenced
//! transaction, and the turn's answer lists it (`action: "promoted"`).

use std::collections::HashMap;

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus, Timestamp};

use super::ops::WriteScope;
use crate::model::context::{MemoryContext, is_live};
use crate::model::policy::{SESSION_IDLE_MS, expiry};
use crate::request::user::MemoryChange;

/// Sessions whose last context is remembered, at most (the least recently served is
/// forgotten first).
pub const MAX_SESSIONS: usize = 64;

/// What confirming a candidate by use adds to its confidence.
pub const USE_CONFIDENCE: f32 = 0.1;

/// The candidates the last context of each session served, with when.
#[derive(Debug, Default)]
pub struct Used(HashMap<String, (Vec<(MemoryKind, String)>, Timestamp)>);

impl Used {
    /// Remembers that a context of `session` served `candidates` at `at` (replacing what
    /// the session's previous context served: the next turn answers the latest one).
    pub fn note(&mut self, session: &str, candidates: Vec<(MemoryKind, String)>, at: Timestamp) {
        if candidates.is_empty() {
            self.0.remove(session);
            return;
        }
        self.0.insert(session.to_owned(), (candidates, at));
        if self.0.len() > MAX_SESSIONS
            && let Some(oldest) = self
                .0
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(session, _)| session.clone())
        {
            self.0.remove(&oldest);
        }
    }

    /// What the last context of `session` served, if it was served within a session
    /// window's idle time of `now`; forgets it either way.
    pub fn take(&mut self, session: &str, now: Timestamp) -> Vec<(MemoryKind, String)> {
        match self.0.remove(session) {
            Some((served, at)) if now.0 - at.0 <= SESSION_IDLE_MS => served,
            Some(_) | None => Vec::new(),
        }
    }

    /// Forgets everything (the user was forgotten).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// The candidates a context shows, with their layers.
pub fn candidates_shown(ctx: &MemoryContext) -> Vec<(MemoryKind, String)> {
    [
        (MemoryKind::Profile, &ctx.profile),
        (MemoryKind::Episodic, &ctx.episodic),
        (MemoryKind::Correction, &ctx.corrections),
    ]
    .into_iter()
    .flat_map(|(kind, shown)| {
        shown
            .iter()
            .filter(|m| m.status == MemoryStatus::Candidate)
            .map(move |m| (kind, m.memory_id.clone()))
    })
    .collect()
}

/// In a successful turn's transaction: makes each of `used` that is still a live candidate
/// active, with [`USE_CONFIDENCE`] more confidence, seen now. Returns what changed.
pub fn promote(
    u: &mut UserData<'_>,
    scope: &WriteScope<'_>,
    used: &[(MemoryKind, String)],
) -> StorageResult<(Vec<MemoryChange>, Vec<MemoryRecord>)> {
    let mut changes = Vec::new();
    let mut records = Vec::new();
    for (kind, id) in used {
        let Some(mut record) = u.record(*kind, id)? else {
            continue;
        };
        if record.status != MemoryStatus::Candidate || !is_live(&record, scope.now) {
            continue;
        }
        record.status = MemoryStatus::Active;
        record.confidence = (record.confidence + USE_CONFIDENCE).min(1.0);
        record.last_seen_at = scope.now;
        record.expires_at = expiry(record.kind, record.status, record.salience, scope.now);
        u.put_record(&record)?;
        changes.push(MemoryChange {
            memory_id: record.memory_id.clone(),
            kind: record.kind,
            action: "promoted".into(),
        });
        records.push(record);
    }
    Ok((changes, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_last_context_is_taken_once_within_the_window_and_sessions_are_bounded() {
        let mut used = Used::default();
        let one = vec![(MemoryKind::Episodic, "m1".to_owned())];
        used.note("s", one.clone(), Timestamp(0));
        assert_eq!(used.take("s", Timestamp(SESSION_IDLE_MS)), one);
        assert!(used.take("s", Timestamp(1)).is_empty(), "taken once");
        used.note("s", one.clone(), Timestamp(0));
        assert!(
            used.take("s", Timestamp(SESSION_IDLE_MS + 1)).is_empty(),
            "a turn a day after the context is not its use"
        );
        used.note("s", one.clone(), Timestamp(0));
        used.note("s", Vec::new(), Timestamp(1));
        assert!(
            used.take("s", Timestamp(2)).is_empty(),
            "a later context serving no candidate replaces it"
        );
        for i in 0..=MAX_SESSIONS {
            used.note(&format!("s{i}"), one.clone(), Timestamp(i as i64));
        }
        assert_eq!(used.0.len(), MAX_SESSIONS);
        assert!(
            used.take("s0", Timestamp(100)).is_empty(),
            "the least recent went"
        );
    }
}
