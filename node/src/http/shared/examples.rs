//! The few-shot library over HTTP: `record_success`, `search_similar`, failure reports, the
//! admins' review, and export and import as YAML.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_actors::request::tenant::{
    ExampleAck, ExampleExport, ExampleFailure, ExampleImport, ExampleRecord, ExampleReview,
    ExampleSearch, ExampleSearchReply, MAX_EXAMPLES_SERVED, PortableExample, ReviewAction,
};
use engram_storage::shared::{Example, ExampleStatus};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::super::{ApiError, ApiJson, AppState, ErrorBody, ok};
use super::{observe, search_outcome, shared};
use crate::caller::Caller;

/// A question whose SQL succeeded (`record_success`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordBody {
    /// Idempotency key.
    pub request_id: String,
    /// The question as asked.
    pub question: String,
    /// The SQL that answered it: exactly one read-only query, else 400.
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
                vector: None,
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
    let reply = s
        .ask(
            &caller,
            &shared(&caller),
            ExampleSearch {
                question: body.question,
                route: body.route,
                limit: body.limit.unwrap_or(MAX_EXAMPLES_SERVED),
                vector: None,
            },
        )
        .await?;
    observe(&s, "few_shot", search_outcome(&reply), started);
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
            engram_actors::request::tenant::ExampleList {
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
    refuse_aliases(&body)?;
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

/// Refuses a document with an alias (`*name`) before anything is built from it: serde_yaml_ng
/// replays an alias's whole node each time it is named (up to 100 times the document's
/// events), so a 100 KB document of nested aliases would cost hundreds of megabytes. An
/// export never writes aliases. The scan is one pass of a streaming parser that keeps
/// nothing but its position, so a document costs memory in proportion to its own size; one
/// the scan cannot read is refused too (its reading of YAML is the stricter one).
fn refuse_aliases(body: &[u8]) -> Result<(), ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid("invalid YAML document: not UTF-8"))?;
    for event in saphyr_parser::Parser::new_from_str(text) {
        match event {
            Ok((saphyr_parser::Event::Alias(_), span)) => {
                return Err(ApiError::invalid(format!(
                    "invalid YAML document: an alias at line {}; aliases (`*name`) are not \
                     accepted, write each example in full",
                    span.start.line()
                )));
            }
            Ok(_) => {}
            Err(err) => {
                return Err(ApiError::invalid(format!(
                    "invalid YAML document: unreadable at line {}",
                    err.marker().line()
                )));
            }
        }
    }
    Ok(())
}
