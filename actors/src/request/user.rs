//! The requests a user actor serves and the acknowledgements it returns. These are the
//! actor-level forms; the gateway maps its JSON wire types onto them. Acknowledgements are
//! serialisable because they are stored as the replayable outcome of a request id.

pub use engram_storage::data::archive::Role;
use engram_storage::types::{
    AnchorKind, ArchivedTurn, MemoryKind, MemoryRecord, MemoryStatus, SessionRow, Timestamp, Turn,
    TurnDigest,
};
use serde::{Deserialize, Serialize};

use crate::model::policy::Route;
use crate::model::retrieve::SearchMode;

/// A conversation turn sent by a gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRequest {
    /// Idempotency key of the write.
    pub request_id: String,
    /// Explicit session; `None` writes to the user's default stream.
    pub session_id: Option<String>,
    /// The user's text.
    pub user_text: String,
    /// The assistant's answer (capped at 2,000 characters when stored).
    pub assistant_text: String,
    /// The route the gateway took.
    pub route: Option<Route>,
    /// Whether the turn succeeded; failed turns are not written.
    pub success: bool,
    /// Trace id for correlation.
    pub trace_id: Option<String>,
    /// Choices the user made in this turn (`topic`, `value`), counted towards preferences.
    pub choices: Vec<(String, String)>,
    /// A clarification the user accepted in this turn: the assistant's clarifying question
    /// and the answer the user chose (forms an episodic memory).
    #[serde(default)]
    pub clarification: Option<Clarification>,
}

/// A clarifying question the assistant asked and the answer the user accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clarification {
    /// The assistant's question ("GMV with or without refunds?").
    pub question: String,
    /// The answer the user accepted ("without refunds").
    pub answer: String,
}

/// A memory formed or touched by a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryChange {
    /// The memory.
    pub memory_id: String,
    /// Its layer.
    pub kind: MemoryKind,
    /// What happened: `created`, `reinforced`, `superseded`, `flagged`, or `promoted` (a
    /// candidate the session's last context served, confirmed by this successful turn).
    pub action: String,
}

/// The outcome of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnAck {
    /// Whether the turn was written (failed turns are not).
    pub written: bool,
    /// The session it was written to.
    pub session_id: String,
    /// Its sequence number.
    pub seq: Option<u64>,
    /// Entities found in it.
    pub entities: Vec<String>,
    /// Memories formed or touched.
    pub memories: Vec<MemoryChange>,
    /// Intents the rules found in the user's text and wrote at once.
    #[serde(default)]
    pub intents: Vec<IntentAck>,
    /// Whether the user's text is queued for the generative model (its result follows).
    #[serde(default)]
    pub distilling: bool,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// Feedback on an earlier turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackRequest {
    /// Idempotency key of the write.
    pub request_id: String,
    /// Session of the turn.
    pub session_id: Option<String>,
    /// Sequence number of the turn.
    pub turn_seq: u64,
    /// Like or dislike.
    pub liked: bool,
    /// The SQL the user says is right.
    pub corrected_sql: Option<String>,
    /// The user's explanation.
    pub comment: Option<String>,
    /// Trace id for correlation.
    pub trace_id: Option<String>,
}

/// The outcome of feedback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackAck {
    /// Memories formed or touched.
    pub memories: Vec<MemoryChange>,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// A request for a memory context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextQuery {
    /// Session whose working memory to include; `None` is the default stream.
    pub session_id: Option<String>,
    /// The question about to be asked.
    pub query: Option<String>,
    /// The route, which sets slot budgets.
    pub route: Route,
    /// Token budget.
    pub token_budget: usize,
}

/// A search of a user's memories (the retrieval behind the context's slots, exposed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchQuery {
    /// What to look for.
    pub query: String,
    /// At most this many hits (1 to 100).
    pub k: usize,
    /// Only these kinds (empty: every kind).
    pub kinds: Vec<MemoryKind>,
    /// Which signals rank.
    pub mode: SearchMode,
    /// Only active memories (the seed's rule); by default candidates are found too.
    pub active_only: bool,
    /// Rerank the first candidates with the node's cross-encoder (English questions; see
    /// [`crate::rerank`]), within its deadline.
    #[serde(default)]
    pub rerank: bool,
}

/// A memory found by a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The memory.
    pub memory: MemoryRecord,
    /// Its score (fused, BM25 or cosine, by mode; reranked: the reciprocal-rank fusion of
    /// the reranker's order and the mode's).
    pub score: f32,
}

/// The outcome of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Hits, best first.
    pub hits: Vec<SearchHit>,
    /// Whether the query was embedded (false: the node does not embed, or the search fell
    /// back to words and priors).
    pub embedded: bool,
    /// Why the query was ranked without its vector, if it was.
    #[serde(default)]
    pub fallback: Option<crate::embed::Fallback>,
    /// Whether the hits were reranked.
    #[serde(default)]
    pub reranked: bool,
    /// Why a search that asked to be reranked was not, if it was not.
    #[serde(default)]
    pub rerank_fallback: Option<crate::rerank::RerankFallback>,
}

/// A direct write of a memory record (write a candidate, or upsert by id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryWrite {
    /// Idempotency key of the write.
    pub request_id: String,
    /// Upsert this id; `None` creates a new memory.
    pub memory_id: Option<String>,
    /// Layer.
    pub kind: MemoryKind,
    /// Text.
    pub text: String,
    /// Structured payload (a JSON object).
    #[serde(with = "json_text")]
    pub payload: serde_json::Value,
    /// `Candidate` or `Active`.
    pub status: MemoryStatus,
    /// Namespace.
    pub namespace: String,
    /// Scope.
    pub scope: String,
    /// Confidence, 0..=1.
    pub confidence: f32,
    /// Salience, 0..=1.
    pub salience: f32,
    /// Since when the fact held.
    pub valid_from: Option<Timestamp>,
    /// Until when the fact held.
    pub valid_to: Option<Timestamp>,
    /// Session it relates to.
    pub session_id: Option<String>,
    /// Route that wrote it.
    pub source_route: Option<String>,
    /// Agent that wrote it.
    pub source_agent: Option<String>,
    /// Trace id for correlation.
    pub trace_id: Option<String>,
}

/// A status change of a memory (activate, suppress, delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChange {
    /// Idempotency key of the write.
    pub request_id: String,
    /// The memory.
    pub memory_id: String,
    /// The new status: `Active`, `Suppressed` or `Deleted`.
    pub status: MemoryStatus,
}

/// How a reviewer settles a contradiction flagged for review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictChoice {
    /// The memory held back stays suppressed; the one it contradicts stays as it is.
    KeepOld,
    /// The memory held back becomes active and supersedes the one it contradicts (which is
    /// suppressed, its `valid_to` set).
    KeepNew,
    /// Both are kept: the memory held back becomes active beside the other one.
    KeepBoth,
}

/// The settlement of a flagged contradiction; the flag is removed in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveConflict {
    /// Idempotency key of the write.
    pub request_id: String,
    /// The flag (the id of the memory held back).
    pub flag_id: String,
    /// What to keep.
    pub choice: ConflictChoice,
}

/// What settling a contradiction did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveAck {
    /// The flag removed.
    pub flag_id: String,
    /// What was kept.
    pub choice: ConflictChoice,
    /// The two memories as stored now (the one held back first; a memory deleted since the
    /// flag was raised is left out).
    pub memories: Vec<MemoryRecord>,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// The outcome of a memory write or status change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryAck {
    /// The record as stored.
    pub memory: MemoryRecord,
    /// What happened: `created`, `updated`, `reinforced`, `superseded`, `flagged`.
    pub action: String,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// The outcome of deleting a session's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearAck {
    /// Turns deleted.
    pub deleted: usize,
    /// Messages deleted: the user's of each turn, and the assistant's where it answered.
    #[serde(default)]
    pub messages: usize,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// The outcome of forgetting a user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetAck {
    /// Memory records removed.
    pub records: usize,
    /// Expiry-index entries removed.
    pub expiry_entries: usize,
}

/// What a sweep of one user covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepScope {
    /// Expire memory records past their TTL and purge expired or deleted ones past grace.
    pub records: bool,
    /// Move raw turns past the retention period to the archive, and purge archived turns
    /// past the archive retention period.
    pub turns: bool,
    /// Close session windows idle past 24 hours.
    pub sessions: bool,
}

impl SweepScope {
    /// Everything.
    pub const ALL: SweepScope = SweepScope {
        records: true,
        turns: true,
        sessions: true,
    };
}

/// What a sweep did to one user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Records marked expired.
    pub expired: usize,
    /// Records purged (expired or deleted ones past their grace period).
    pub purged: usize,
    /// Raw turns moved out of their sessions into the archive by retention.
    pub turns_removed: usize,
    /// Archived turns purged past the archive retention period.
    #[serde(default)]
    pub archive_purged: usize,
    /// Idle session windows closed.
    pub sessions_closed: usize,
    /// Distilled intent versions removed past their TTL.
    #[serde(default)]
    pub intents_expired: usize,
}

/// A session with its turns, for the seed-compatible session endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMemory {
    /// The session.
    pub session: SessionRow,
    /// Its newest turns, oldest first.
    pub turns: Vec<Turn>,
    /// The model's stored summaries of those turns, by sequence number (a turn without one
    /// has none yet: its extractive summary stands in).
    pub summaries: Vec<(u64, String)>,
}

/// Characters of a session's first user message kept as its title.
pub const TITLE_CHARS: usize = 50;

/// A session as listed: its row and its title.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionListing {
    /// The session.
    pub session: SessionRow,
    /// The first user message, at most [`TITLE_CHARS`] characters, masked for the reader as
    /// the turn is; `None` once retention removed the session's first turn.
    pub title: Option<String>,
}

/// A distilled intent to record (a new version; earlier active versions become inactive).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentWrite {
    /// Idempotency key.
    pub request_id: String,
    /// Intent type (`appointment`, `complaint`, `renewal`, `cancellation`, ...).
    pub intent_type: String,
    /// Extracted fields (a JSON object).
    #[serde(with = "json_text")]
    pub fields: serde_json::Value,
}

/// A user message to distil (the seed's `POST /write` with `{user_id, message}`): the rules
/// run at once, the model in the background.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageWrite {
    /// Idempotency key.
    pub request_id: String,
    /// The user's message.
    pub message: String,
}

/// What distilling a message did at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistilAck {
    /// Intents the rules found and wrote.
    pub intents: Vec<IntentAck>,
    /// Whether the message is queued for the generative model (its result follows).
    pub distilling: bool,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// The current versions of the key intent types (appointment, complaint, subscriptions),
/// newest first: what a new session recalls at login.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyIntents {
    /// At most this many (1 to 4).
    pub limit: usize,
}

/// The outcome of recording an intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentAck {
    /// Intent type.
    pub intent_type: String,
    /// The new version (its time).
    pub version: Timestamp,
    /// Earlier versions marked inactive by this one.
    pub deactivated: Vec<Timestamp>,
    /// The version this one replaced (removed: the same type within the replace window).
    #[serde(default)]
    pub replaced: Option<Timestamp>,
    /// Whether the gate flagged it for compliance review (personal data).
    #[serde(default)]
    pub flagged: bool,
    /// The renewal this cancellation deactivated.
    #[serde(default)]
    pub renewal_deactivated: Option<Timestamp>,
    /// True when this is the stored outcome of an earlier identical request.
    #[serde(default)]
    pub replayed: bool,
}

/// Whether a user gave an identifier ([`AnchorQuery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AnchorMatch {
    /// The user gave it.
    Matched {
        /// What it is.
        kind: AnchorKind,
        /// When the user first gave it.
        first_seen: Timestamp,
    },
    /// The user never gave it (or was forgotten since).
    NoMatch,
    /// The node has no key service, so it keeps no identity anchors and cannot tell.
    Unkeyed,
}

/// Where a page of the archive ends: the last turn returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveCursor {
    /// Its session.
    pub session: String,
    /// Its sequence number.
    pub seq: u64,
}

/// What an archive read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchiveKind {
    /// Whole turns (archived in `full-text` mode).
    Turns,
    /// Digests (archived in `digests` mode).
    Digests,
}

/// A read of a user's archive (admin only: the auditors' record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveQuery {
    /// One session, or every session.
    pub session: Option<String>,
    /// Continue after this turn (the `next` of the previous page).
    pub after: Option<ArchiveCursor>,
    /// At most this many entries (1 to [`MAX_ARCHIVE_PAGE`]).
    pub limit: usize,
    /// Turns or digests; `None`: what the tenant's archive mode keeps (digests in `digests`
    /// mode, else turns).
    pub kind: Option<ArchiveKind>,
}

/// The most archived entries one read returns.
pub const MAX_ARCHIVE_PAGE: usize = 500;

/// A page of a user's archive, by session then sequence number: whole turns or digests, as
/// asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivePage {
    /// What the page holds.
    pub kind: ArchiveKind,
    /// The whole turns.
    pub turns: Vec<ArchivedTurn>,
    /// The digests.
    pub digests: Vec<TurnDigest>,
    /// The cursor of the next page; `None` when this was the last.
    pub next: Option<ArchiveCursor>,
}

/// Whether a text is among the user's archived digests (admin only): an auditor holding a
/// text learns whether and when it was said, and the archive never holds the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveMatch {
    /// Who said it.
    pub role: Role,
    /// The text (compared after trimming and collapsing whitespace).
    pub text: String,
}

/// The longest text [`ArchiveMatch`] takes, in bytes.
pub const MAX_MATCH_TEXT: usize = 16 * 1024;

/// JSON values travel as JSON text: postcard, the front door's frame format, cannot carry
/// self-describing values.
mod json_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &serde_json::Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&value.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
        let text = String::deserialize(d)?;
        serde_json::from_str(&text).map_err(serde::de::Error::custom)
    }
}

/// A list of the user's memory records, of one kind or all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListMemories {
    /// Only this kind; `None` lists every kind.
    pub kind: Option<MemoryKind>,
}

/// A list of the user's sessions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListSessions;

/// A session's newest turns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionQuery {
    /// The session.
    pub session: String,
    /// At most this many turns.
    pub limit: usize,
}

/// Deletion of a session's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClearSession {
    /// Idempotency key of the write.
    pub request_id: String,
    /// The session.
    pub session: String,
}

/// Forgetting the user entirely (admin only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forget;

/// A page of an intent type's versions, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentQuery {
    /// The intent type.
    pub intent_type: String,
    /// Only versions older than this one (the last version of the previous page).
    pub before: Option<Timestamp>,
    /// At most this many versions (1 to [`MAX_INTENT_PAGE`]).
    pub limit: usize,
}

/// The most intent versions one read returns.
pub const MAX_INTENT_PAGE: usize = 500;

/// A list of the contradictions flagged for review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFlags;

/// Whether the user gave an identifier (a resident ID or passport number), answered from the
/// identity anchors (keyed hashes): the identifier is neither stored nor returned nor logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnchorQuery {
    /// The identifier, as given (white space and letter case do not matter).
    pub value: String,
}

/// An admin's approval of further sensitive reads of the user: clears the breaker's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproveReads;

/// What an approval cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAck {
    /// Sensitive reads counted in the window before the approval cleared them.
    pub cleared: u32,
}
