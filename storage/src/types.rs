//! The stored types of the memory model (docs/architecture.md, "Memory model") and of
//! cluster bookkeeping.
//!
//! These are plain data with serde derives; their encoding is [`crate::codec`]'s business and
//! their keys are [`crate::keyspace`]'s. Behaviour (formation, conflicts, decay) lives in
//! `actors`, not here.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, UTC. Time always comes from the caller (an injected
/// clock), never from this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// This time plus `millis` (saturating).
    pub fn plus_millis(self, millis: i64) -> Self {
        Timestamp(self.0.saturating_add(millis))
    }
}

/// The four memory layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemoryKind {
    /// Session-level working memory (summaries of turns).
    Working,
    /// Stable preferences and identity facts.
    Profile,
    /// Summaries of successful interactions.
    Episodic,
    /// Corrections the user accepted.
    Correction,
}

impl MemoryKind {
    /// Every kind, in key order of [`MemoryKind::as_str`].
    pub const ALL: [MemoryKind; 4] = [
        MemoryKind::Correction,
        MemoryKind::Episodic,
        MemoryKind::Profile,
        MemoryKind::Working,
    ];

    /// The stable name used in keys and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Working => "working",
            MemoryKind::Profile => "profile",
            MemoryKind::Episodic => "episodic",
            MemoryKind::Correction => "correction",
        }
    }

    /// Parses [`MemoryKind::as_str`]'s names.
    pub fn parse(name: &str) -> Option<Self> {
        MemoryKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Lifecycle of a memory record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemoryStatus {
    /// Formed but not yet confirmed: found by searches and served in a context's episodic and
    /// correction slots (not its profile slot) until promoted to active (liked, reinforced,
    /// or used in a successful turn).
    Candidate,
    /// In use.
    Active,
    /// Superseded or hidden; kept for audit, never shown.
    Suppressed,
    /// Past its TTL.
    Expired,
    /// Deleted by request; kept only as a tombstone until swept.
    Deleted,
}

/// How much personal data a text holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PiiLevel {
    /// No personal data.
    None,
    /// Indirect identifiers.
    Low,
    /// Contact data and the like.
    Medium,
    /// Identity documents, bank cards.
    High,
}

/// What a reader may see of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RedactionLevel {
    /// The full text.
    Full,
    /// A summary with personal data masked.
    Summary,
    /// Only a reference (id and kind).
    ReferenceOnly,
}

/// Why a memory exists (formation is trigger-based and auditable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Trigger {
    /// A turn the gateway marked successful.
    SuccessfulTurn,
    /// Explicit feedback (like or dislike) on a turn.
    Feedback,
    /// A clarification the user accepted.
    Clarification,
    /// The same choice made repeatedly.
    RepeatedChoice,
    /// An explicit statement of preference or fact.
    ExplicitStatement,
    /// Written directly through the API.
    Api,
}

/// A memory record with every field of docs/architecture.md, "Memory model", except the
/// embedding, which is stored beside it under the `vec` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Unique within the user.
    pub memory_id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Owning end user.
    pub user_id: String,
    /// Session it was formed in, if any.
    pub session_id: Option<String>,
    /// Turn it was formed from, if any.
    pub turn_id: Option<u64>,
    /// Trace id of the request that formed it.
    pub trace_id: Option<String>,
    /// Layer.
    pub kind: MemoryKind,
    /// Scope ("global" by default).
    pub scope: String,
    /// Namespace ("default" by default).
    pub namespace: String,
    /// The text shown in contexts.
    pub summary_text: String,
    /// Structured payload, as JSON text.
    pub payload: String,
    /// Route of the request that formed it.
    pub source_route: Option<String>,
    /// Agent that formed it.
    pub source_agent: Option<String>,
    /// Belief that the memory is right, 0..=1.
    pub confidence: f32,
    /// Importance, 0..=1; decays per kind.
    pub salience: f32,
    /// Lifecycle status.
    pub status: MemoryStatus,
    /// Personal data held.
    pub pii_level: PiiLevel,
    /// What readers may see.
    pub redaction_level: RedactionLevel,
    /// Why it exists.
    pub trigger: Trigger,
    /// When it was written.
    pub created_at: Timestamp,
    /// When it was last confirmed by new evidence.
    pub last_seen_at: Timestamp,
    /// When it was last put in a context.
    pub last_accessed_at: Option<Timestamp>,
    /// When it expires (indexed for sweeps).
    pub expires_at: Option<Timestamp>,
    /// Since when the fact held in the world.
    pub valid_from: Option<Timestamp>,
    /// Until when the fact held in the world (set when superseded).
    pub valid_to: Option<Timestamp>,
}

/// One conversation turn: the user's message and the assistant's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Session of the turn.
    pub session_id: String,
    /// Sequence number, unique and increasing per user.
    pub seq: u64,
    /// Request that wrote it.
    pub request_id: String,
    /// Trace id of the request.
    pub trace_id: Option<String>,
    /// Route the gateway chose.
    pub route: Option<String>,
    /// The user's text.
    pub user_text: String,
    /// The assistant's text (capped by the memory model).
    pub assistant_text: String,
    /// Entities mentioned (tables, columns, metrics, business entities).
    pub entities: Vec<String>,
    /// When it happened.
    pub created_at: Timestamp,
    /// The node and shard epoch it was written under (`None` for a store used without
    /// leases): what lets a checker prove no shard was written by two owners in one epoch.
    pub written_under: Option<WrittenUnder>,
    /// The highest level of personal data in its texts.
    pub pii_level: PiiLevel,
}

/// A turn moved out of its session by raw-turn retention, kept in the user's archive until
/// the archive retention period passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedTurn {
    /// The turn as it was stored.
    pub turn: Turn,
    /// When retention moved it here.
    pub archived_at: Timestamp,
}

/// What raw-turn retention keeps of a turn it takes out of its session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchiveMode {
    /// Nothing: the turn is deleted (the seed's rule, and the default).
    #[default]
    Off,
    /// A de-identified digest ([`TurnDigest`]): keyed hashes of its texts, never the texts.
    Digests,
    /// The whole turn, sealed like every user value ([`ArchivedTurn`]).
    FullText,
}

/// What the archive keeps of a turn in [`ArchiveMode::Digests`]: when and where it was said,
/// and hashes of what was said, from which the text cannot be read back. An auditor holding
/// a text can check whether it was said (the hash of the same normalised text matches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnDigest {
    /// Session of the turn.
    pub session_id: String,
    /// Its sequence number.
    pub seq: u64,
    /// Route the gateway chose.
    pub route: Option<String>,
    /// When it was said.
    pub created_at: Timestamp,
    /// When retention archived it.
    pub archived_at: Timestamp,
    /// Hash of the user's text (normalised).
    pub user_hash: [u8; 32],
    /// Hash of the assistant's text (normalised).
    pub assistant_hash: [u8; 32],
    /// The tenant key id of the hashes (HMAC-SHA256 under the tenant's anchor key), or `None`
    /// when the keyspace has no key service (then SHA-256, which a short text does not hide).
    pub key_id: Option<u32>,
    /// Characters in the user's text.
    pub user_chars: u32,
    /// Characters in the assistant's text.
    pub assistant_chars: u32,
    /// The highest level of personal data the turn held.
    pub pii_level: PiiLevel,
}

/// Per-session bookkeeping of the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRow {
    /// Session id.
    pub session_id: String,
    /// Archived turns of the session (full text and digests).
    pub turns: u64,
    /// When the oldest archived turn passes the archive retention period (indexed for sweeps).
    pub purge_at: Timestamp,
}

/// What kind of identifier an identity anchor stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AnchorKind {
    /// A Chinese resident ID number.
    ResidentId,
    /// A passport number.
    Passport,
}

impl AnchorKind {
    /// The stable name hashed with the identifier.
    pub fn as_str(self) -> &'static str {
        match self {
            AnchorKind::ResidentId => "resident-id",
            AnchorKind::Passport => "passport",
        }
    }
}

/// An identity anchor: that the user gave an identifier, stored under the identifier's keyed
/// hash; the identifier itself is stored nowhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// What the identifier is.
    pub kind: AnchorKind,
    /// When the user first gave it.
    pub first_seen: Timestamp,
    /// The key id whose anchor key made the hash.
    pub key_id: u32,
}

/// The lease a write was made under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenUnder {
    /// The node that held the shard.
    pub node: String,
    /// The shard's epoch.
    pub epoch: u64,
}

/// Per-session bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRow {
    /// Session id.
    pub session_id: String,
    /// First turn's time.
    pub opened_at: Timestamp,
    /// Last turn's time.
    pub last_turn_at: Timestamp,
    /// Turns written.
    pub turn_count: u32,
    /// First turn of the current working-memory window (a window closes after a number of
    /// turns or a time idle, and the next turn opens a new one).
    pub window_start_seq: u64,
    /// Turns in the current window.
    pub window_turns: u32,
    /// When the oldest raw turn of the session passes the retention period (indexed for sweeps).
    pub retain_until: Timestamp,
    /// When the current window closes for being idle (indexed for the session cleanup);
    /// `None` once it closed.
    pub idle_at: Option<Timestamp>,
}

/// The session rules of the memory model, passed in: when a working-memory window closes and
/// how long raw turns are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRule {
    /// Turns per window.
    pub max_turns: u32,
    /// Idle time after which the next turn opens a new window, in milliseconds.
    pub idle_ms: i64,
    /// How long raw turns are kept, in milliseconds.
    pub retention_ms: i64,
}

/// A contradiction between memories that could not be resolved automatically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewFlag {
    /// Flag id (the id of the memory that was held back).
    pub flag_id: String,
    /// The new memory, stored suppressed until a reviewer decides.
    pub memory_id: String,
    /// The memory it contradicts.
    pub conflicts_with: String,
    /// Why it could not be resolved.
    pub reason: String,
    /// When it was flagged.
    pub created_at: Timestamp,
}

/// The user header: counters and key references.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserHeader {
    /// Next turn sequence number.
    pub next_turn_seq: u64,
    /// Next memory sequence number (for memory ids).
    pub next_memory_seq: u64,
    /// Id of the user's data key (encryption at rest), once one exists.
    pub data_key_id: Option<u32>,
    /// When the user was first seen.
    pub created_at: Option<Timestamp>,
}

/// One version of a distilled intent. Versions are never overwritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// Intent type ("appointment", "complaint", ...).
    pub intent_type: String,
    /// Version time.
    pub version: Timestamp,
    /// Extracted fields, as JSON text.
    pub fields: String,
    /// Whether this version is current.
    pub active: bool,
    /// Turn it was distilled from.
    pub source_turn: Option<u64>,
}

impl Intent {
    /// When the version stops being served: `expires_at` (ms since the epoch) in its fields,
    /// which distilled versions carry (their TTL); `None` for one without.
    pub fn expires_at(&self) -> Option<Timestamp> {
        let fields: serde_json::Value = serde_json::from_str(&self.fields).ok()?;
        fields.get("expires_at")?.as_i64().map(Timestamp)
    }
}

/// A text awaiting its embedding: written in the transaction that gives a record the text, and
/// removed in the one that stores the text's vector (or drops the record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInference {
    /// The record's layer (where to find it).
    pub kind: MemoryKind,
    /// The text to embed: what the record is indexed by.
    pub text: String,
    /// When it was queued.
    pub queued_at: Timestamp,
}

/// What a pending distillation asks of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DistilTask {
    /// The intent of one message (`text`).
    Intent,
    /// Summaries of the older turns of a session's window (`session_id`; `text` empty).
    Summaries,
}

/// The model's summary of a turn, written once (contexts read it instead of an extractive
/// summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSummary {
    /// The summary (20 to 60 characters).
    pub text: String,
    /// The model that wrote it.
    pub model: String,
    /// When.
    pub created_at: Timestamp,
}

/// A message (or a session's older turns) awaiting the generative model: written in the
/// transaction that stores its turn (after the rules ran), removed in the one that stores
/// the model's result (or gives up on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDistillation {
    /// What the model is asked.
    pub task: DistilTask,
    /// The session of the turn.
    pub session_id: String,
    /// The turn's sequence number.
    pub turn_seq: u64,
    /// The message.
    pub text: String,
    /// Model runs tried so far (a result the validation gate sends back is tried once more).
    pub attempts: u32,
    /// When it was queued.
    pub queued_at: Timestamp,
}

/// A stored embedding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Embedding {
    /// The model that produced it (vectors of different models never mix).
    pub model: String,
    /// The vector.
    pub vector: Vec<f32>,
}

/// The stored outcome of an acknowledged write, keyed by request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyEntry {
    /// When the write was acknowledged.
    pub at: Timestamp,
    /// The response to replay, opaque to storage.
    #[serde(with = "serde_bytes")]
    pub response: Vec<u8>,
}

/// The lease row of a shard: who may write it, and under which epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLease {
    /// Owning node id; `None` when released.
    pub owner: Option<String>,
    /// Bumped on every acquisition.
    pub epoch: u64,
    /// When the current owner acquired it.
    pub acquired_at: Timestamp,
}

/// Membership status of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberStatus {
    /// Serving.
    Active,
    /// Handing off its shards before leaving.
    Draining,
    /// Left the cluster cleanly.
    Left,
}

/// A node's membership row; liveness rides on `heartbeat_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Node id.
    pub node_id: String,
    /// HTTP gateway address.
    pub http_addr: String,
    /// Cluster transport address.
    pub cluster_addr: String,
    /// Process start time.
    pub started_at: Timestamp,
    /// Last heartbeat.
    pub heartbeat_at: Timestamp,
    /// Status.
    pub status: MemberStatus,
}
