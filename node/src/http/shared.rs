//! The tenant's shared sets over HTTP: the semantic SQL cache (`/v1/sql-cache/...`), the
//! few-shot library (`/v1/few-shot/...`, its review under `/v1/admin/few-shot/...`, export and
//! import as YAML) and their settings. Every request goes to the tenant's actor through the
//! front door ([`engram_actors::tenant`]), which checks the input and holds the rules.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_actors::placement::UserKey;
use engram_actors::tenant::api::{
    ExampleAck, ExampleExport, ExampleFailure, ExampleImport, ExampleRecord, ExampleReview,
    ExampleSearch, ExampleSearchReply, MAX_EXAMPLES_SERVED, PortableExample, QuestionVector,
    ReadSettings, ReviewAction, SqlHit, SqlInvalidate, SqlLookup, SqlLookupReply, SqlPut,
    WriteSettings,
};
use engram_storage::shared::{DomainSettings, Example, ExampleStatus, SharedSettings};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::wire::ErrorBody;
use super::{ApiError, ApiJson, AppState, ok};
use crate::auth::Caller;

/// The question's vector, made here before the request goes to the tenant's actor (which
/// serialises all of the tenant's requests and so must not wait for the encoder).
async fn question_vector(s: &AppState, caller: &Caller, question: &str) -> Option<QuestionVector> {
    let services = s.users.directory().services();
    engram_actors::tenant::embed_question(services, &caller.tenant, question).await
}

/// The question's vector for a write, made here (without a deadline) for the same reason.
async fn write_vector(
    s: &AppState,
    caller: &Caller,
    question: &str,
) -> Result<Option<Vec<f32>>, ApiError> {
    let services = s.users.directory().services();
    Ok(engram_actors::tenant::embed_for_write(services, &caller.tenant, question).await?)
}

/// The key of the caller's tenant's shared sets.
fn shared(caller: &Caller) -> UserKey {
    UserKey::shared(caller.tenant.as_str())
}

/// A question to look up in the SQL cache.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlLookupBody {
    /// The question as the user asked it (at most 2,000 characters).
    pub question: String,
    /// The gateway's route (e.g. `nl2sql`).
    pub route: String,
    /// The data domain (e.g. `sales`).
    pub domain: String,
}

/// A cached SQL that answers the question.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SqlHitView {
    /// The entry's id.
    pub entry_id: String,
    /// The SQL text.
    pub sql: String,
    /// The normalised question it was stored for.
    pub question: String,
    /// Cosine similarity of the two questions (1 for the same normalised text).
    pub similarity: f32,
    /// Age of the entry, in milliseconds.
    pub age_ms: i64,
}

impl From<SqlHit> for SqlHitView {
    fn from(h: SqlHit) -> Self {
        SqlHitView {
            entry_id: h.entry_id,
            sql: h.sql,
            question: h.question,
            similarity: h.similarity,
            age_ms: h.age_ms,
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SqlLookupResponse {
    /// The hit; absent on a miss.
    pub hit: Option<SqlHitView>,
    /// The least similarity a hit needed.
    pub threshold: f32,
    /// Why only the same normalised question could hit (`deadline`, `overloaded`,
    /// `unavailable`): the question's vector did not come in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl From<SqlLookupReply> for SqlLookupResponse {
    fn from(r: SqlLookupReply) -> Self {
        SqlLookupResponse {
            hit: r.hit.map(Into::into),
            threshold: r.threshold,
            fallback: r.fallback.map(|f| f.as_str().to_owned()),
        }
    }
}

/// The SQL that answered a question, to cache.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlPutBody {
    /// Idempotency key.
    pub request_id: String,
    /// The question as asked.
    pub question: String,
    /// The gateway's route.
    pub route: String,
    /// The data domain.
    pub domain: String,
    /// The SQL text (never its results; at most 32 KiB).
    pub sql: String,
}

/// A cached entry.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SqlPutResponse {
    /// The entry's id.
    pub entry_id: String,
    /// The tables the SQL names (what an invalidation matches, with any other mention).
    pub tables: Vec<String>,
    /// Served until (Unix ms).
    pub expires_at: i64,
    /// Whether it replaced the entry of the same question.
    pub replaced: bool,
    /// Whether this answers a retry.
    pub replayed: bool,
}

/// A table whose schema changed.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvalidateBody {
    /// Idempotency key.
    pub request_id: String,
    /// The table (schema-qualified or not).
    pub table: String,
}

/// What an invalidation removed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InvalidateResponse {
    /// Entries removed.
    pub removed: usize,
    /// Whether this answers a retry.
    pub replayed: bool,
}

fn observe(s: &AppState, set: &str, outcome: &str, started: Instant) {
    s.metrics.shared(set, outcome, started.elapsed());
}

#[utoipa::path(post, path = "/v1/sql-cache/lookup", tag = "shared",
    request_body = SqlLookupBody,
    responses((status = 200, body = SqlLookupResponse), (status = 400, body = ErrorBody)))]
/// Looks a question up in the tenant's semantic SQL cache: the SQL of the closest question of
/// the same route and domain, if it is similar enough and young enough.
pub async fn sql_lookup(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SqlLookupBody>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let vector = question_vector(&s, &caller, &body.question).await;
    let reply = s
        .ask(
            &caller,
            &shared(&caller),
            SqlLookup {
                question: body.question,
                route: body.route,
                domain: body.domain,
                vector,
            },
        )
        .await?;
    observe(&s, "sql_cache", lookup_outcome(&reply), started);
    Ok(ok(SqlLookupResponse::from(reply)))
}

#[utoipa::path(post, path = "/v1/sql-cache", tag = "shared",
    request_body = SqlPutBody,
    responses((status = 200, body = SqlPutResponse), (status = 400, body = ErrorBody)))]
/// Caches the SQL that answered a question (replacing the entry of the same question in the
/// same route and domain). A retry with the same request id replays the answer.
pub async fn sql_put(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SqlPutBody>,
) -> Result<Response, ApiError> {
    let vector = write_vector(&s, &caller, &body.question).await?;
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            SqlPut {
                request_id: body.request_id,
                question: body.question,
                route: body.route,
                domain: body.domain,
                sql: body.sql,
                vector,
            },
        )
        .await?;
    Ok(ok(SqlPutResponse {
        entry_id: ack.entry_id,
        tables: ack.tables,
        expires_at: ack.expires_at.0,
        replaced: ack.replaced,
        replayed: ack.replayed,
    }))
}

#[utoipa::path(post, path = "/v1/sql-cache/invalidate", tag = "shared",
    request_body = InvalidateBody,
    responses((status = 200, body = InvalidateResponse), (status = 400, body = ErrorBody)))]
/// A table's schema changed: drops every cached SQL that mentions it.
pub async fn sql_invalidate(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<InvalidateBody>,
) -> Result<Response, ApiError> {
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            SqlInvalidate {
                request_id: body.request_id,
                table: body.table,
            },
        )
        .await?;
    Ok(ok(InvalidateResponse {
        removed: ack.removed,
        replayed: ack.replayed,
    }))
}

/// A question whose SQL succeeded (`record_success`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordBody {
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
}

/// A few-shot example.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExampleView {
    /// Id.
    pub example_id: String,
    /// The question, normalised.
    pub question: String,
    /// The SQL.
    pub sql: String,
    /// The route.
    pub route: String,
    /// Confidence, 0 to 1.
    pub confidence: f32,
    /// `pending_review`, `approved` or `rejected`.
    pub status: String,
    /// Successes recorded.
    pub successes: u32,
    /// Failures reported.
    pub fail_count: u32,
    /// First recorded (Unix ms).
    pub created_at: i64,
    /// Last changed (Unix ms).
    pub updated_at: i64,
    /// Last served or recorded (Unix ms); 30 days after it the example expires.
    pub last_used_at: i64,
    /// Who approved, rejected or edited it last (a key id, `auto-promotion` or `import`).
    pub reviewed_by: Option<String>,
}

impl From<Example> for ExampleView {
    fn from(e: Example) -> Self {
        ExampleView {
            example_id: e.id,
            question: e.question,
            sql: e.sql,
            route: e.route,
            confidence: e.confidence,
            status: e.status.as_str().to_owned(),
            successes: e.successes,
            fail_count: e.fail_count,
            created_at: e.created_at.0,
            updated_at: e.updated_at.0,
            last_used_at: e.last_used_at.0,
            reviewed_by: e.reviewed_by,
        }
    }
}

/// An example after a write.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExampleResponse {
    /// The example; absent when the write removed it.
    pub example: Option<ExampleView>,
    /// Whether it was approved automatically (auto-promotion, audited).
    pub promoted: bool,
    /// Whether it was removed (more than three failures).
    pub removed: bool,
    /// Whether this answers a retry.
    pub replayed: bool,
}

impl From<ExampleAck> for ExampleResponse {
    fn from(a: ExampleAck) -> Self {
        ExampleResponse {
            example: a.example.map(Into::into),
            promoted: a.promoted,
            removed: a.removed,
            replayed: a.replayed,
        }
    }
}

#[utoipa::path(post, path = "/v1/few-shot/examples", tag = "shared",
    request_body = RecordBody,
    responses((status = 200, body = ExampleResponse), (status = 400, body = ErrorBody)))]
/// Records a question and the SQL that answered it well (`record_success`): a new example
/// waits for review; a known one counts one more success.
pub async fn record_example(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<RecordBody>,
) -> Result<Response, ApiError> {
    let vector = write_vector(&s, &caller, &body.question).await?;
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleRecord {
                request_id: body.request_id,
                question: body.question,
                sql: body.sql,
                route: body.route,
                confidence: body.confidence,
                vector,
            },
        )
        .await?;
    Ok(ok(ExampleResponse::from(ack)))
}

/// A question to find examples for.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchExamplesBody {
    /// The question as asked.
    pub question: String,
    /// The gateway's route.
    pub route: String,
    /// At most this many, 1 to 3; default 3.
    pub limit: Option<usize>,
}

/// An example served, with its similarity to the question.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExampleHitView {
    /// The example.
    pub example: ExampleView,
    /// Cosine similarity of the two questions.
    pub similarity: f32,
}

/// The examples served.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchExamplesResponse {
    /// Best first.
    pub examples: Vec<ExampleHitView>,
    /// Why only the same normalised question could match (no vector in time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl From<ExampleSearchReply> for SearchExamplesResponse {
    fn from(r: ExampleSearchReply) -> Self {
        SearchExamplesResponse {
            examples: r
                .hits
                .into_iter()
                .map(|h| ExampleHitView {
                    example: h.example.into(),
                    similarity: h.similarity,
                })
                .collect(),
            fallback: r.fallback.map(|f| f.as_str().to_owned()),
        }
    }
}

#[utoipa::path(post, path = "/v1/few-shot/search", tag = "shared",
    request_body = SearchExamplesBody,
    responses((status = 200, body = SearchExamplesResponse), (status = 400, body = ErrorBody)))]
/// The approved examples closest to a question (`search_similar`): similarity at least 0.95,
/// confidence at least 0.9, at most three failures; the best three.
pub async fn search_examples(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SearchExamplesBody>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let vector = question_vector(&s, &caller, &body.question).await;
    let reply = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleSearch {
                question: body.question,
                route: body.route,
                limit: body.limit.unwrap_or(MAX_EXAMPLES_SERVED),
                vector,
            },
        )
        .await?;
    let outcome = if reply.hits.is_empty() { "miss" } else { "hit" };
    observe(&s, "few_shot", outcome, started);
    Ok(ok(SearchExamplesResponse::from(reply)))
}

/// A request id, for writes that carry nothing else.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestIdBody {
    /// Idempotency key.
    pub request_id: String,
}

#[utoipa::path(post, path = "/v1/few-shot/examples/{example_id}/failure", tag = "shared",
    params(("example_id" = String, Path, description = "Example id")),
    request_body = RequestIdBody,
    responses((status = 200, body = ExampleResponse), (status = 404, body = ErrorBody)))]
/// Reports that an example led to a failure; past three failures it is removed.
pub async fn example_failed(
    State(s): State<AppState>,
    caller: Caller,
    Path(example_id): Path<String>,
    ApiJson(body): ApiJson<RequestIdBody>,
) -> Result<Response, ApiError> {
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleFailure {
                request_id: body.request_id,
                example_id,
            },
        )
        .await?;
    Ok(ok(ExampleResponse::from(ack)))
}

fn parse_status(status: Option<&str>) -> Result<Option<ExampleStatus>, ApiError> {
    status
        .map(|s| match s {
            "pending_review" => Ok(ExampleStatus::PendingReview),
            "approved" => Ok(ExampleStatus::Approved),
            "rejected" => Ok(ExampleStatus::Rejected),
            other => Err(ApiError::invalid(format!(
                "invalid status: {other:?}; use pending_review, approved or rejected"
            ))),
        })
        .transpose()
}

/// Which examples to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// `pending_review` (the review queue), `approved` or `rejected`; omitted, all.
    pub status: Option<String>,
    /// Only this route's.
    pub route: Option<String>,
    /// Only ids after this one (the last id of the previous page).
    pub after: Option<String>,
    /// At most this many, 1 to 1,000; default 100.
    pub limit: Option<usize>,
}

/// A page of examples.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExamplePage {
    /// In id order.
    pub examples: Vec<ExampleView>,
}

#[utoipa::path(get, path = "/v1/admin/few-shot/examples", tag = "shared",
    params(ListParams),
    responses((status = 200, body = ExamplePage), (status = 400, body = ErrorBody)))]
/// Lists the tenant's examples, the review queue with `status=pending_review` (admin).
pub async fn list_examples(
    State(s): State<AppState>,
    caller: Caller,
    Query(params): Query<ListParams>,
) -> Result<Response, ApiError> {
    let examples = s
        .ask(
            &caller,
            &shared(&caller),
            engram_actors::tenant::api::ExampleList {
                status: parse_status(params.status.as_deref())?,
                route: params.route,
                after: params.after,
                limit: params.limit.unwrap_or(100),
            },
        )
        .await?;
    Ok(ok(ExamplePage {
        examples: examples.into_iter().map(Into::into).collect(),
    }))
}

async fn review(
    s: &AppState,
    caller: &Caller,
    example_id: String,
    request_id: String,
    action: ReviewAction,
) -> Result<Response, ApiError> {
    let ack = s
        .ask(
            caller,
            &shared(caller),
            ExampleReview {
                request_id,
                example_id,
                action,
            },
        )
        .await?;
    Ok(ok(ExampleResponse::from(ack)))
}

#[utoipa::path(post, path = "/v1/admin/few-shot/examples/{example_id}/approve", tag = "shared",
    params(("example_id" = String, Path, description = "Example id")),
    request_body = RequestIdBody,
    responses((status = 200, body = ExampleResponse), (status = 404, body = ErrorBody)))]
/// Approves an example: it is served from now on (admin).
pub async fn approve_example(
    State(s): State<AppState>,
    caller: Caller,
    Path(example_id): Path<String>,
    ApiJson(body): ApiJson<RequestIdBody>,
) -> Result<Response, ApiError> {
    review(
        &s,
        &caller,
        example_id,
        body.request_id,
        ReviewAction::Approve,
    )
    .await
}

#[utoipa::path(post, path = "/v1/admin/few-shot/examples/{example_id}/reject", tag = "shared",
    params(("example_id" = String, Path, description = "Example id")),
    request_body = RequestIdBody,
    responses((status = 200, body = ExampleResponse), (status = 404, body = ErrorBody)))]
/// Rejects an example: it is never served (admin).
pub async fn reject_example(
    State(s): State<AppState>,
    caller: Caller,
    Path(example_id): Path<String>,
    ApiJson(body): ApiJson<RequestIdBody>,
) -> Result<Response, ApiError> {
    review(
        &s,
        &caller,
        example_id,
        body.request_id,
        ReviewAction::Reject,
    )
    .await
}

/// An edit of an example.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    /// Idempotency key.
    pub request_id: String,
    /// The new question.
    pub question: Option<String>,
    /// The new SQL.
    pub sql: Option<String>,
}

#[utoipa::path(patch, path = "/v1/admin/few-shot/examples/{example_id}", tag = "shared",
    params(("example_id" = String, Path, description = "Example id")),
    request_body = EditBody,
    responses((status = 200, body = ExampleResponse), (status = 404, body = ErrorBody)))]
/// Edits an example's question or SQL; its status stays (admin).
pub async fn edit_example(
    State(s): State<AppState>,
    caller: Caller,
    Path(example_id): Path<String>,
    ApiJson(body): ApiJson<EditBody>,
) -> Result<Response, ApiError> {
    let action = ReviewAction::Edit {
        question: body.question,
        sql: body.sql,
    };
    review(&s, &caller, example_id, body.request_id, action).await
}

/// Which examples to export.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ExportParams {
    /// Only those of this status; omitted, all.
    pub status: Option<String>,
}

/// The YAML document of an export and an import.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Library {
    examples: Vec<PortableExample>,
}

/// The media type of exports.
const YAML: &str = "application/yaml";

#[utoipa::path(get, path = "/v1/admin/few-shot/export", tag = "shared",
    params(ExportParams),
    responses((status = 200, description = "The examples as YAML (`examples:` a list of \
        question, sql, route, confidence, status, successes, fail_count)", body = String,
        content_type = "application/yaml")))]
/// Exports the tenant's examples as YAML (admin).
pub async fn export_examples(
    State(s): State<AppState>,
    caller: Caller,
    Query(params): Query<ExportParams>,
) -> Result<Response, ApiError> {
    let examples = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleExport {
                status: parse_status(params.status.as_deref())?,
            },
        )
        .await?;
    let text = serde_yaml_ng::to_string(&Library { examples })
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, YAML)], text).into_response())
}

/// The request id of an import.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// Idempotency key.
    pub request_id: String,
}

/// What an import did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ImportResponse {
    /// Examples new to the library.
    pub created: usize,
    /// Examples that were there, replaced.
    pub updated: usize,
    /// Whether this answers a retry.
    pub replayed: bool,
}

#[utoipa::path(post, path = "/v1/admin/few-shot/import", tag = "shared",
    params(ImportParams),
    request_body(content = String, content_type = "application/yaml",
        description = "A document as the export writes it (at most 1,000 examples); the \
        same document as JSON is taken too"),
    responses((status = 200, body = ImportResponse), (status = 400, body = ErrorBody)))]
/// Imports examples from YAML, as the export writes them (admin): each is stored by its
/// route, question and SQL, with the status and counts the document gives.
pub async fn import_examples(
    State(s): State<AppState>,
    caller: Caller,
    Query(params): Query<ImportParams>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    // JSON is YAML too: a document in either reads the same.
    let readable = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split(';').next().unwrap_or("").trim();
            [YAML, "text/yaml", "application/json"]
                .iter()
                .any(|t| essence.eq_ignore_ascii_case(t))
        });
    if !readable {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "expected a request with `Content-Type: application/yaml` (or application/json)",
        ));
    }
    let library: Library = serde_yaml_ng::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("invalid YAML document: {e}")))?;
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleImport {
                request_id: params.request_id,
                examples: library.examples,
            },
        )
        .await?;
    Ok(ok(ImportResponse {
        created: ack.created,
        updated: ack.updated,
        replayed: ack.replayed,
    }))
}

/// One domain's SQL cache settings, where they differ from the tenant's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainSettingsView {
    /// Least similarity of a hit, 0.5 to 1.
    pub similarity: Option<f32>,
    /// Seconds an entry is served, 1 to 86,400.
    pub ttl_seconds: Option<u64>,
}

/// The tenant's settings of its shared sets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsView {
    /// Least similarity of a SQL cache hit, 0.5 to 1; default 0.92.
    pub sql_similarity: f32,
    /// Seconds a SQL cache entry is served, 1 to 86,400; default 900.
    pub sql_ttl_seconds: u64,
    /// Per-domain overrides, by domain.
    #[serde(default)]
    pub domains: std::collections::BTreeMap<String, DomainSettingsView>,
    /// Whether examples that keep succeeding and are near-duplicates of approved ones are
    /// approved automatically (audited); default false.
    #[serde(default)]
    pub auto_promote: bool,
    /// Whether a cached SQL answers only questions with the same numbers and time expressions
    /// as its own ("last week" is not "last month"); default true.
    #[serde(default = "yes")]
    pub literal_guard: bool,
}

fn yes() -> bool {
    true
}

/// A settings change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsBody {
    /// Idempotency key.
    pub request_id: String,
    /// The settings.
    pub settings: SettingsView,
}

impl From<SharedSettings> for SettingsView {
    fn from(s: SharedSettings) -> Self {
        SettingsView {
            sql_similarity: s.sql_similarity,
            sql_ttl_seconds: (s.sql_ttl_ms / 1000) as u64,
            domains: s
                .domains
                .into_iter()
                .map(|(domain, d)| {
                    let view = DomainSettingsView {
                        similarity: d.similarity,
                        ttl_seconds: d.ttl_ms.map(|ms| (ms / 1000) as u64),
                    };
                    (domain, view)
                })
                .collect(),
            auto_promote: s.auto_promote,
            literal_guard: s.literal_guard,
        }
    }
}

fn seconds_to_ms(field: &str, seconds: u64) -> Result<i64, ApiError> {
    i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1000))
        .ok_or_else(|| ApiError::invalid(format!("invalid {field}: too large")))
}

impl SettingsView {
    fn stored(self) -> Result<SharedSettings, ApiError> {
        let mut domains = std::collections::BTreeMap::new();
        for (domain, d) in self.domains {
            let ttl_ms = d
                .ttl_seconds
                .map(|s| seconds_to_ms("domains.ttl_seconds", s))
                .transpose()?;
            domains.insert(
                domain,
                DomainSettings {
                    similarity: d.similarity,
                    ttl_ms,
                },
            );
        }
        Ok(SharedSettings {
            sql_similarity: self.sql_similarity,
            sql_ttl_ms: seconds_to_ms("sql_ttl_seconds", self.sql_ttl_seconds)?,
            domains,
            auto_promote: self.auto_promote,
            literal_guard: self.literal_guard,
        })
    }
}

#[utoipa::path(get, path = "/v1/admin/shared/settings", tag = "shared",
    responses((status = 200, body = SettingsView)))]
/// The tenant's settings of its shared sets (admin).
pub async fn read_settings(
    State(s): State<AppState>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let settings = s.ask(&caller, &shared(&caller), ReadSettings).await?;
    Ok(ok(SettingsView::from(settings)))
}

#[utoipa::path(put, path = "/v1/admin/shared/settings", tag = "shared",
    request_body = SettingsBody,
    responses((status = 200, body = SettingsView), (status = 400, body = ErrorBody)))]
/// Replaces the tenant's settings of its shared sets: SQL cache thresholds and lifetimes per
/// tenant and domain, and auto-promotion of examples (admin).
pub async fn write_settings(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<SettingsBody>,
) -> Result<Response, ApiError> {
    let settings = body.settings.stored()?;
    let ack = s
        .ask(
            &caller,
            &shared(&caller),
            WriteSettings {
                request_id: body.request_id,
                settings,
            },
        )
        .await?;
    Ok(ok(SettingsView::from(ack.settings)))
}

/// What of the tenant's shared sets a context should carry (`shared` in a context request).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedAsk {
    /// The question to match; omitted, the context's `query`.
    pub question: Option<String>,
    /// The route the shared sets are keyed by (e.g. `nl2sql`).
    pub route: String,
    /// The data domain, for the cached SQL.
    pub domain: Option<String>,
    /// Serve approved few-shot examples; default true.
    pub examples: Option<bool>,
    /// Serve the cached SQL (needs `domain`); default true when a domain is given.
    pub cached_sql: Option<bool>,
}

/// The tenant's shared sets in a context.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SharedContext {
    /// Few-shot examples served, best first.
    pub examples: Vec<ExampleHitView>,
    /// The cached SQL of a close enough question.
    pub cached_sql: Option<SqlHitView>,
    /// Why only the same normalised question could match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// The shared sets' part of a context: the examples and the cached SQL, looked up at once.
pub async fn for_context(
    s: &AppState,
    caller: &Caller,
    ask: SharedAsk,
    query: Option<String>,
) -> Result<SharedContext, ApiError> {
    let Some(question) = ask.question.or(query) else {
        return Err(ApiError::invalid(
            "invalid shared.question: give it, or the context's query",
        ));
    };
    let want_sql = ask.cached_sql.unwrap_or(ask.domain.is_some());
    let domain = match (want_sql, ask.domain) {
        (true, None) => {
            return Err(ApiError::invalid(
                "invalid shared.domain: the cached SQL needs a domain",
            ));
        }
        (true, Some(domain)) => Some(domain),
        (false, _) => None,
    };
    let key = shared(caller);
    let started = Instant::now();
    let vector = question_vector(s, caller, &question).await;
    let examples = async {
        if ask.examples.unwrap_or(true) {
            let search = ExampleSearch {
                question: question.clone(),
                route: ask.route.clone(),
                limit: MAX_EXAMPLES_SERVED,
                vector: vector.clone(),
            };
            s.ask(caller, &key, search).await.map(Some)
        } else {
            Ok(None)
        }
    };
    let sql = async {
        match &domain {
            Some(domain) => {
                let lookup = SqlLookup {
                    question: question.clone(),
                    route: ask.route.clone(),
                    domain: domain.clone(),
                    vector: vector.clone(),
                };
                s.ask(caller, &key, lookup).await.map(Some)
            }
            None => Ok(None),
        }
    };
    let (examples, sql) = tokio::join!(examples, sql);
    let (examples, sql) = (examples?, sql?);
    if let Some(reply) = &examples {
        let outcome = if reply.hits.is_empty() { "miss" } else { "hit" };
        observe(s, "few_shot", outcome, started);
    }
    if let Some(reply) = &sql {
        observe(s, "sql_cache", lookup_outcome(reply), started);
    }
    let fallback = examples
        .as_ref()
        .and_then(|r| r.fallback)
        .or(sql.as_ref().and_then(|r| r.fallback));
    Ok(SharedContext {
        examples: examples
            .map(|r| SearchExamplesResponse::from(r).examples)
            .unwrap_or_default(),
        cached_sql: sql.and_then(|r| r.hit).map(Into::into),
        fallback: fallback.map(|f| f.as_str().to_owned()),
    })
}

fn lookup_outcome(reply: &SqlLookupReply) -> &'static str {
    match (&reply.hit, &reply.fallback) {
        (Some(_), _) => "hit",
        (None, Some(_)) => "fallback",
        (None, None) => "miss",
    }
}
