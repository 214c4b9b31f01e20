//! The tools' arguments. Their doc comments are the descriptions an agent reads in each
//! tool's input schema; closed sets of names (kinds, statuses, ratings, modes) are enums,
//! inlined, so the schema lists them where they are used (no `$ref` for a client to follow). Unknown fields are refused (a misspelt argument is an error, not a
//! silent default), as the API refuses them.
//!
//! The node checks every value again (ids, lengths, routes) and its refusal comes back as
//! the tool's error, with the API's code.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `add_turn`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddTurn {
    /// The end user's id (letters, digits and -_.:@, at most 128 bytes).
    pub user: String,
    /// The conversation session (same id rules); omitted, the user's default stream.
    pub session_id: Option<String>,
    /// The user's message, as they wrote it (at most 8,000 characters).
    pub user_text: String,
    /// Your answer to it (stored capped at 2,000 characters); default empty.
    pub assistant_text: Option<String>,
    /// Idempotency key: repeat it when retrying this call, and the turn is written once.
    /// Omitted, a fresh one is made for this call.
    pub request_id: Option<String>,
    /// What kind of request the turn was: nl2sql_query (default), kpi_lookup,
    /// business_knowledge_qa or deep_analysis_workflow.
    pub route: Option<String>,
    /// Whether you answered the request successfully; a failed turn is not written.
    /// Default true.
    pub success: Option<bool>,
    /// A trace id of yours, for correlation.
    pub trace_id: Option<String>,
}

/// Arguments of `get_context`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetContext {
    /// The end user's id.
    pub user: String,
    /// The session whose recent turns to include; omitted, the user's default stream.
    pub session_id: Option<String>,
    /// The question you are about to answer (ranks the memories; at most 4,000 characters).
    pub query: Option<String>,
    /// The kind of request (sets how the budget is shared): nl2sql_query (default),
    /// kpi_lookup, business_knowledge_qa or deep_analysis_workflow.
    pub route: Option<String>,
    /// At most this many tokens of context (1 to 32,000); default the node's (1,200).
    pub token_budget: Option<u32>,
}

/// A memory's kind.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Kind {
    /// A lasting fact or preference about the user.
    Profile,
    /// Something that happened or was said.
    Episodic,
    /// A correction of an earlier answer.
    Correction,
}

impl Kind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Profile => "profile",
            Kind::Episodic => "episodic",
            Kind::Correction => "correction",
        }
    }
}

/// How a search ranks.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum SearchMode {
    /// Meaning, words, recency and salience fused (the default).
    Hybrid,
    /// Meaning only.
    Dense,
    /// Words only.
    Bm25,
}

impl SearchMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Hybrid => "hybrid",
            SearchMode::Dense => "dense",
            SearchMode::Bm25 => "bm25",
        }
    }
}

/// Arguments of `search_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchMemories {
    /// The end user's id.
    pub user: String,
    /// What to look for (at most 4,000 characters).
    pub query: String,
    /// At most this many hits, 1 to 100; default 10.
    pub limit: Option<u32>,
    /// Only memories of these kinds; default every kind.
    pub kinds: Option<Vec<Kind>>,
    /// How to rank; default hybrid.
    pub mode: Option<SearchMode>,
    /// Only active (confirmed) memories; default false: candidates are found too.
    pub active_only: Option<bool>,
    /// Rerank the first candidates with the node's English cross-encoder (better order,
    /// a few hundred milliseconds on a CPU); default false.
    pub rerank: Option<bool>,
}

/// The status a written memory starts with.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum NewStatus {
    /// Served, marked as not yet confirmed (the default).
    Candidate,
    /// Confirmed.
    Active,
}

impl NewStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            NewStatus::Candidate => "candidate",
            NewStatus::Active => "active",
        }
    }
}

/// Arguments of `write_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteMemory {
    /// The end user's id.
    pub user: String,
    /// What kind of memory.
    pub kind: Kind,
    /// The memory, as one short statement (at most 2,000 characters).
    pub text: String,
    /// Write this memory id (create or replace it); omitted, a new memory is made.
    pub memory_id: Option<String>,
    /// Idempotency key: repeat it when retrying this call. Omitted, a fresh one is made.
    pub request_id: Option<String>,
    /// Starting status; default candidate.
    pub status: Option<NewStatus>,
    /// Structured data (a JSON object); a profile memory may carry `topic` and `value`.
    pub payload: Option<serde_json::Map<String, serde_json::Value>>,
    /// How sure the memory is, 0 to 1; default 0.5.
    pub confidence: Option<f32>,
    /// How much it matters, 0 to 1; default 0.5.
    pub salience: Option<f32>,
    /// The session it comes from.
    pub session_id: Option<String>,
    /// Your name, recorded as the memory's source.
    pub source_agent: Option<String>,
}

/// A memory status.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Status {
    /// Served, not yet confirmed.
    Candidate,
    /// Confirmed and served.
    Active,
    /// Kept, not served.
    Suppressed,
    /// Deleted.
    Deleted,
    /// Past its time to live.
    Expired,
}

impl Status {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Candidate => "candidate",
            Status::Active => "active",
            Status::Suppressed => "suppressed",
            Status::Deleted => "deleted",
            Status::Expired => "expired",
        }
    }
}

/// Arguments of `list_memories`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListMemories {
    /// The end user's id.
    pub user: String,
    /// Only this kind; default every kind.
    pub kind: Option<Kind>,
    /// Only memories with this status; default every status.
    pub status: Option<Status>,
}

/// A status change.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum StatusChange {
    /// Confirm and serve it.
    Active,
    /// Keep it but stop serving it.
    Suppressed,
    /// Delete it.
    Deleted,
}

impl StatusChange {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusChange::Active => "active",
            StatusChange::Suppressed => "suppressed",
            StatusChange::Deleted => "deleted",
        }
    }
}

/// Arguments of `set_memory_status`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMemoryStatus {
    /// The end user's id.
    pub user: String,
    /// The memory (`memory_id` from a list, a search or a write).
    pub memory_id: String,
    /// The new status.
    pub status: StatusChange,
    /// Idempotency key: repeat it when retrying this call. Omitted, a fresh one is made.
    pub request_id: Option<String>,
}

/// A rating.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Rating {
    /// The user liked the answer.
    Like,
    /// The user disliked it.
    Dislike,
}

impl Rating {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Like => "like",
            Rating::Dislike => "dislike",
        }
    }
}

/// Arguments of `feedback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Feedback {
    /// The end user's id.
    pub user: String,
    /// The turn's session; omitted, the user's default stream.
    pub session_id: Option<String>,
    /// The turn's number (`seq` in add_turn's answer).
    pub turn_seq: u64,
    /// Like or dislike.
    pub rating: Rating,
    /// With a dislike: the SQL the user says is right.
    pub corrected_sql: Option<String>,
    /// The user's explanation.
    pub comment: Option<String>,
    /// Idempotency key: repeat it when retrying this call. Omitted, a fresh one is made.
    pub request_id: Option<String>,
}

/// Arguments of `list_sessions`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessions {
    /// The end user's id.
    pub user: String,
}

/// Arguments of `recall_intent`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallIntent {
    /// The end user's id.
    pub user: String,
    /// The intent type: appointment, complaint, subscription_renewal, subscription_cancel,
    /// or another type written for the user.
    pub intent_type: String,
    /// Every version, newest first, a page at a time; default only the current one.
    pub all: Option<bool>,
    /// With all: versions per page, 1 to 500; default 50.
    pub limit: Option<u32>,
    /// With all: only versions older than this one (`next_before` of the previous page).
    pub before: Option<i64>,
}

/// Arguments of `forget_user`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetUser {
    /// The end user to erase, for good.
    pub user: String,
}
