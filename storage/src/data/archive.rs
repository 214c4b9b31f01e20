//! The archive tier: what raw-turn retention keeps of the turns it takes out of their
//! sessions, until the archive retention period passes.
//!
//! Retention deletes a turn past the retention period from its session (with its stored
//! summary) and keeps, by [`ArchiveMode`]: nothing (`Off`, the default and the seed's rule);
//! a de-identified [`TurnDigest`] (`Digests`: keyed hashes of the texts, the seed's L3); or
//! the whole turn (`FullText`, an explicit option). Archived entries live under the user's
//! prefix (`("u", tenant, user, "arch" | "archd", session, seq)`, with a per-session
//! [`ArchiveRow`]), so they are sealed with the user's data key like every user value and go
//! when the user is forgotten. A session's archive is indexed in the expiry index at its
//! row's `purge_at` (the oldest archived turn's creation plus the archive period), which is
//! how the retention job finds it. Deleting a session's memory leaves its archive: the
//! archive is the auditors' record, and only forgetting the user removes it.
//!
//! A digest's hashes are HMAC-SHA256 of `"dialogue" ‖ 0 ‖ role ‖ 0 ‖ normalised text` under
//! the tenant's anchor key (the key service's, apart from the keys that wrap data keys), so
//! the text cannot be read back nor guessed without the key; an auditor checks a text they
//! hold with [`UserData::match_archived`]. Without a key service the hash is plain SHA-256
//! (`key_id: None`), which hides long texts but not short ones.
//!
//! Archiving writes every kept turn again, so [`UserData::apply_retention`] archives at most
//! a byte budget per transaction; what is left stays due and is moved by the next call.

use serde::de::DeserializeOwned;
use sha2::{Digest as _, Sha256};

use crate::error::Result;
use crate::keyspace::{ExpiryTarget, KeyRange};
use crate::kv::RangeOptions;
use crate::types::{ArchiveMode, ArchiveRow, ArchivedTurn, Timestamp, Turn, TurnDigest};

use super::UserData;

/// Entries read per page when looking for the end of what to purge.
const PAGE: usize = 100;

/// Digests compared per page by [`UserData::match_archived`].
const MATCH_PAGE: usize = 1_000;

/// The retention of raw turns and of the archive, passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionRule {
    /// Now.
    pub now: Timestamp,
    /// How long raw turns stay in their session, in milliseconds.
    pub retention_ms: i64,
    /// How long an archived turn is kept (from its creation) before it is purged, in
    /// milliseconds.
    pub archive_ms: i64,
    /// What the archive keeps of a turn.
    pub mode: ArchiveMode,
}

/// Which text of a turn a digest hash stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user's text.
    User,
    /// The assistant's text.
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

fn archive_target(session: &str) -> ExpiryTarget {
    ExpiryTarget::Archive {
        session_id: session.to_owned(),
    }
}

/// A text as it is hashed: trimmed, every run of whitespace one space.
fn normalised(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn hash_message(role: Role, text: &str) -> Vec<u8> {
    [
        b"dialogue\0".as_slice(),
        role.as_str().as_bytes(),
        b"\0",
        normalised(text).as_bytes(),
    ]
    .concat()
}

fn chars(text: &str) -> u32 {
    u32::try_from(text.chars().count()).unwrap_or(u32::MAX)
}

impl UserData<'_> {
    /// Applies raw-turn retention to a session: takes its turns created before
    /// `now - retention_ms` out of it (with their summaries), archiving what `rule.mode`
    /// keeps of each until the archived bytes pass `budget` (which is reduced by what was
    /// written; at least one turn is taken), re-indexes the session at its oldest remaining
    /// turn plus `retention_ms`, and removes the session when no turn is left. Returns the
    /// number of turns taken out.
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
            let written = match rule.mode {
                ArchiveMode::Off => 0,
                ArchiveMode::Digests => self.archive_digest(turn, rule)?,
                ArchiveMode::FullText => self.archive_turn(turn, rule)?,
            };
            *budget = budget.saturating_sub(written);
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
            let below = turns[moved].seq;
            self.clear_turns_before(session, below)?;
            let summaries = self.keys.summaries(session);
            self.txn
                .clear_range(&summaries.begin, &self.keys.summary(session, below))?;
        }
        row.retain_until = turns[moved].created_at.plus_millis(rule.retention_ms);
        self.txn
            .set(&self.expiry_key(row.retain_until, &target), b"")?;
        self.put("session", &self.keys.session(session), &row)?;
        Ok(moved)
    }

    /// Writes one whole turn to its session's archive; returns the bytes written.
    fn archive_turn(&mut self, turn: &Turn, rule: RetentionRule) -> Result<usize> {
        let archived = ArchivedTurn {
            turn: turn.clone(),
            archived_at: rule.now,
        };
        let key = self.keys.archived_turn(&turn.session_id, turn.seq);
        let size = self.put_len("archived turn", &key, &archived)?;
        self.note_archived(&turn.session_id, turn.created_at, rule)?;
        Ok(size)
    }

    /// Writes one turn's digest to its session's archive; returns the bytes written.
    fn archive_digest(&mut self, turn: &Turn, rule: RetentionRule) -> Result<usize> {
        let (user_hash, key_id) = self.dialogue_hash(Role::User, &turn.user_text, None)?;
        let (assistant_hash, _) =
            self.dialogue_hash(Role::Assistant, &turn.assistant_text, key_id)?;
        let digest = TurnDigest {
            session_id: turn.session_id.clone(),
            seq: turn.seq,
            route: turn.route.clone(),
            created_at: turn.created_at,
            archived_at: rule.now,
            user_hash,
            assistant_hash,
            key_id,
            user_chars: chars(&turn.user_text),
            assistant_chars: chars(&turn.assistant_text),
            pii_level: turn.pii_level,
        };
        let key = self.keys.archived_digest(&turn.session_id, turn.seq);
        let size = self.put_len("archived digest", &key, &digest)?;
        self.note_archived(&turn.session_id, turn.created_at, rule)?;
        Ok(size)
    }

    /// The hash of `text` said by `role`, under key `key_id` (the current key when `None`),
    /// and the key id used; plain SHA-256 and `None` without a key service.
    fn dialogue_hash(
        &self,
        role: Role,
        text: &str,
        key_id: Option<u32>,
    ) -> Result<([u8; 32], Option<u32>)> {
        let message = hash_message(role, text);
        match self.keyspace.encryption() {
            Some(encryption) => {
                let keys = encryption.key_service();
                let id = key_id.unwrap_or_else(|| keys.current());
                Ok((keys.anchor_mac(self.tenant, id, &message)?, Some(id)))
            }
            None => Ok((Sha256::digest(&message).into(), None)),
        }
    }

    /// Counts an archived turn created at `created_at` in its session's archive row and keeps
    /// the row's purge entry at its oldest turn.
    fn note_archived(
        &mut self,
        session: &str,
        created_at: Timestamp,
        rule: RetentionRule,
    ) -> Result<()> {
        let purge_at = created_at.plus_millis(rule.archive_ms);
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
                session_id: session.to_owned(),
                turns: 1,
                purge_at,
            },
        };
        self.txn.set(
            &self.expiry_key(row.purge_at, &archive_target(session)),
            b"",
        )?;
        self.put("archive row", &row_key, &row)
    }

    /// Purges a session's archived turns and digests created before `now - archive_ms`,
    /// re-indexes the archive at its oldest remaining entry plus `archive_ms`, and removes the
    /// archive row when nothing is left. Returns the number of entries purged.
    pub fn purge_archive(&mut self, session: &str, rule: RetentionRule) -> Result<usize> {
        let row_key = self.keys.archive(session);
        let Some(mut row) = self.get::<ArchiveRow>("archive row", &row_key)? else {
            return Ok(0);
        };
        let cutoff = rule.now.plus_millis(-rule.archive_ms);
        let (turns, oldest_turn) = self.purge_before(
            "archived turn",
            &self.keys.archived_turns(session),
            cutoff,
            |a: &ArchivedTurn| a.turn.created_at,
        )?;
        let (digests, oldest_digest) = self.purge_before(
            "archived digest",
            &self.keys.archived_digests(session),
            cutoff,
            |d: &TurnDigest| d.created_at,
        )?;
        let purged = turns + digests;
        self.txn
            .clear(&self.expiry_key(row.purge_at, &archive_target(session)))?;
        let oldest_kept = match (oldest_turn, oldest_digest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match oldest_kept {
            Some(created_at) => {
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

    /// Clears the entries of `range` (in sequence order, so in creation order) created before
    /// `cutoff`; returns how many, and the creation time of the oldest one kept.
    fn purge_before<T: DeserializeOwned>(
        &mut self,
        what: &'static str,
        range: &KeyRange,
        cutoff: Timestamp,
        created_at: impl Fn(&T) -> Timestamp,
    ) -> Result<(usize, Option<Timestamp>)> {
        let mut begin = range.begin.clone();
        let mut purged = 0;
        let mut oldest_kept = None;
        'pages: loop {
            let rows = self
                .txn
                .get_range(&begin, &range.end, RangeOptions::first(PAGE))?;
            for (key, value) in &rows {
                let entry: T = self.open(what, key, value)?;
                let at = created_at(&entry);
                if at >= cutoff {
                    oldest_kept = Some((key.clone(), at));
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
        Ok((purged, oldest_kept.map(|(_, at)| at)))
    }

    /// Every archive row of the user, by session id.
    pub fn archive_rows(&mut self) -> Result<Vec<ArchiveRow>> {
        let range = self.keys.archives();
        self.decode_range("archive row", &range.begin, &range.end)
    }

    /// Up to `limit` archived whole turns (0: all), of one session or of all, by session then
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
        let after = after.map(|(session, seq)| self.keys.archived_turn(session, seq));
        self.archive_page("archived turn", range, after, limit)
    }

    /// Up to `limit` archived digests (0: all), of one session or of all, by session then
    /// sequence number, after the turn `after` (session, seq; exclusive).
    pub fn archived_digests(
        &mut self,
        session: Option<&str>,
        after: Option<(&str, u64)>,
        limit: usize,
    ) -> Result<Vec<TurnDigest>> {
        let range = match session {
            Some(session) => self.keys.archived_digests(session),
            None => self.keys.all_archived_digests(),
        };
        let after = after.map(|(session, seq)| self.keys.archived_digest(session, seq));
        self.archive_page("archived digest", range, after, limit)
    }

    fn archive_page<T: DeserializeOwned>(
        &mut self,
        what: &'static str,
        range: KeyRange,
        after: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<Vec<T>> {
        let begin = match after {
            Some(after) => [after, vec![0x00]].concat().max(range.begin),
            None => range.begin,
        };
        if begin >= range.end {
            return Ok(Vec::new());
        }
        let rows = self
            .txn
            .get_range(&begin, &range.end, RangeOptions::first(limit))?;
        rows.iter().map(|(k, v)| self.open(what, k, v)).collect()
    }

    /// The archived digests whose `role` text is `text` (normalised as when it was hashed),
    /// by session then sequence number: whether the user (or the assistant) said it, when,
    /// without any text in the archive.
    pub fn match_archived(&mut self, role: Role, text: &str) -> Result<Vec<TurnDigest>> {
        let range = self.keys.all_archived_digests();
        let mut begin = range.begin.clone();
        let mut hashes: Vec<(Option<u32>, [u8; 32])> = Vec::new();
        let mut found = Vec::new();
        loop {
            let rows = self
                .txn
                .get_range(&begin, &range.end, RangeOptions::first(MATCH_PAGE))?;
            for (key, value) in &rows {
                let digest: TurnDigest = self.open("archived digest", key, value)?;
                let hash = match hashes.iter().find(|(id, _)| *id == digest.key_id) {
                    Some((_, hash)) => *hash,
                    None => {
                        let (hash, _) = self.dialogue_hash(role, text, digest.key_id)?;
                        hashes.push((digest.key_id, hash));
                        hash
                    }
                };
                let stored = match role {
                    Role::User => digest.user_hash,
                    Role::Assistant => digest.assistant_hash,
                };
                if stored == hash {
                    found.push(digest);
                }
            }
            match rows.last() {
                Some((last, _)) if rows.len() == MATCH_PAGE => {
                    begin = [last, &[0x00][..]].concat();
                }
                Some(_) | None => break,
            }
        }
        Ok(found)
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
