//! Wire types of memory records, sessions, turns, conflicts and forgetting.

use engram_actors::request::user::{
    ClearAck, ConflictChoice, ForgetAck, MemoryAck, ResolveAck, SessionListing,
};
use engram_storage::types::{MemoryRecord, MemoryStatus, ReviewFlag, SessionRow, Timestamp, Turn};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub(crate) fn status_name(status: MemoryStatus) -> &'static str {
    match status {
        MemoryStatus::Candidate => "candidate",
        MemoryStatus::Active => "active",
        MemoryStatus::Suppressed => "suppressed",
        MemoryStatus::Expired => "expired",
        MemoryStatus::Deleted => "deleted",
    }
}

/// A memory to write (create, or upsert with `PUT`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBody {
    /// Idempotency key.
    pub request_id: String,
    /// `profile`, `episodic` or `correction`.
    pub kind: String,
    /// The memory's text.
    pub text: String,
    /// Structured payload (a JSON object); profile memories may carry `topic` and `value`.
    #[schema(value_type = Object)]
    pub payload: Option<serde_json::Value>,
    /// `candidate` (default) or `active`.
    pub status: Option<String>,
    /// Namespace (default `default`).
    pub namespace: Option<String>,
    /// Scope (default `global`).
    pub scope: Option<String>,
    /// Confidence 0..1 (default 0.5).
    pub confidence: Option<f32>,
    /// Salience 0..1 (default 0.5).
    pub salience: Option<f32>,
    /// Since when the fact held (Unix ms).
    pub valid_from: Option<i64>,
    /// Until when the fact held (Unix ms).
    pub valid_to: Option<i64>,
    /// Session it relates to.
    pub session_id: Option<String>,
    /// Route that wrote it.
    pub source_route: Option<String>,
    /// Agent that wrote it.
    pub source_agent: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
}

/// A status change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusBody {
    /// Idempotency key.
    pub request_id: String,
    /// `active`, `suppressed` or `deleted`.
    pub status: String,
}

/// A memory record.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryView {
    /// Id.
    pub memory_id: String,
    /// Kind.
    pub kind: String,
    /// Status.
    pub status: String,
    /// Text.
    pub text: String,
    /// Payload.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// Namespace.
    pub namespace: String,
    /// Scope.
    pub scope: String,
    /// Confidence.
    pub confidence: f32,
    /// Salience.
    pub salience: f32,
    /// Why it exists (`SuccessfulTurn`, `Feedback`, `RepeatedChoice`, `ExplicitStatement`, `Api`, ...).
    pub trigger: String,
    /// Session it was formed in.
    pub session_id: Option<String>,
    /// Turn it was formed from.
    pub turn_id: Option<u64>,
    /// Route that formed it.
    pub source_route: Option<String>,
    /// Personal-data level.
    pub pii_level: String,
    /// Redaction level.
    pub redaction_level: String,
    /// Written at (Unix ms).
    pub created_at: i64,
    /// Last confirmed at.
    pub last_seen_at: i64,
    /// Expires at.
    pub expires_at: Option<i64>,
    /// Valid from.
    pub valid_from: Option<i64>,
    /// Valid to.
    pub valid_to: Option<i64>,
    /// In lists: the entities its text mentions (tables, columns, metrics, business
    /// entities), found in the text as served (masked where the key's scope masks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<String>>,
}

impl From<MemoryRecord> for MemoryView {
    /// The record as the user's actor gave it for the reader (masked and withheld there).
    fn from(r: MemoryRecord) -> Self {
        MemoryView {
            text: r.summary_text,
            payload: serde_json::from_str(&r.payload).unwrap_or(serde_json::Value::Null),
            memory_id: r.memory_id,
            kind: r.kind.as_str().into(),
            status: status_name(r.status).into(),
            namespace: r.namespace,
            scope: r.scope,
            confidence: r.confidence,
            salience: r.salience,
            trigger: format!("{:?}", r.trigger),
            session_id: r.session_id,
            turn_id: r.turn_id,
            source_route: r.source_route,
            pii_level: format!("{:?}", r.pii_level).to_lowercase(),
            redaction_level: format!("{:?}", r.redaction_level).to_lowercase(),
            created_at: r.created_at.0,
            last_seen_at: r.last_seen_at.0,
            expires_at: r.expires_at.map(|t| t.0),
            valid_from: r.valid_from.map(|t| t.0),
            valid_to: r.valid_to.map(|t| t.0),
            entities: None,
        }
    }
}

/// The outcome of a memory write or status change.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryResponse {
    /// The record as stored.
    pub memory: MemoryView,
    /// What happened.
    pub action: String,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

impl From<MemoryAck> for MemoryResponse {
    fn from(a: MemoryAck) -> Self {
        MemoryResponse {
            memory: a.memory.into(),
            action: a.action,
            replayed: a.replayed,
        }
    }
}

/// A list of memories.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoriesResponse {
    /// The memories, by id.
    pub memories: Vec<MemoryView>,
}

/// A session.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// Id.
    pub session_id: String,
    /// First turn (Unix ms).
    pub opened_at: i64,
    /// Last turn (Unix ms).
    pub last_turn_at: i64,
    /// Turns written.
    pub turn_count: u32,
    /// In lists: the session's first user message (at most 50 characters, personal data
    /// masked); absent once retention removed that turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl From<SessionRow> for SessionView {
    fn from(s: SessionRow) -> Self {
        SessionView {
            session_id: s.session_id,
            opened_at: s.opened_at.0,
            last_turn_at: s.last_turn_at.0,
            turn_count: s.turn_count,
            title: None,
        }
    }
}

impl From<SessionListing> for SessionView {
    fn from(listed: SessionListing) -> Self {
        SessionView {
            title: listed.title,
            ..listed.session.into()
        }
    }
}

/// The user's sessions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionsResponse {
    /// Sessions by id.
    pub sessions: Vec<SessionView>,
}

/// A stored turn.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnView {
    /// Sequence number.
    pub seq: u64,
    /// User text.
    pub user_text: String,
    /// Assistant text.
    pub assistant_text: String,
    /// Route.
    pub route: Option<String>,
    /// Entities.
    pub entities: Vec<String>,
    /// Written at (Unix ms).
    pub created_at: i64,
}

impl From<Turn> for TurnView {
    /// The turn as the user's actor gave it for the reader (masked there).
    fn from(t: Turn) -> Self {
        TurnView {
            seq: t.seq,
            user_text: t.user_text,
            assistant_text: t.assistant_text,
            route: t.route,
            entities: t.entities,
            created_at: t.created_at.0,
        }
    }
}

/// A session's memory.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionMemoryResponse {
    /// The session.
    pub session: SessionView,
    /// Its newest turns, oldest first.
    pub turns: Vec<TurnView>,
}

/// The outcome of deleting a session's memory.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeletedResponse {
    /// Turns deleted.
    pub deleted: usize,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

impl From<ClearAck> for DeletedResponse {
    fn from(a: ClearAck) -> Self {
        DeletedResponse {
            deleted: a.deleted,
            replayed: a.replayed,
        }
    }
}

/// The outcome of forgetting a user.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ForgetResponse {
    /// Memory records removed.
    pub records: usize,
    /// Expiry-index entries removed.
    pub expiry_entries: usize,
}

impl From<ForgetAck> for ForgetResponse {
    fn from(a: ForgetAck) -> Self {
        ForgetResponse {
            records: a.records,
            expiry_entries: a.expiry_entries,
        }
    }
}

/// A contradiction flagged for review.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConflictView {
    /// Flag id.
    pub flag_id: String,
    /// The memory held back (suppressed until reviewed).
    pub memory_id: String,
    /// The memory it contradicts.
    pub conflicts_with: String,
    /// Why it was flagged.
    pub reason: String,
    /// When (Unix ms).
    pub created_at: i64,
}

impl From<ReviewFlag> for ConflictView {
    fn from(f: ReviewFlag) -> Self {
        ConflictView {
            flag_id: f.flag_id,
            memory_id: f.memory_id,
            conflicts_with: f.conflicts_with,
            reason: f.reason,
            created_at: f.created_at.0,
        }
    }
}

/// Contradictions flagged for review.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ConflictsResponse {
    /// The flags.
    pub conflicts: Vec<ConflictView>,
}

/// The settlement of a flagged contradiction.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// Idempotency key.
    pub request_id: String,
    /// `keep_old` (the memory held back stays suppressed), `keep_new` (it becomes active and
    /// the one it contradicts is suppressed) or `keep_both` (both active).
    pub resolution: String,
}

/// What settling a contradiction did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ResolveResponse {
    /// The flag, now removed.
    pub flag_id: String,
    /// The resolution applied.
    pub resolution: String,
    /// The two memories as stored now, the one held back first (one deleted since is left out).
    pub memories: Vec<MemoryView>,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

/// Parses a resolution, naming the accepted ones when it is unknown.
pub fn parse_resolution(name: &str) -> Result<ConflictChoice, engram_actors::Error> {
    RESOLUTIONS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
        .ok_or_else(|| {
            engram_actors::Error::invalid(
                "resolution",
                "unknown resolution; expected one of keep_old, keep_new, keep_both",
            )
        })
}

/// The name of a resolution.
pub fn resolution_name(choice: ConflictChoice) -> &'static str {
    RESOLUTIONS
        .iter()
        .find(|(_, c)| *c == choice)
        .map_or("", |(n, _)| n)
}

const RESOLUTIONS: [(&str, ConflictChoice); 3] = [
    ("keep_old", ConflictChoice::KeepOld),
    ("keep_new", ConflictChoice::KeepNew),
    ("keep_both", ConflictChoice::KeepBoth),
];

impl From<ResolveAck> for ResolveResponse {
    fn from(a: ResolveAck) -> Self {
        ResolveResponse {
            flag_id: a.flag_id,
            resolution: resolution_name(a.choice).to_owned(),
            memories: a.memories.into_iter().map(Into::into).collect(),
            replayed: a.replayed,
        }
    }
}

/// Milliseconds to a storage timestamp.
pub fn ts(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(Timestamp)
}
