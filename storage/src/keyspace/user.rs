//! The keys of one user, under `("u", tenant, user)`.

use foundationdb_tuple::{Subspace, TuplePack};

use super::{KeyRange, WorkQueue};
use crate::types::{MemoryKind, Timestamp};

/// The keys under `("u", tenant, user)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserKeys {
    pub(super) space: Subspace,
}

impl UserKeys {
    /// Every key of this user.
    pub fn all(&self) -> KeyRange {
        KeyRange::of(&self.space)
    }

    /// The user header.
    pub fn header(&self) -> Vec<u8> {
        self.space.pack(&("hdr",))
    }

    /// The user's circuit breaker of sensitive reads: counts per reading principal, sealed.
    /// (`("breaker",)` held an unsealed per-user count before the counts moved into the
    /// user's actor; forgetting clears it with the rest of the prefix.)
    pub fn sensitive_reads(&self) -> Vec<u8> {
        self.space.pack(&("reads",))
    }

    /// The user's wrapped data key.
    pub fn data_key(&self) -> Vec<u8> {
        self.space.pack(&("dek",))
    }

    /// A session row.
    pub fn session(&self, session: &str) -> Vec<u8> {
        self.space.pack(&("sess", session))
    }

    /// All session rows, ordered by session id.
    pub fn sessions(&self) -> KeyRange {
        self.range(&("sess",))
    }

    /// A conversation turn.
    pub fn turn(&self, session: &str, seq: u64) -> Vec<u8> {
        self.space.pack(&("turn", session, seq))
    }

    /// The turns of one session, ordered by sequence number.
    pub fn turns(&self, session: &str) -> KeyRange {
        self.range(&("turn", session))
    }

    /// The model's summary of a turn.
    pub fn summary(&self, session: &str, seq: u64) -> Vec<u8> {
        self.space.pack(&("sum", session, seq))
    }

    /// The summaries of one session's turns, ordered by sequence number.
    pub fn summaries(&self, session: &str) -> KeyRange {
        self.range(&("sum", session))
    }

    /// Decodes a summary key into its turn's sequence number.
    pub fn parse_summary(&self, key: &[u8]) -> Option<u64> {
        let (tag, _session, seq): (String, String, u64) = self.space.unpack(key).ok()?;
        (tag == "sum").then_some(seq)
    }

    /// A memory record.
    pub fn record(&self, kind: MemoryKind, memory_id: &str) -> Vec<u8> {
        self.space.pack(&("rec", kind.as_str(), memory_id))
    }

    /// The records of one kind, ordered by memory id.
    pub fn records(&self, kind: MemoryKind) -> KeyRange {
        self.range(&("rec", kind.as_str()))
    }

    /// All records of every kind.
    pub fn all_records(&self) -> KeyRange {
        self.range(&("rec",))
    }

    /// One version of an intent.
    pub fn intent(&self, intent_type: &str, version: Timestamp) -> Vec<u8> {
        self.space.pack(&("intent", intent_type, version.0))
    }

    /// The versions of one intent type, oldest first.
    pub fn intents(&self, intent_type: &str) -> KeyRange {
        self.range(&("intent", intent_type))
    }

    /// All intents of every type.
    pub fn all_intents(&self) -> KeyRange {
        self.range(&("intent",))
    }

    /// The embedding of a memory.
    pub fn embedding(&self, memory_id: &str) -> Vec<u8> {
        self.space.pack(&("vec", memory_id))
    }

    /// All embeddings of this user.
    pub fn embeddings(&self) -> KeyRange {
        self.range(&("vec",))
    }

    /// The entry `id` of this user in `queue` (a memory id for embeddings).
    pub fn pending(&self, queue: WorkQueue, id: &str) -> Vec<u8> {
        self.space.pack(&(queue.tag(), id))
    }

    /// All entries of this user in `queue`, by id.
    pub fn pendings(&self, queue: WorkQueue) -> KeyRange {
        self.range(&(queue.tag(),))
    }

    /// Decodes a key of this user's entries in `queue` into its id.
    pub fn parse_pending(&self, queue: WorkQueue, key: &[u8]) -> Option<String> {
        let (tag, id): (String, String) = self.space.unpack(key).ok()?;
        (tag == queue.tag()).then_some(id)
    }

    /// The idempotency entry of a request, as written before entries were scoped to the key
    /// that made the request (read, never written, until pruned).
    pub fn idempotency(&self, request_id: &str) -> Vec<u8> {
        self.space.pack(&("idem", request_id))
    }

    /// The idempotency entry of a request made with key `principal`: another key using the
    /// same request id has an entry of its own.
    pub fn idempotency_of(&self, principal: &str, request_id: &str) -> Vec<u8> {
        self.space.pack(&("idem", principal, request_id))
    }

    /// Every idempotency entry of this user, scoped or not.
    pub fn idempotencies(&self) -> KeyRange {
        self.range(&("idem",))
    }

    /// A contradiction flagged for review.
    pub fn flag(&self, flag_id: &str) -> Vec<u8> {
        self.space.pack(&("flag", flag_id))
    }

    /// All review flags of this user.
    pub fn flags(&self) -> KeyRange {
        self.range(&("flag",))
    }

    /// The count of a repeated choice, by the keyed hash of its topic and value
    /// ([`crate::data::choice`]).
    pub fn choice(&self, hash: &[u8; 32]) -> Vec<u8> {
        self.space.pack(&("choice", &hash[..]))
    }

    /// The counter of a repeated choice as versions before keyed hashes kept it, with the
    /// topic and value in clear: read once and removed.
    pub fn legacy_choice(&self, topic: &str, value: &str) -> Vec<u8> {
        self.space.pack(&("choice", topic, value))
    }

    /// The pointer to a compliance notice of this user (its key in the tenant's notices), so
    /// forgetting the user finds and removes it.
    pub fn notice(&self, notice_id: &str) -> Vec<u8> {
        self.space.pack(&("notice", notice_id))
    }

    /// Every notice pointer of this user.
    pub fn notices(&self) -> KeyRange {
        self.range(&("notice",))
    }

    /// The identity anchor of a keyed hash.
    pub fn anchor(&self, mac: &[u8; 32]) -> Vec<u8> {
        self.space.pack(&("anchor", &mac[..]))
    }

    /// All identity anchors of this user.
    pub fn anchors(&self) -> KeyRange {
        self.range(&("anchor",))
    }

    /// The archive row of a session.
    pub fn archive(&self, session: &str) -> Vec<u8> {
        self.space.pack(&("archive", session))
    }

    /// All archive rows, ordered by session id.
    pub fn archives(&self) -> KeyRange {
        self.range(&("archive",))
    }

    /// An archived turn.
    pub fn archived_turn(&self, session: &str, seq: u64) -> Vec<u8> {
        self.space.pack(&("arch", session, seq))
    }

    /// The archived turns of one session, ordered by sequence number.
    pub fn archived_turns(&self, session: &str) -> KeyRange {
        self.range(&("arch", session))
    }

    /// Every archived turn, by session then sequence number.
    pub fn all_archived_turns(&self) -> KeyRange {
        self.range(&("arch",))
    }

    /// An archived turn's digest.
    pub fn archived_digest(&self, session: &str, seq: u64) -> Vec<u8> {
        self.space.pack(&("archd", session, seq))
    }

    /// The archived digests of one session, ordered by sequence number.
    pub fn archived_digests(&self, session: &str) -> KeyRange {
        self.range(&("archd", session))
    }

    /// Every archived digest, by session then sequence number.
    pub fn all_archived_digests(&self) -> KeyRange {
        self.range(&("archd",))
    }

    /// Decodes an archived-turn key into (session, sequence number).
    pub fn parse_archived_turn(&self, key: &[u8]) -> Option<(String, u64)> {
        let (tag, session, seq): (String, String, u64) = self.space.unpack(key).ok()?;
        (tag == "arch").then_some((session, seq))
    }

    /// Decodes an embedding key into its memory id.
    pub fn parse_embedding(&self, key: &[u8]) -> Option<String> {
        let (tag, id): (String, String) = self.space.unpack(key).ok()?;
        (tag == "vec").then_some(id)
    }

    /// Decodes a turn key into (session, sequence number).
    pub fn parse_turn(&self, key: &[u8]) -> Option<(String, u64)> {
        let (tag, session, seq): (String, String, u64) = self.space.unpack(key).ok()?;
        (tag == "turn").then_some((session, seq))
    }

    fn range<T: TuplePack>(&self, prefix: &T) -> KeyRange {
        KeyRange::of(&self.space.subspace(prefix))
    }
}
