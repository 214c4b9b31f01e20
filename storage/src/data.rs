//! The typed data layer: per-user reads and writes inside one transaction.
//!
//! [`UserData`] borrows a [`Txn`] and the keys of one user; every method is one or a few
//! key-value operations in that transaction, so callers compose several into one atomic
//! write. Invariants kept here: a record's expiry-index entry is written and removed in the
//! same transaction as the record; forgetting a user leaves no key of theirs anywhere.
//!
//! The archive tier ([`archive`]), identity anchors ([`anchor`]), counts of repeated
//! choices ([`choice`]), intent versions and turn summaries (`intents`), the queue of
//! pending inference ([`pending`]) and the listing of a tenant's users ([`users`]) are in
//! their own modules.

pub mod anchor;
pub mod archive;
pub mod choice;
mod intents;
pub mod notice;
pub mod pending;
pub mod users;

use self::intents::intent_target;
use crate::codec::{decode, encode};
use crate::error::Result;
use crate::keyspace::{ExpiryTarget, Keyspace, UserKeys};
use crate::kv::{RangeOptions, Txn};
use crate::types::{
    Embedding, MemoryKind, MemoryRecord, ReviewFlag, SessionRow, SessionRule, Timestamp, Turn,
    UserHeader,
};

/// One user's data inside one transaction.
pub struct UserData<'t> {
    txn: &'t mut Txn,
    keyspace: &'t Keyspace,
    keys: UserKeys,
    tenant: &'t str,
    user: &'t str,
    /// The user's data key, once loaded (values are sealed when the keyspace has master keys).
    data_key: Option<crate::crypto::DataKey>,
}

/// What [`UserData::forget`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForgetReport {
    /// Memory records removed.
    pub records: usize,
    /// Expiry-index entries removed.
    pub expiry_entries: usize,
    /// The tenant's compliance notices naming the user, removed.
    pub notices: usize,
}

impl<'t> UserData<'t> {
    /// The data of (`tenant`, `user`) in `txn`.
    pub fn new(txn: &'t mut Txn, keyspace: &'t Keyspace, tenant: &'t str, user: &'t str) -> Self {
        let keys = keyspace.user(tenant, user);
        UserData {
            txn,
            keyspace,
            keys,
            tenant,
            user,
            data_key: None,
        }
    }

    /// The user's id.
    pub fn user(&self) -> &str {
        self.user
    }

    /// The user's keys.
    pub fn keys(&self) -> &UserKeys {
        &self.keys
    }

    /// The user header, if the user has written anything.
    pub fn header(&mut self) -> Result<Option<UserHeader>> {
        self.get("user header", &self.keys.header())
    }

    /// Writes the user header.
    pub fn put_header(&mut self, header: &UserHeader) -> Result<()> {
        self.put("user header", &self.keys.header(), header)
    }

    /// Appends a turn to its session: assigns the next sequence number from the header,
    /// updates the session row (opening a new working-memory window when `rule` says the
    /// current one is closed), and returns the updated session row.
    pub fn append_turn(&mut self, turn: &mut Turn, rule: SessionRule) -> Result<SessionRow> {
        debug_assert!(rule.max_turns > 0);
        let mut header = self.header()?.unwrap_or_default();
        header.created_at.get_or_insert(turn.created_at);
        let seq = header.next_turn_seq;
        header.next_turn_seq += 1;
        turn.seq = seq;
        let session_key = self.keys.session(&turn.session_id);
        let session = match self.get::<SessionRow>("session", &session_key)? {
            Some(mut row) => {
                let idle = turn.created_at.0 - row.last_turn_at.0 > rule.idle_ms;
                if let Some(at) = row.idle_at {
                    self.txn
                        .clear(&self.expiry_key(at, &idle_target(&turn.session_id)))?;
                }
                if idle || row.idle_at.is_none() || row.window_turns >= rule.max_turns {
                    row.window_start_seq = seq;
                    row.window_turns = 0;
                }
                row.last_turn_at = turn.created_at;
                row.turn_count += 1;
                row.window_turns += 1;
                row.idle_at = Some(turn.created_at.plus_millis(rule.idle_ms));
                row
            }
            None => {
                let retain_until = turn.created_at.plus_millis(rule.retention_ms);
                let target = ExpiryTarget::Session {
                    session_id: turn.session_id.clone(),
                };
                self.txn.set(&self.expiry_key(retain_until, &target), b"")?;
                SessionRow {
                    session_id: turn.session_id.clone(),
                    opened_at: turn.created_at,
                    last_turn_at: turn.created_at,
                    turn_count: 1,
                    window_start_seq: seq,
                    window_turns: 1,
                    retain_until,
                    idle_at: Some(turn.created_at.plus_millis(rule.idle_ms)),
                }
            }
        };
        if let Some(at) = session.idle_at {
            self.txn
                .set(&self.expiry_key(at, &idle_target(&turn.session_id)), b"")?;
        }
        self.put("session", &session_key, &session)?;
        self.put("turn", &self.keys.turn(&turn.session_id, seq), turn)?;
        self.put_header(&header)?;
        Ok(session)
    }

    /// One session row.
    pub fn session(&mut self, session: &str) -> Result<Option<SessionRow>> {
        self.get("session", &self.keys.session(session))
    }

    /// The turns of a session with sequence numbers from `from_seq`, oldest first.
    pub fn turns_from(&mut self, session: &str, from_seq: u64) -> Result<Vec<Turn>> {
        let range = self.keys.turns(session);
        self.decode_range("turn", &self.keys.turn(session, from_seq), &range.end)
    }

    /// Writes a review flag.
    pub fn put_flag(&mut self, flag: &ReviewFlag) -> Result<()> {
        self.put("review flag", &self.keys.flag(&flag.flag_id), flag)
    }

    /// Removes a review flag.
    pub fn remove_flag(&mut self, flag_id: &str) -> Result<()> {
        self.txn.clear(&self.keys.flag(flag_id))
    }

    /// All review flags of the user.
    pub fn flags(&mut self) -> Result<Vec<ReviewFlag>> {
        let range = self.keys.flags();
        self.decode_range("review flag", &range.begin, &range.end)
    }

    /// The last `limit` turns of a session, oldest first (0 = all).
    pub fn last_turns(&mut self, session: &str, limit: usize) -> Result<Vec<Turn>> {
        let range = self.keys.turns(session);
        let rows = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::last(limit))?;
        let mut turns = rows
            .iter()
            .map(|(k, v)| self.open::<Turn>("turn", k, v))
            .collect::<Result<Vec<_>>>()?;
        turns.reverse();
        Ok(turns)
    }

    /// Removes the turns of a session with sequence numbers below `below_seq`; returns how many.
    pub fn clear_turns_before(&mut self, session: &str, below_seq: u64) -> Result<usize> {
        let range = self.keys.turns(session);
        let end = self.keys.turn(session, below_seq);
        let n = self
            .txn
            .get_range(&range.begin, &end, RangeOptions::default())?
            .len();
        self.txn.clear_range(&range.begin, &end)?;
        Ok(n)
    }

    /// Removes a whole session (its row, turns and expiry entry); returns the number of turns
    /// removed, or `None` if the session does not exist.
    pub fn delete_session(&mut self, session: &str) -> Result<Option<usize>> {
        let Some(row) = self.session(session)? else {
            return Ok(None);
        };
        let target = ExpiryTarget::Session {
            session_id: session.to_owned(),
        };
        self.txn
            .clear(&self.expiry_key(row.retain_until, &target))?;
        if let Some(at) = row.idle_at {
            self.txn
                .clear(&self.expiry_key(at, &idle_target(session)))?;
        }
        let range = self.keys.turns(session);
        let n = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::default())?
            .len();
        self.txn.clear_range(&range.begin, &range.end)?;
        let summaries = self.keys.summaries(session);
        self.txn.clear_range(&summaries.begin, &summaries.end)?;
        self.txn.clear(&self.keys.session(session))?;
        Ok(Some(n))
    }

    /// Closes a session's working-memory window if it has been idle until `now`: the next
    /// turn opens a new window, and contexts meanwhile hold no turns of it. Returns whether
    /// it closed one.
    pub fn close_idle_window(&mut self, session: &str, now: Timestamp) -> Result<bool> {
        let Some(mut row) = self.session(session)? else {
            return Ok(false);
        };
        let Some(at) = row.idle_at.filter(|at| *at <= now) else {
            return Ok(false);
        };
        self.txn
            .clear(&self.expiry_key(at, &idle_target(session)))?;
        row.idle_at = None;
        row.window_turns = 0;
        row.window_start_seq = self.header()?.unwrap_or_default().next_turn_seq;
        self.put("session", &self.keys.session(session), &row)?;
        Ok(true)
    }

    /// The user's tenant's cached schema metadata live at `now` ([`crate::schema`]).
    pub fn tenant_schema(&mut self, now: Timestamp) -> Result<Vec<crate::schema::SchemaEntry>> {
        crate::schema::live(self.txn, self.keyspace, self.tenant, now)
    }

    /// The oldest turn still stored of a session (its first, unless retention removed it).
    pub fn first_turn(&mut self, session: &str) -> Result<Option<Turn>> {
        let range = self.keys.turns(session);
        let rows = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::first(1))?;
        rows.first()
            .map(|(k, v)| self.open::<Turn>("turn", k, v))
            .transpose()
    }

    /// The turn of a session with sequence number `seq`.
    pub fn turn(&mut self, session: &str, seq: u64) -> Result<Option<Turn>> {
        self.get("turn", &self.keys.turn(session, seq))
    }

    /// Every session row of the user, by session id.
    pub fn sessions(&mut self) -> Result<Vec<SessionRow>> {
        let range = self.keys.sessions();
        self.decode_range("session", &range.begin, &range.end)
    }

    /// A memory record.
    pub fn record(&mut self, kind: MemoryKind, memory_id: &str) -> Result<Option<MemoryRecord>> {
        self.get("memory record", &self.keys.record(kind, memory_id))
    }

    /// Writes a memory record, keeping its expiry-index entry in step: the old entry (if the
    /// record existed with another expiry) is removed and the new one written.
    pub fn put_record(&mut self, record: &MemoryRecord) -> Result<()> {
        let key = self.keys.record(record.kind, &record.memory_id);
        let old = self.get::<MemoryRecord>("memory record", &key)?;
        let old_expiry = old.and_then(|r| r.expires_at);
        if old_expiry != record.expires_at {
            let target = ExpiryTarget::Record {
                kind: record.kind,
                memory_id: record.memory_id.clone(),
            };
            if let Some(at) = old_expiry {
                self.txn.clear(&self.expiry_key(at, &target))?;
            }
            if let Some(at) = record.expires_at {
                self.txn.set(&self.expiry_key(at, &target), b"")?;
            }
        }
        self.put("memory record", &key, record)
    }

    /// Removes a record, its embedding and its expiry entry; returns whether it existed.
    pub fn remove_record(&mut self, kind: MemoryKind, memory_id: &str) -> Result<bool> {
        let Some(record) = self.record(kind, memory_id)? else {
            return Ok(false);
        };
        if let Some(at) = record.expires_at {
            let target = ExpiryTarget::Record {
                kind,
                memory_id: memory_id.to_owned(),
            };
            self.txn.clear(&self.expiry_key(at, &target))?;
        }
        self.txn.clear(&self.keys.record(kind, memory_id))?;
        self.remove_embedding(memory_id)?;
        Ok(true)
    }

    /// All records of one kind, by memory id.
    pub fn records(&mut self, kind: MemoryKind) -> Result<Vec<MemoryRecord>> {
        let range = self.keys.records(kind);
        self.decode_range("memory record", &range.begin, &range.end)
    }

    /// Writes the embedding of a memory (no vector is pending for it any more).
    pub fn put_embedding(&mut self, memory_id: &str, embedding: &Embedding) -> Result<()> {
        self.clear_pending(memory_id)?;
        self.put("embedding", &self.keys.embedding(memory_id), embedding)
    }

    /// Removes the embedding of a memory, and any vector pending for it.
    pub fn remove_embedding(&mut self, memory_id: &str) -> Result<()> {
        self.clear_pending(memory_id)?;
        self.txn.clear(&self.keys.embedding(memory_id))
    }

    /// The embedding of a memory.
    pub fn embedding(&mut self, memory_id: &str) -> Result<Option<Embedding>> {
        self.get("embedding", &self.keys.embedding(memory_id))
    }

    /// Every embedding of the user, as (memory id, embedding), for index rebuilds.
    pub fn embeddings(&mut self) -> Result<Vec<(String, Embedding)>> {
        let range = self.keys.embeddings();
        let rows = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::default())?;
        rows.iter()
            .map(|(k, v)| {
                let id = self
                    .keys
                    .parse_embedding(k)
                    .ok_or_else(|| crate::Error::Decode {
                        what: "embedding key",
                        reason: "not an embedding key".into(),
                    })?;
                Ok((id, self.open("embedding", k, v)?))
            })
            .collect()
    }

    /// The user's sensitive-read counts (the actors' circuit breaker keeps its own row type),
    /// sealed like every other value of the user.
    pub fn sensitive_reads<T: serde::de::DeserializeOwned>(&mut self) -> Result<Option<T>> {
        self.get("sensitive reads", &self.keys.sensitive_reads())
    }

    /// Stores the user's sensitive-read counts.
    pub fn put_sensitive_reads<T: serde::Serialize>(&mut self, row: &T) -> Result<()> {
        self.put("sensitive reads", &self.keys.sensitive_reads(), row)
    }

    /// Clears the user's sensitive-read counts.
    pub fn clear_sensitive_reads(&mut self) -> Result<()> {
        self.txn.clear(&self.keys.sensitive_reads())
    }

    /// Removes every key of this user, the expiry-index entries that point at them and the
    /// user's mark in the work index of pending inference.
    pub fn forget(&mut self) -> Result<ForgetReport> {
        let mut report = ForgetReport::default();
        let records = self.keys.all_records();
        let rows = self
            .txn
            .get_range(&records.begin, &records.end, RangeOptions::default())?;
        for (key, value) in rows {
            let record: MemoryRecord = self.open("memory record", &key, &value)?;
            report.records += 1;
            if let Some(at) = record.expires_at {
                let target = ExpiryTarget::Record {
                    kind: record.kind,
                    memory_id: record.memory_id,
                };
                self.txn.clear(&self.expiry_key(at, &target))?;
                report.expiry_entries += 1;
            }
        }
        for session in self.sessions()? {
            if let Some(at) = session.idle_at {
                self.txn
                    .clear(&self.expiry_key(at, &idle_target(&session.session_id)))?;
                report.expiry_entries += 1;
            }
            let target = ExpiryTarget::Session {
                session_id: session.session_id,
            };
            self.txn
                .clear(&self.expiry_key(session.retain_until, &target))?;
            report.expiry_entries += 1;
        }
        report.expiry_entries += self.clear_archive_index()?;
        for intent in self.all_intents()? {
            if let Some(at) = intent.expires_at() {
                self.txn
                    .clear(&self.expiry_key(at, &intent_target(&intent)))?;
                report.expiry_entries += 1;
            }
        }
        self.clear_pending_mark()?;
        report.notices = self.clear_notices()?;
        let all = self.keys.all();
        self.txn.clear_range(&all.begin, &all.end)?;
        Ok(report)
    }

    fn expiry_key(&self, at: Timestamp, target: &ExpiryTarget) -> Vec<u8> {
        self.keyspace.expiry(at, self.tenant, self.user, target)
    }

    fn get<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &'static str,
        key: &[u8],
    ) -> Result<Option<T>> {
        match self.txn.get(key)? {
            Some(v) => Ok(Some(self.open(what, key, &v)?)),
            None => Ok(None),
        }
    }

    fn put<T: serde::Serialize>(
        &mut self,
        what: &'static str,
        key: &[u8],
        value: &T,
    ) -> Result<()> {
        self.put_len(what, key, value).map(drop)
    }

    /// [`UserData::put`], returning the size of the stored value.
    fn put_len<T: serde::Serialize>(
        &mut self,
        what: &'static str,
        key: &[u8],
        value: &T,
    ) -> Result<usize> {
        let plain = encode(what, value)?;
        let stored = match self.load_data_key(true)? {
            Some(data_key) => data_key.seal(key, &plain)?,
            None => plain,
        };
        self.txn.set(key, &stored)?;
        Ok(stored.len())
    }

    fn decode_range<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &'static str,
        begin: &[u8],
        end: &[u8],
    ) -> Result<Vec<T>> {
        let rows = self.txn.get_range(begin, end, RangeOptions::default())?;
        rows.iter().map(|(k, v)| self.open(what, k, v)).collect()
    }

    /// Decodes a stored value of this user, opening it first if it is sealed; `key` is the
    /// value's key (a sealed value is bound to it).
    fn open<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &'static str,
        key: &[u8],
        bytes: &[u8],
    ) -> Result<T> {
        if !crate::crypto::is_sealed(bytes) {
            return decode(what, bytes);
        }
        let data_key = self.load_data_key(false)?;
        open_with(data_key, what, key, bytes)
    }

    /// The user's data key: loaded (and unwrapped) once per transaction, created on the first
    /// write when `create`. `None` when the keyspace seals nothing, or (reading) when the user
    /// has none.
    fn load_data_key(&mut self, create: bool) -> Result<Option<&crate::crypto::DataKey>> {
        let Some(encryption) = self.keyspace.encryption() else {
            return Ok(None);
        };
        if self.data_key.is_none() {
            let row = self.keys.data_key();
            match self.txn.get(&row)? {
                Some(wrapped) => {
                    self.data_key = Some(encryption.open_data_key(self.tenant, &wrapped)?);
                }
                None if create => {
                    let (data_key, wrapped) = encryption.new_data_key(self.tenant)?;
                    self.txn.set(&row, &wrapped)?;
                    self.data_key = Some(data_key);
                }
                None => {}
            }
        }
        Ok(self.data_key.as_ref())
    }
}

fn idle_target(session: &str) -> ExpiryTarget {
    ExpiryTarget::SessionIdle {
        session_id: session.to_owned(),
    }
}

/// An expiry-index entry found by [`expired`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredRef {
    /// When the record expired.
    pub expires_at: Timestamp,
    /// Tenant of the record.
    pub tenant: String,
    /// User of the record.
    pub user: String,
    /// What expired.
    pub target: ExpiryTarget,
}

/// A page of expiry-index entries with `expires_at < now` after the key `after` (exclusive),
/// oldest first, with the cursor of the next page (`None` when this was the last).
pub fn expired_page(
    txn: &mut Txn,
    keyspace: &Keyspace,
    now: Timestamp,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<(Vec<ExpiredRef>, Option<Vec<u8>>)> {
    let range = keyspace.expiries_before(now);
    let begin = after.map_or_else(|| range.begin.clone(), |k| [k, &[0x00]].concat());
    let rows = txn.get_range(&begin, &range.end, RangeOptions::first(limit))?;
    let next = (limit > 0 && rows.len() == limit).then(|| rows[rows.len() - 1].0.clone());
    let refs = rows
        .iter()
        .map(|(k, _)| {
            let (expires_at, tenant, user, target) =
                keyspace
                    .parse_expiry(k)
                    .ok_or_else(|| crate::Error::Decode {
                        what: "expiry key",
                        reason: "not an expiry key".into(),
                    })?;
            Ok(ExpiredRef {
                expires_at,
                tenant,
                user,
                target,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((refs, next))
}

/// Up to `limit` expiry-index entries with `expires_at < now`, oldest first, for sweeps.
pub fn expired(
    txn: &mut Txn,
    keyspace: &Keyspace,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<ExpiredRef>> {
    Ok(expired_page(txn, keyspace, now, None, limit)?.0)
}

/// A stored value of a user's, read with their data key (`None`: the keyspace seals nothing,
/// or the user has no key) where it is sealed.
pub(crate) fn open_with<T: serde::de::DeserializeOwned>(
    data_key: Option<&crate::crypto::DataKey>,
    what: &'static str,
    key: &[u8],
    bytes: &[u8],
) -> Result<T> {
    if !crate::crypto::is_sealed(bytes) {
        return decode(what, bytes);
    }
    let Some(data_key) = data_key else {
        return Err(crate::Error::Decode {
            what,
            reason: "sealed, and the user has no data key (forgotten, or no key service)".into(),
        });
    };
    decode(what, &data_key.open(key, bytes)?)
}

mod idempotency;

#[cfg(test)]
mod tests;
