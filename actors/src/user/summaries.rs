//! The model's summaries of older turns (docs/architecture.md, "Memory model", working
//! memory): once a session's window holds more turns than the context shows raw
//! ([`RAW_TURNS`]), the write that pushed a turn out of the raw part queues the session for the
//! distillation lane ([`DistilTask::Summaries`], one entry per session however many writes
//! queue it); the lane summarises its older turns that have no summary yet, at most
//! [`SUMMARY_BATCH`] a round, each in 20 to 60 characters, and stores each once. Contexts show
//! a stored summary, and the extractive one until it is stored (or when the model failed).

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{DistilTask, PendingDistillation, Timestamp, Turn};

use crate::model::policy::{RAW_TURNS, SESSION_IDLE_MS};

/// Stored turns of a session a context reads at most: the newest; summaries of older ones
/// would not fit a token budget.
pub const CONTEXT_TURNS: usize = 100;

/// A session's working memory: its newest turns within the retention period (at most
/// [`CONTEXT_TURNS`]), oldest first, across its windows; the last [`RAW_TURNS`] of its current
/// window, while that window is open, are shown raw, every other one as a summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Working {
    /// The turns, oldest first.
    pub turns: Vec<Turn>,
    /// Where the raw ones start in `turns` (`turns.len()`: none, the window closed).
    pub raw_from: usize,
}

/// `session`'s working memory at `now`, with raw turns kept `retention_ms`.
pub fn working(
    u: &mut UserData<'_>,
    session: &str,
    now: Timestamp,
    retention_ms: i64,
) -> StorageResult<Working> {
    let Some(row) = u.session(session)? else {
        return Ok(Working::default());
    };
    let mut turns = u.last_turns(session, CONTEXT_TURNS)?;
    turns.retain(|t| now.0 - t.created_at.0 <= retention_ms);
    let open = row.idle_at.is_some() && now.0 - row.last_turn_at.0 <= SESSION_IDLE_MS;
    let raw_from = if open {
        let window = turns
            .iter()
            .position(|t| t.seq >= row.window_start_seq)
            .unwrap_or(turns.len());
        window.max(turns.len().saturating_sub(RAW_TURNS))
    } else {
        turns.len()
    };
    Ok(Working { turns, raw_from })
}

/// Turns one round summarises per session at most.
pub const SUMMARY_BATCH: usize = 8;

/// The queue id of a session's summaries.
pub fn entry_id(session: &str) -> String {
    format!("s{session}")
}

/// In a turn's transaction: queues `session` for summaries when its window holds turns past
/// the raw part, or when the turn opened a new window (the last window's raw turns are older
/// turns now).
pub fn queue_if_due(u: &mut UserData<'_>, now: Timestamp, session: &str) -> StorageResult<bool> {
    let Some(row) = u.session(session)? else {
        return Ok(false);
    };
    let new_window = row.window_turns == 1 && row.turn_count > 1;
    if (row.window_turns as usize) <= RAW_TURNS && !new_window {
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

/// The turns of `session`'s working memory shown as summaries ([`working`]) without a
/// stored one, oldest first, at most [`SUMMARY_BATCH`]; and whether more are left.
pub fn due(
    u: &mut UserData<'_>,
    session: &str,
    now: Timestamp,
    retention_ms: i64,
) -> StorageResult<(Vec<DueTurn>, bool)> {
    let Working { turns, raw_from } = working(u, session, now, retention_ms)?;
    let older = raw_from;
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
