//! The model's summaries of older turns (DESIGN.md section 1, working memory): once a
//! session's window holds more turns than the context shows raw ([`RAW_TURNS`]), the write
//! that pushed a turn out of the raw part queues the session for the distillation lane
//! ([`DistilTask::Summaries`], one entry per session however many writes queue it); the lane
//! summarises its older turns that have no summary yet, at most [`SUMMARY_BATCH`] a round,
//! each in 20 to 60 characters, and stores each once. Contexts show a stored summary, and
//! the extractive one until it is stored (or when the model failed).

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::model::{DistilTask, PendingDistillation, Timestamp};

use crate::model::policy::RAW_TURNS;

/// Turns one round summarises per session at most.
pub const SUMMARY_BATCH: usize = 8;

/// The queue id of a session's summaries.
pub fn entry_id(session: &str) -> String {
    format!("s{session}")
}

/// In a turn's transaction: queues `session` for summaries when its window holds turns past
/// the raw part.
pub fn queue_if_due(u: &mut UserData<'_>, now: Timestamp, session: &str) -> StorageResult<bool> {
    let Some(row) = u.session(session)? else {
        return Ok(false);
    };
    if (row.window_turns as usize) <= RAW_TURNS {
        return Ok(false);
    }
    let id = entry_id(session);
    if u.queued::<PendingDistillation>(&id)?.is_none() {
        u.put_queued(
            &id,
            &PendingDistillation {
                task: DistilTask::Summaries,
                session_id: session.to_owned(),
                turn_seq: 0,
                text: String::new(),
                attempts: 0,
                queued_at: now,
            },
        )?;
    }
    Ok(true)
}

/// An older turn still without a summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueTurn {
    /// Its sequence number.
    pub seq: u64,
    /// The user's text.
    pub user_text: String,
    /// The assistant's text.
    pub assistant_text: String,
}

/// The older turns of `session`'s window without a summary, oldest first, at most
/// [`SUMMARY_BATCH`]; and whether more are left.
pub fn due(u: &mut UserData<'_>, session: &str) -> StorageResult<(Vec<DueTurn>, bool)> {
    let Some(row) = u.session(session)? else {
        return Ok((Vec::new(), false));
    };
    let turns = u.turns_from(session, row.window_start_seq)?;
    let older = turns.len().saturating_sub(RAW_TURNS);
    let done: std::collections::HashSet<u64> = u
        .summaries(session)?
        .into_iter()
        .map(|(seq, _)| seq)
        .collect();
    let mut missing: Vec<DueTurn> = turns[..older]
        .iter()
        .filter(|t| !done.contains(&t.seq))
        .map(|t| DueTurn {
            seq: t.seq,
            user_text: t.user_text.clone(),
            assistant_text: t.assistant_text.clone(),
        })
        .collect();
    let more = missing.len() > SUMMARY_BATCH;
    missing.truncate(SUMMARY_BATCH);
    Ok((missing, more))
}
