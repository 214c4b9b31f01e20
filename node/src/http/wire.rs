//! JSON wire types of the gateway's versioned API (`/v1`), with their OpenAPI schemas, and
//! their conversions to and from the actor-level types. Times are Unix milliseconds (UTC).
//! Every request type rejects unknown fields, so a misspelt field is a 400, not a silent
//! default.

use engram_actors::Error;
use engram_actors::model::context::{
    ContextIntent, ContextMemory, ContextSummary, ContextTurn, MemoryContext,
};
use engram_actors::model::policy::Route;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::request::user::{FeedbackAck, IntentAck, MemoryChange, TurnAck};
use engram_storage::types::{MemoryKind, MemoryStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub mod admin;
mod records;

pub use records::{
    ConflictsResponse, DeletedResponse, ForgetResponse, MemoriesResponse, MemoryBody,
    MemoryResponse, MemoryView, ResolveBody, ResolveResponse, SessionMemoryResponse,
    SessionsResponse, StatusBody, TurnView, parse_resolution, ts,
};

/// Parses a route name, naming the accepted ones when it is unknown.
pub fn parse_route(route: Option<&str>) -> Result<Route, Error> {
    match route {
        None => Ok(Route::Nl2sqlQuery),
        Some(name) => Route::parse(name).ok_or_else(|| {
            let known: Vec<_> = Route::ALL.iter().map(|r| r.as_str()).collect();
            Error::invalid(
                "route",
                format!("unknown route; expected one of {}", known.join(", ")),
            )
        }),
    }
}

/// Parses a memory kind.
pub fn parse_kind(kind: &str) -> Result<MemoryKind, Error> {
    MemoryKind::parse(kind).ok_or_else(|| {
        Error::invalid(
            "kind",
            "unknown kind; expected profile, episodic or correction",
        )
    })
}

/// Parses a memory status.
pub fn parse_status(status: &str) -> Result<MemoryStatus, Error> {
    match status {
        "candidate" => Ok(MemoryStatus::Candidate),
        "active" => Ok(MemoryStatus::Active),
        "suppressed" => Ok(MemoryStatus::Suppressed),
        "deleted" => Ok(MemoryStatus::Deleted),
        "expired" => Ok(MemoryStatus::Expired),
        _ => Err(Error::invalid(
            "status",
            "unknown status; expected candidate, active, suppressed, deleted or expired",
        )),
    }
}

/// A choice the user made in a turn (counted towards preferences: three identical choices
/// form a profile candidate).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChoiceBody {
    /// Topic (`chart_type`, `granularity`, ...); empty to infer it from the value.
    #[serde(default)]
    pub topic: String,
    /// The chosen value.
    pub value: String,
}

/// A conversation turn.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnBody {
    /// Idempotency key: a retry with the same id returns the original result.
    pub request_id: String,
    /// Session; omitted, the user's default stream.
    pub session_id: Option<String>,
    /// The user's message.
    pub user_text: String,
    /// The assistant's answer (stored capped at 2,000 characters).
    #[serde(default)]
    pub assistant_text: String,
    /// Route the gateway took (`nl2sql_query`, `kpi_lookup`, `business_knowledge_qa`,
    /// `deep_analysis_workflow`).
    pub route: Option<String>,
    /// Whether the turn succeeded; failed turns are not written. Default true.
    #[serde(default = "yes")]
    pub success: bool,
    /// Trace id for correlation.
    pub trace_id: Option<String>,
    /// Choices the user made.
    #[serde(default)]
    pub choices: Vec<ChoiceBody>,
    /// A clarification the user accepted in this turn (forms an active episodic memory).
    pub clarification: Option<ClarificationBody>,
}

/// A clarifying question the assistant asked and the answer the user accepted.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClarificationBody {
    /// The assistant's question (at most 500 characters).
    pub question: String,
    /// The answer the user accepted (at most 500 characters).
    pub answer: String,
}

fn yes() -> bool {
    true
}

/// A memory formed or touched by a write.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemoryChangeView {
    /// The memory.
    pub memory_id: String,
    /// Its kind.
    pub kind: String,
    /// `created`, `reinforced`, `superseded`, `flagged`, `activated` or `suppressed`.
    pub action: String,
}

impl From<MemoryChange> for MemoryChangeView {
    fn from(c: MemoryChange) -> Self {
        MemoryChangeView {
            memory_id: c.memory_id,
            kind: c.kind.as_str().into(),
            action: c.action,
        }
    }
}

/// The outcome of a turn.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnResponse {
    /// Whether it was written (failed turns are not).
    pub written: bool,
    /// Session it went to.
    pub session_id: String,
    /// Its sequence number within the user.
    pub seq: Option<u64>,
    /// Entities found in it.
    pub entities: Vec<String>,
    /// Memories formed or touched.
    pub memories: Vec<MemoryChangeView>,
    /// Intents the rules found in the user's text and wrote at once.
    pub intents: Vec<IntentVersionView>,
    /// Whether the user's text is queued for the generative model (its result follows).
    pub distilling: bool,
    /// True when this replays the outcome of an earlier request with the same id.
    pub replayed: bool,
}

/// A version of an intent a write recorded.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntentVersionView {
    /// Intent type.
    pub intent_type: String,
    /// The new version (Unix ms).
    pub version: i64,
    /// Earlier versions made inactive.
    pub deactivated: Vec<i64>,
    /// The version it replaced (the same type within the replace window), if any.
    pub replaced: Option<i64>,
}

impl From<IntentAck> for IntentVersionView {
    fn from(a: IntentAck) -> Self {
        IntentVersionView {
            intent_type: a.intent_type,
            version: a.version.0,
            deactivated: a.deactivated.iter().map(|t| t.0).collect(),
            replaced: a.replaced.map(|t| t.0),
        }
    }
}

impl From<TurnAck> for TurnResponse {
    fn from(a: TurnAck) -> Self {
        TurnResponse {
            written: a.written,
            session_id: a.session_id,
            seq: a.seq,
            entities: a.entities,
            memories: a.memories.into_iter().map(Into::into).collect(),
            intents: a.intents.into_iter().map(Into::into).collect(),
            distilling: a.distilling,
            replayed: a.replayed,
        }
    }
}

/// Feedback on a turn.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackBody {
    /// Idempotency key.
    pub request_id: String,
    /// Session of the turn; omitted, the default stream.
    pub session_id: Option<String>,
    /// Sequence number of the turn.
    pub turn_seq: u64,
    /// `like` or `dislike`.
    pub rating: String,
    /// The SQL the user says is right (with a comment, a dislike forms a correction).
    pub corrected_sql: Option<String>,
    /// The user's explanation.
    pub comment: Option<String>,
    /// Trace id.
    pub trace_id: Option<String>,
}

/// The outcome of feedback.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FeedbackResponse {
    /// Memories formed or touched.
    pub memories: Vec<MemoryChangeView>,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

impl From<FeedbackAck> for FeedbackResponse {
    fn from(a: FeedbackAck) -> Self {
        FeedbackResponse {
            memories: a.memories.into_iter().map(Into::into).collect(),
            replayed: a.replayed,
        }
    }
}

/// A request for a memory context.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBody {
    /// Session whose working memory to include; omitted, the default stream.
    pub session_id: Option<String>,
    /// The question about to be asked.
    pub query: Option<String>,
    /// Route (sets the slot budgets); default `nl2sql_query`.
    pub route: Option<String>,
    /// Token budget; default from `[memory] token-budget`.
    pub token_budget: Option<usize>,
    /// Also serve the tenant's few-shot examples and cached SQL for the question.
    pub shared: Option<super::shared::SharedAsk>,
}

/// What `POST /v1/cluster/drain` drains.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainBody {
    /// The node to drain; omitted, the node that receives the request.
    pub node_id: Option<String>,
}

/// A drain that started.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DrainResponse {
    /// The node draining.
    pub node_id: String,
    /// `draining`.
    pub status: String,
}

/// The cluster view of `GET /v1/cluster/status`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node: String,
    /// Shards in the cluster.
    pub shards: u32,
    /// Shards the answering node serves now.
    pub held: usize,
    /// Membership rows.
    pub members: Vec<MemberView>,
    /// Every shard's lease.
    pub leases: Vec<LeaseView>,
}

/// The inference pipeline of the answering node, `GET /v1/cluster/pipeline`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PipelineStatus {
    /// The node that answered.
    pub node: String,
    /// Whether writes leave their embeddings to the pipeline on this node.
    pub enabled: bool,
    /// Users of this node's shards with pending embeddings, counted in storage now.
    pub pending_users: usize,
    /// Their pending embeddings.
    pub pending_entries: usize,
    /// Age of the oldest of them, in milliseconds (0: none).
    pub oldest_pending_age_ms: i64,
    /// Embeddings stored by this node's pipeline since it started.
    pub stored: u64,
    /// Embeddings dropped since it started (record deleted or rewritten meanwhile).
    pub dropped: u64,
}

/// A member of the cluster.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberView {
    /// Node id.
    pub node_id: String,
    /// Its HTTP address.
    pub http_addr: String,
    /// `active`, `draining` or `left`.
    pub status: String,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: i64,
    /// Whether it counts as alive (active, heartbeat younger than the lease timeout).
    pub live: bool,
    /// Shards whose lease names it.
    pub shards: usize,
}

/// A shard's lease.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LeaseView {
    /// Shard.
    pub shard: u32,
    /// Owner, if held.
    pub owner: Option<String>,
    /// Epoch, bumped at every take-over.
    pub epoch: u64,
}

/// A search of a user's memories.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    /// What to look for (required, at most 4,000 characters).
    pub query: String,
    /// At most this many hits, 1 to 100; default 10.
    pub k: Option<usize>,
    /// Only these kinds (`profile`, `episodic`, `correction`); default every kind.
    pub kinds: Option<Vec<String>>,
    /// `hybrid` (default: dense, BM25, recency and salience fused), `dense` or `bm25`.
    pub mode: Option<String>,
    /// Only active memories (the seed's rule); default false: candidates are found too.
    pub active_only: Option<bool>,
    /// Rerank the first candidates (30 by default) with the node's English cross-encoder,
    /// fused with the mode's order; default false. It costs about 12 ms a candidate on two
    /// CPU cores; past `[reranker] deadline` the mode's order is returned, saying why.
    pub rerank: Option<bool>,
}

/// A memory found by a search.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SearchHitView {
    /// The memory.
    pub memory: MemoryView,
    /// Its score: fused (hybrid), BM25 or cosine similarity (dense); reranked, the
    /// reciprocal-rank fusion of the reranker's order and the mode's.
    pub score: f32,
}

/// Search results, best first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    /// Hits.
    pub hits: Vec<SearchHitView>,
    /// Whether the query was embedded; false when the node does not embed, or the query's
    /// embedding missed the read deadline or was refused (the search then used words,
    /// recency and salience).
    pub embedded: bool,
    /// Why the query was ranked without its vector: `deadline`, `overloaded` or
    /// `unavailable` (absent when it was embedded, or the node does not embed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// Whether the hits were reranked (asked with `rerank`, and done).
    pub reranked: bool,
    /// Why a search that asked to be reranked was not: `not-english` (the model reads
    /// English), `busy` (the node's rerank queue was full), `deadline` or `unavailable`
    /// (the node has no reranker, or it failed); the hits are then in the mode's order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_fallback: Option<String>,
}

/// Parses a search mode.
pub fn parse_mode(mode: Option<&str>) -> Result<SearchMode, Error> {
    match mode {
        None | Some("hybrid") => Ok(SearchMode::Hybrid),
        Some("dense") => Ok(SearchMode::Dense),
        Some("bm25") => Ok(SearchMode::Bm25),
        Some(_) => Err(Error::invalid(
            "mode",
            "unknown mode; expected hybrid, dense or bm25",
        )),
    }
}

/// A recent turn in a context.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextTurnView {
    /// Sequence number.
    pub seq: u64,
    /// User text.
    pub user: String,
    /// Assistant text.
    pub assistant: String,
}

/// An older turn, summarised.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextSummaryView {
    /// Sequence number.
    pub seq: u64,
    /// Summary.
    pub text: String,
    /// `extractive`.
    pub method: String,
}

/// A memory in a context slot.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextMemoryView {
    /// The memory.
    pub memory_id: String,
    /// Its text.
    pub text: String,
    /// Ranking score.
    pub score: f32,
    /// Corrected SQL, for corrections.
    pub corrected_sql: Option<String>,
    /// `active`, or `candidate`: formed but not yet confirmed (promoted by a like, by
    /// reinforcement, or by use in a successful turn).
    #[serde(default)]
    pub status: String,
    /// How sure the memory model is of it (0 to 1): as formed (0.5 by default, 0.8 for a
    /// correction with SQL), raised by likes and reinforcement.
    #[serde(default)]
    pub confidence: f32,
}

/// A current intent in a context's key-intents slot.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextIntentView {
    /// Intent type.
    pub intent_type: String,
    /// What it is about (masked).
    pub target: String,
    /// `low`, `medium` or `high`, when known.
    pub priority: Option<String>,
    /// Version (Unix ms).
    pub version: i64,
}

/// A memory context, structured and rendered.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextResponse {
    /// Route.
    pub route: String,
    /// The last turns of the session, oldest first.
    pub recent_turns: Vec<ContextTurnView>,
    /// Summaries of older turns, oldest first.
    pub summaries: Vec<ContextSummaryView>,
    /// Profile slot.
    pub profile: Vec<ContextMemoryView>,
    /// Episodic slot.
    pub episodic: Vec<ContextMemoryView>,
    /// Correction slot.
    pub corrections: Vec<ContextMemoryView>,
    /// Key-intents slot: the current version of each key intent type, newest first.
    pub intents: Vec<ContextIntentView>,
    /// Entities mentioned.
    pub entities: Vec<String>,
    /// Estimated tokens of `text`.
    pub tokens: usize,
    /// Budget it was fitted to.
    pub token_budget: usize,
    /// Whether something was dropped to fit.
    pub truncated: bool,
    /// What was dropped.
    pub dropped: Vec<String>,
    /// The block to put in the prompt.
    pub text: String,
    /// Whether the query was embedded and its vector used in ranking.
    #[serde(default)]
    pub query_embedded: bool,
    /// Why the query was ranked without its vector: `deadline`, `overloaded` or
    /// `unavailable` (absent when it was embedded, there was no query, or the node does not
    /// embed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// nl2sql contexts: the tenant's cached metadata (`PUT /v1/metadata/{name}`) of the tables
    /// the query or the session mentions.
    #[serde(default)]
    pub tables: Vec<ContextTableView>,
    /// The tenant's few-shot examples and cached SQL for the question, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<super::shared::SharedContext>,
}

/// A table's cached metadata in a context.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextTableView {
    /// The table.
    pub name: String,
    /// Its metadata as cached (JSON text, at most 600 characters).
    pub metadata: String,
}

fn memory_views(m: Vec<ContextMemory>) -> Vec<ContextMemoryView> {
    m.into_iter()
        .map(|m| ContextMemoryView {
            memory_id: m.memory_id,
            text: m.text,
            score: m.score,
            corrected_sql: m.corrected_sql,
            status: records::status_name(m.status).to_owned(),
            confidence: m.confidence,
        })
        .collect()
}

impl From<MemoryContext> for ContextResponse {
    fn from(c: MemoryContext) -> Self {
        ContextResponse {
            route: c.route,
            recent_turns: c
                .recent_turns
                .into_iter()
                .map(|t: ContextTurn| ContextTurnView {
                    seq: t.seq,
                    user: t.user,
                    assistant: t.assistant,
                })
                .collect(),
            summaries: c
                .summaries
                .into_iter()
                .map(|s: ContextSummary| ContextSummaryView {
                    seq: s.seq,
                    text: s.text,
                    method: s.method,
                })
                .collect(),
            profile: memory_views(c.profile),
            episodic: memory_views(c.episodic),
            corrections: memory_views(c.corrections),
            intents: c
                .intents
                .into_iter()
                .map(|i: ContextIntent| ContextIntentView {
                    intent_type: i.intent_type,
                    target: i.target,
                    priority: i.priority,
                    version: i.version,
                })
                .collect(),
            entities: c.entities,
            tokens: c.tokens,
            token_budget: c.token_budget,
            truncated: c.truncated,
            dropped: c.dropped,
            text: c.text,
            query_embedded: c.query_embedded,
            fallback: c.fallback.map(|f| f.as_str().to_owned()),
            tables: c
                .tables
                .into_iter()
                .map(|t| ContextTableView {
                    name: t.name,
                    metadata: t.metadata,
                })
                .collect(),
            shared: None,
        }
    }
}
