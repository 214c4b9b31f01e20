//! The requests and answers of a tenant's shared sets (the semantic SQL cache and the few-shot
//! library), as the front door carries them to the tenant's actor.

use engram_storage::shared::{Example, ExampleStatus, SharedSettings};
use engram_storage::types::Timestamp;
use serde::{Deserialize, Serialize};

use crate::embed::Fallback;

/// Longest question, in characters.
pub const MAX_QUESTION_CHARS: usize = 2_000;
/// Longest SQL text, in bytes.
pub const MAX_SQL_BYTES: usize = 32 * 1024;
/// Most examples one search serves.
pub const MAX_EXAMPLES_SERVED: usize = 3;
/// Most examples one listing or export returns, and one import takes.
pub const MAX_EXAMPLE_PAGE: usize = 1_000;

/// A question's vector, made by the tenant's actor in a task of its own before it serves a
/// lookup or a search (so that the actor, which serialises every request of the tenant, never
/// waits for the encoder), or by the node that took the request in earlier versions. Clients
/// of the front door leave it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QuestionVector {
    /// The normalised question's embedding.
    Embedded(Vec<f32>),
    /// Why there is none: the lookup compares normalised texts only.
    Fallback(Fallback),
}

/// Look a question up in the SQL cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlLookup {
    /// The question as asked.
    pub question: String,
    /// The gateway's route.
    pub route: String,
    /// The data domain.
    pub domain: String,
    /// The question's vector (`None` from the front door: the actor embeds the question
    /// before serving the request; kept in the frame for nodes of other versions).
    #[serde(default)]
    pub vector: Option<QuestionVector>,
}

/// A cached SQL that answers a question close enough.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlHit {
    /// The entry.
    pub entry_id: String,
    /// The SQL text.
    pub sql: String,
    /// The normalised question it was stored for.
    pub question: String,
    /// Cosine similarity of the two questions (1 for the same normalised text).
    pub similarity: f32,
    /// How old the entry is, in milliseconds.
    pub age_ms: i64,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlLookupReply {
    /// The hit, if any.
    pub hit: Option<SqlHit>,
    /// The least similarity a hit needed (the tenant's or the domain's).
    pub threshold: f32,
    /// Why the question was compared by its normalised text only (no vector in time).
    pub fallback: Option<Fallback>,
}

/// Store the SQL that answered a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlPut {
    /// Idempotency key.
    pub request_id: String,
    /// The question as asked.
    pub question: String,
    /// The gateway's route.
    pub route: String,
    /// The data domain.
    pub domain: String,
    /// The SQL text (never its results).
    pub sql: String,
    /// The normalised question's embedding (`None` from the front door: the actor embeds
    /// the question before serving the request; kept in the frame for nodes of other
    /// versions).
    #[serde(default)]
    pub vector: Option<Vec<f32>>,
}

/// A stored SQL cache entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlPutAck {
    /// The entry's id.
    pub entry_id: String,
    /// The tables the SQL names, as an invalidation matches them.
    pub tables: Vec<String>,
    /// When it stops being served.
    pub expires_at: Timestamp,
    /// Whether it replaced an entry for the same question.
    pub replaced: bool,
    /// Whether this answers a retry.
    #[serde(default)]
    pub replayed: bool,
}

/// Drop the cached SQL that mentions a table (its schema changed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlInvalidate {
    /// Idempotency key.
    pub request_id: String,
    /// The table.
    pub table: String,
}

/// What an invalidation removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvalidateAck {
    /// Entries removed.
    pub removed: usize,
    /// Whether this answers a retry.
    #[serde(default)]
    pub replayed: bool,
}

/// Record a question whose SQL succeeded (`record_success`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleRecord {
    /// Idempotency key.
    pub request_id: String,
    /// The question as asked.
    pub question: String,
    /// The SQL that answered it.
    pub sql: String,
    /// The gateway's route.
    pub route: String,
    /// The gateway's confidence in the SQL, 0 to 1.
    pub confidence: f32,
    /// The normalised question's embedding (`None` from the front door: the actor embeds
    /// the question before serving the request; kept in the frame for nodes of other
    /// versions).
    #[serde(default)]
    pub vector: Option<Vec<f32>>,
}

/// An example after a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleAck {
    /// The example as stored (`None` when the write removed it).
    pub example: Option<Example>,
    /// Whether the write approved it automatically (auto-promotion).
    #[serde(default)]
    pub promoted: bool,
    /// Whether the write removed it (too many failures).
    #[serde(default)]
    pub removed: bool,
    /// Whether this answers a retry.
    #[serde(default)]
    pub replayed: bool,
}

/// Approved examples close to a question (`search_similar`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleSearch {
    /// The question as asked.
    pub question: String,
    /// The gateway's route.
    pub route: String,
    /// At most this many (1 to 3).
    pub limit: usize,
    /// The question's vector (`None` from the front door: the actor embeds the question
    /// before serving the request; kept in the frame for nodes of other versions).
    #[serde(default)]
    pub vector: Option<QuestionVector>,
}

/// An example served, with its similarity to the question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleHit {
    /// The example.
    pub example: Example,
    /// Cosine similarity of the two questions.
    pub similarity: f32,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleSearchReply {
    /// Best first.
    pub hits: Vec<ExampleHit>,
    /// Why the question was compared by its normalised text only.
    pub fallback: Option<Fallback>,
}

/// List examples (the review queue, for admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleList {
    /// Only those of this status.
    pub status: Option<ExampleStatus>,
    /// Only those of this route.
    pub route: Option<String>,
    /// Only ids after this one (paging).
    pub after: Option<String>,
    /// At most this many (1 to 1,000).
    pub limit: usize,
}

/// What a reviewer does to an example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReviewAction {
    /// Serve it.
    Approve,
    /// Never serve it.
    Reject,
    /// Change its question or SQL (an approved example stays approved).
    Edit {
        /// The new question.
        question: Option<String>,
        /// The new SQL.
        sql: Option<String>,
    },
}

/// Review an example (admin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleReview {
    /// Idempotency key.
    pub request_id: String,
    /// The example.
    pub example_id: String,
    /// What to do.
    pub action: ReviewAction,
}

/// Report that an example led to a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleFailure {
    /// Idempotency key.
    pub request_id: String,
    /// The example.
    pub example_id: String,
}

/// An example as exported and imported (YAML): no embedding, no ids of keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PortableExample {
    /// The question.
    pub question: String,
    /// The SQL.
    pub sql: String,
    /// The route.
    pub route: String,
    /// Confidence, 0 to 1.
    pub confidence: f32,
    /// Review status.
    pub status: ExampleStatus,
    /// Successes recorded.
    #[serde(default)]
    pub successes: u32,
    /// Failures reported.
    #[serde(default)]
    pub fail_count: u32,
}

/// Import examples (admin): each is stored by its (route, question, SQL), replacing the
/// status and counts of the same example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleImport {
    /// Idempotency key.
    pub request_id: String,
    /// The examples.
    pub examples: Vec<PortableExample>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportAck {
    /// Examples new to the library.
    pub created: usize,
    /// Examples that were there and were replaced.
    pub updated: usize,
    /// Whether this answers a retry.
    #[serde(default)]
    pub replayed: bool,
}

/// Export examples (admin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleExport {
    /// Only those of this status.
    pub status: Option<ExampleStatus>,
}

/// Read the tenant's settings of its shared sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadSettings;

/// Replace the tenant's settings of its shared sets (admin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteSettings {
    /// Idempotency key.
    pub request_id: String,
    /// The settings.
    pub settings: SharedSettings,
}

/// The settings after a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingsAck {
    /// As stored.
    pub settings: SharedSettings,
    /// Whether this answers a retry.
    #[serde(default)]
    pub replayed: bool,
}

/// Cache a table's metadata for the tenant (`/v1/metadata`), replacing what the name held;
/// a retry stores the same entry again. Stamped with the actor's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataPut {
    /// The name (a table's).
    pub name: String,
    /// The metadata as JSON text.
    pub content: String,
    /// How long it is served, in milliseconds.
    pub ttl_ms: i64,
}

/// The tenant's cached metadata still live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataList;

/// Remove a cached metadata entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataRemove {
    /// The name.
    pub name: String,
}
