//! The archive tier: raw turns past the retention period leave their session and are kept
//! here until the archive retention period passes, then purged.
//!
//! Archived turns live under the user's prefix (`("u", tenant, user, "arch", session, seq)`,
//! with a per-session [`ArchiveRow`]), so they are sealed with the user's data key like
//! every user value and go when the user is forgotten. A session's archive is indexed in the
//! expiry index at its row's `purge_at` (the oldest archived turn's creation plus the archive
//! period), which is how the retention job finds it. Deleting a session's memory leaves its
//! archive: the archive is the operator's record, and only forgetting the user removes it.
//!
//! Moving turns writes every one of them again, so [`UserData::apply_retention`] moves at
//! most a byte budget per transaction; what is left stays due and is moved by the next call.

use crate::error::Result;
use crate::keyspace::ExpiryTarget;
use crate::kv::RangeOptions;
use crate::model::{ArchiveRow, ArchivedTurn, Timestamp, Turn};

use super::UserData;

/// Turns read per page when looking for the end of what to purge.
const PAGE: usize = 100;

/// The retention of raw turns and of the archive, passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionRule {
    /// Now.
    pub now: Timestamp,
    /// How long raw turns stay in their session, in milliseconds.
    pub retention_ms: i64,
    /// How long a turn is kept in all (from its creation) before it is purged from the
    /// archive, in milliseconds.
    pub archive_ms: i64,
}

fn archive_target(session: &str) -> ExpiryTarget {
    ExpiryTarget::Archive {
        session_id: session.to_owned(),
    }
}

impl UserData<'_> {
    /// Applies raw-turn retention to a session: moves its turns created before
    /// `now - retention_ms` to the archive (until their encoded size passes `budget`, which
    /// is reduced by what was moved; at least one turn is moved), re-indexes the session at
    /// its oldest remaining turn plus `retention_ms`, and removes the session when no turn is
    /// left. Returns the number of turns moved.
    pub fn apply_retention(
        &mut self,
        session: &str,
        rule: RetentionRule,
        budget: &mut usize,
    ) -> Result<usize> {
        let Some(mut row) = self.session(session)? else {
            return Ok(0);
        };
        let cutoff = rule.now.plus_millis(-rule.retention_ms);
        let turns = self.turns_from(session, 0)?;
        let mut moved = 0;
        for turn in turns.iter().take_while(|t| t.created_at < cutoff) {
            if moved > 0 && *budget == 0 {
                break;
            }
            *budget = budget.saturating_sub(self.archive_turn(turn, rule)?);
            moved += 1;
        }
        if moved == turns.len() {
            self.delete_session(session)?;
            return Ok(moved);
        }
        let target = ExpiryTarget::Session {
            session_id: session.to_owned(),
        };
        self.txn
            .clear(&self.expiry_key(row.retain_until, &target))?;
        if moved > 0 {
            self.clear_turns_before(session, turns[moved].seq)?;
        }
        row.retain_until = turns[moved].created_at.plus_millis(rule.retention_ms);
        self.txn
            .set(&self.expiry_key(row.retain_until, &target), b"")?;
        self.put("session", &self.keys.session(session), &row)?;
        Ok(moved)
    }

    /// Writes one turn to its session's archive; returns the bytes written.
    fn archive_turn(&mut self, turn: &Turn, rule: RetentionRule) -> Result<usize> {
        let session = &turn.session_id;
        let archived = ArchivedTurn {
            turn: turn.clone(),
            archived_at: rule.now,
        };
        let key = self.keys.archived_turn(session, turn.seq);
        let size = self.put_len("archived turn", &key, &archived)?;
        let purge_at = turn.created_at.plus_millis(rule.archive_ms);
        let row_key = self.keys.archive(session);
        let row = match self.get::<ArchiveRow>("archive row", &row_key)? {
            Some(mut row) => {
                if purge_at < row.purge_at {
                    self.txn
                        .clear(&self.expiry_key(row.purge_at, &archive_target(session)))?;
                    row.purge_at = purge_at;
                }
                row.turns += 1;
                row
            }
            None => ArchiveRow {
                session_id: session.clone(),
                turns: 1,
                purge_at,
            },
        };
        self.txn.set(
            &self.expiry_key(row.purge_at, &archive_target(session)),
            b"",
        )?;
        self.put("archive row", &row_key, &row)?;
        Ok(size)
    }

    /// Purges a session's archived turns created before `now - archive_ms`, re-indexes the
    /// archive at its oldest remaining turn plus `archive_ms`, and removes the archive row
    /// when no turn is left. Returns the number of turns purged.
    pub fn purge_archive(&mut self, session: &str, rule: RetentionRule) -> Result<usize> {
        let row_key = self.keys.archive(session);
        let Some(mut row) = self.get::<ArchiveRow>("archive row", &row_key)? else {
            return Ok(0);
        };
        let cutoff = rule.now.plus_millis(-rule.archive_ms);
        let range = self.keys.archived_turns(session);
        let mut begin = range.begin.clone();
        let mut purged = 0;
        let mut oldest_kept = None;
        'pages: loop {
            let rows = self
                .txn
                .get_range(&begin, &range.end, RangeOptions::first(PAGE))?;
            for (key, value) in &rows {
                let archived: ArchivedTurn = self.open("archived turn", key, value)?;
                if archived.turn.created_at >= cutoff {
                    oldest_kept = Some((key.clone(), archived.turn.created_at));
                    break 'pages;
                }
                purged += 1;
            }
            match rows.last() {
                Some((last, _)) if rows.len() == PAGE => begin = [last, &[0x00][..]].concat(),
                Some(_) | None => break,
            }
        }
        let end = oldest_kept.as_ref().map_or(&range.end, |(key, _)| key);
        self.txn.clear_range(&range.begin, end)?;
        self.txn
            .clear(&self.expiry_key(row.purge_at, &archive_target(session)))?;
        match oldest_kept {
            Some((_, created_at)) => {
                row.turns = row.turns.saturating_sub(purged as u64);
                row.purge_at = created_at.plus_millis(rule.archive_ms);
                self.txn.set(
                    &self.expiry_key(row.purge_at, &archive_target(session)),
                    b"",
                )?;
                self.put("archive row", &row_key, &row)?;
            }
            None => self.txn.clear(&row_key)?,
        }
        Ok(purged)
    }

    /// Every archive row of the user, by session id.
    pub fn archive_rows(&mut self) -> Result<Vec<ArchiveRow>> {
        let range = self.keys.archives();
        self.decode_range("archive row", &range.begin, &range.end)
    }

    /// Up to `limit` archived turns (0: all), of one session or of all, by session then
    /// sequence number, after the turn `after` (session, seq; exclusive).
    pub fn archived_turns(
        &mut self,
        session: Option<&str>,
        after: Option<(&str, u64)>,
        limit: usize,
    ) -> Result<Vec<ArchivedTurn>> {
        let range = match session {
            Some(session) => self.keys.archived_turns(session),
            None => self.keys.all_archived_turns(),
        };
        let begin = match after {
            Some((session, seq)) => {
                let after = [self.keys.archived_turn(session, seq), vec![0x00]].concat();
                after.max(range.begin)
            }
            None => range.begin,
        };
        if begin >= range.end {
            return Ok(Vec::new());
        }
        let rows = self
            .txn
            .get_range(&begin, &range.end, RangeOptions::first(limit))?;
        rows.iter()
            .map(|(k, v)| self.open("archived turn", k, v))
            .collect()
    }

    /// Clears the expiry entries of the user's archives (the rows themselves go with the
    /// user's range); returns how many.
    pub(super) fn clear_archive_index(&mut self) -> Result<usize> {
        let rows = self.archive_rows()?;
        for row in &rows {
            self.txn
                .clear(&self.expiry_key(row.purge_at, &archive_target(&row.session_id)))?;
        }
        Ok(rows.len())
    }
}

#[cfg(test)]
mod tests;
