//! The model's summaries of older turns (docs/architecture.md, "Memory model", working
//! memory): once a session holds more turns than the context shows raw ([`RAW_TURNS`]), the
//! write that pushed a turn out of the raw part queues the session for the
//! distillation lane ([`DistilTask::Summaries`], one entry per session however many writes
//! queue it); the lane summarises its older turns that have no summary yet, at most
//! [`SUMMARY_BATCH`] a round, each in 20 to 60 characters, and stores each once. Contexts show
//! a stored summary, and the extractive one until it is stored (or when the model failed).

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{DistilTask, PendingDistillation, Timestamp, Turn};

use crate::model::policy::RAW_TURNS;

/// Stored turns of a session a context reads at most: the newest; summaries of older ones
/// would not fit a token budget.
pub const CONTEXT_TURNS: usize = 100;

/// A session's working memory: its newest turns within the retention period (at most
/// [`CONTEXT_TURNS`]), oldest first, across its windows; the last [`RAW_TURNS`] of the
/// session are shown raw, every other one as a summary, whether the window they were written
/// in is still open or not (a window only bounds what one stretch of conversation holds: a
/// user back after a day, or at the 21st turn, still finds the last six turns raw).
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
    if u.session(session)?.is_none() {
        return Ok(Working::default());
    }
    let mut turns = u.last_turns(session, CONTEXT_TURNS)?;
    turns.retain(|t| now.0 - t.created_at.0 <= retention_ms);
    let raw_from = turns.len().saturating_sub(RAW_TURNS);
    Ok(Working { turns, raw_from })
}

/// Turns one round summarises per session at most.
pub const SUMMARY_BATCH: usize = 8;

/// The queue id of a session's summaries.
pub fn entry_id(session: &str) -> String {
    format!("s{session}")
}

/// In a turn's transaction: queues `session` for summaries when it holds turns past the raw
/// part (the turn pushed one out of it).
pub fn queue_if_due(u: &mut UserData<'_>, now: Timestamp, session: &str) -> StorageResult<bool> {
    let Some(row) = u.session(session)? else {
        return Ok(false);
    };
    if (row.turn_count as usize) <= RAW_TURNS {
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

#[cfg(test)]
mod tests {
    use engram_storage::types::PiiLevel;
    use engram_storage::{Keyspace, Store};

    use super::*;
    use crate::model::policy::{DAY_MS, SESSION_IDLE_MS, SESSION_MAX_TURNS};
    use crate::user::ops::session_rule;

    const RETENTION: i64 = 30 * DAY_MS;

    /// Appends `n` turns to alice's session `s`, a minute apart from `from`, and returns what
    /// `working` and `queue_if_due` say at `at`.
    fn session_of(n: u64, from: i64, at: i64) -> (Vec<u64>, Vec<u64>, bool) {
        let store = Store::in_memory().unwrap();
        let ks = Keyspace::new("engram");
        store
            .run_blocking(|txn| {
                let mut u = UserData::new(txn, &ks, "acme", "alice");
                let mut due = false;
                for i in 0..n {
                    let mut turn = Turn {
                        session_id: "s".into(),
                        seq: 0,
                        request_id: format!("r{i}"),
                        trace_id: None,
                        route: None,
                        user_text: format!("question {i}"),
                        assistant_text: format!("answer {i}"),
                        entities: Vec::new(),
                        created_at: Timestamp(from + i as i64 * 60_000),
                        written_under: None,
                        pii_level: PiiLevel::None,
                    };
                    u.append_turn(&mut turn, session_rule(RETENTION))?;
                    due = queue_if_due(&mut u, turn.created_at, "s")?;
                }
                let w = working(&mut u, "s", Timestamp(at), RETENTION)?;
                let seqs = |t: &[Turn]| t.iter().map(|t| t.seq).collect::<Vec<_>>();
                Ok((
                    seqs(&w.turns[..w.raw_from]),
                    seqs(&w.turns[w.raw_from..]),
                    due,
                ))
            })
            .unwrap()
    }

    #[test]
    fn the_last_six_turns_stay_raw_when_a_window_closes_after_twenty_turns() {
        let n = u64::from(SESSION_MAX_TURNS) + 1;
        let (summarised, raw, due) = session_of(n, 0, n as i64 * 60_000);
        assert_eq!(
            raw,
            (15..21).collect::<Vec<_>>(),
            "turn 21 opened a new window"
        );
        assert_eq!(summarised, (0..15).collect::<Vec<_>>());
        assert!(due, "older turns are queued for summaries");
    }

    #[test]
    fn the_last_six_turns_stay_raw_after_a_day_away() {
        let (summarised, raw, _) = session_of(8, 0, 8 * 60_000 + SESSION_IDLE_MS + DAY_MS);
        assert_eq!(raw, (2..8).collect::<Vec<_>>());
        assert_eq!(summarised, [0, 1]);
    }

    #[test]
    fn a_session_of_six_turns_is_all_raw_and_queues_no_summaries() {
        let (summarised, raw, due) = session_of(6, 0, 6 * 60_000);
        assert_eq!(raw.len(), RAW_TURNS);
        assert!(summarised.is_empty() && !due);
    }
}
