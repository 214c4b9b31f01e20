//! Handlers of the versioned user API (turns, contexts, memories, sessions, forgetting). Each
//! checks its input, builds the actor request and maps the reply; the OpenAPI annotations
//! document them.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    Clarification, ClearAck, ClearSession, ContextQuery, FeedbackRequest, Forget, ListFlags,
    ListMemories, ListSessions, MemoryWrite, ResolveConflict, SearchQuery, SessionMemory,
    SessionQuery, StatusChange, TurnRequest,
};
use engram_storage::types::PiiLevel;
use serde::Deserialize;
use utoipa::IntoParams;

use super::wire::TurnView;
use super::wire::{
    ConflictsResponse, ContextBody, ContextResponse, DeletedResponse, FeedbackBody,
    FeedbackResponse, ForgetResponse, MemoriesResponse, MemoryBody, MemoryResponse, MemoryView,
    ResolveBody, ResolveResponse, SearchBody, SearchHitView, SearchResponse, SessionMemoryResponse,
    SessionsResponse, StatusBody, TurnBody, TurnResponse, parse_kind, parse_mode, parse_resolution,
    parse_route, parse_status, ts,
};
use super::{ApiError, ApiJson, AppState, ErrorBody, ok, user_key};
use crate::caller::Caller;

/// Longest accepted `limit` of a session's memory.
pub const MAX_LIMIT: usize = 500;
/// Default `limit` of a session's memory.
pub const DEFAULT_LIMIT: usize = 50;

#[utoipa::path(post, path = "/v1/users/{user}/turns", tag = "conversation",
    params(("user" = String, Path, description = "User id"), ("x-engram-tenant" = Option<String>, Header, description = "Tenant")),
    request_body = TurnBody,
    responses((status = 200, body = TurnResponse), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody)))]
/// Appends a conversation turn; a successful turn forms memories.
pub async fn append_turn(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<TurnBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let req = TurnRequest {
        request_id: body.request_id,
        session_id: body.session_id,
        user_text: body.user_text,
        assistant_text: body.assistant_text,
        route: body
            .route
            .as_deref()
            .map(|r| parse_route(Some(r)))
            .transpose()?,
        success: body.success,
        trace_id: body.trace_id,
        choices: body
            .choices
            .into_iter()
            .map(|c| (c.topic, c.value))
            .collect(),
        clarification: body.clarification.map(|c| Clarification {
            question: c.question,
            answer: c.answer,
        }),
    };
    let ack = s.ask(&caller, &key, req).await?;
    Ok(ok(TurnResponse::from(ack)))
}

#[utoipa::path(post, path = "/v1/users/{user}/feedback", tag = "conversation",
    params(("user" = String, Path, description = "User id")),
    request_body = FeedbackBody,
    responses((status = 200, body = FeedbackResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
/// Records feedback on a turn: a dislike with a corrected SQL and a comment forms a correction.
pub async fn feedback(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<FeedbackBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let liked = match body.rating.as_str() {
        "like" => true,
        "dislike" => false,
        _ => {
            return Err(ApiError::invalid(
                "invalid rating: expected like or dislike",
            ));
        }
    };
    let req = FeedbackRequest {
        request_id: body.request_id,
        session_id: body.session_id,
        turn_seq: body.turn_seq,
        liked,
        corrected_sql: body.corrected_sql,
        comment: body.comment,
        trace_id: body.trace_id,
    };
    let ack = s.ask(&caller, &key, req).await?;
    Ok(ok(FeedbackResponse::from(ack)))
}

#[utoipa::path(post, path = "/v1/users/{user}/context", tag = "conversation",
    params(("user" = String, Path, description = "User id")),
    request_body = ContextBody,
    responses((status = 200, body = ContextResponse), (status = 400, body = ErrorBody)))]
/// Assembles the memory context for the next LLM call (no LLM is called).
pub async fn context(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<ContextBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let asked = body.query.clone();
    let query = ContextQuery {
        session_id: body.session_id,
        query: body.query,
        route: parse_route(body.route.as_deref())?,
        token_budget: body.token_budget.unwrap_or(s.token_budget),
    };
    let user_context = s.ask(&caller, &key, query);
    let (ctx, shared) = match body.shared {
        Some(ask) => {
            let shared = super::shared::for_context(&s, &caller, ask, asked);
            let (ctx, shared) = tokio::join!(user_context, shared);
            (ctx?, Some(shared?))
        }
        None => (user_context.await?, None),
    };
    let sensitive = ctx.sensitive;
    let mut response = ContextResponse::from(ctx);
    response.shared = shared;
    Ok(sensitive_if(sensitive, ok(response)))
}

#[utoipa::path(post, path = "/v1/users/{user}/memories/search", tag = "memories",
    params(("user" = String, Path, description = "User id")),
    request_body = SearchBody,
    responses((status = 200, body = SearchResponse), (status = 400, body = ErrorBody)))]
/// Searches a user's live memories by meaning and words (the retrieval behind the context's
/// slots). Episodic memories carry the session and turn they came from.
pub async fn search(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<SearchBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let kinds = body
        .kinds
        .unwrap_or_default()
        .iter()
        .map(|k| parse_kind(k))
        .collect::<Result<Vec<_>, _>>()?;
    let query = SearchQuery {
        query: body.query,
        k: body.k.unwrap_or(10),
        kinds,
        mode: parse_mode(body.mode.as_deref())?,
        active_only: body.active_only.unwrap_or(false),
        rerank: body.rerank.unwrap_or(false),
    };
    let result = s.ask(&caller, &key, query).await?;
    let sensitive = result
        .hits
        .iter()
        .any(|h| h.memory.pii_level == PiiLevel::High);
    Ok(sensitive_if(
        sensitive,
        ok(SearchResponse {
            hits: result
                .hits
                .into_iter()
                .map(|h| SearchHitView {
                    memory: h.memory.into(),
                    score: h.score,
                })
                .collect(),
            embedded: result.embedded,
            fallback: result.fallback.map(|f| f.as_str().to_owned()),
            reranked: result.reranked,
            rerank_fallback: result.rerank_fallback.map(|f| f.as_str().to_owned()),
        }),
    ))
}

/// Builds a memory write from its body.
pub fn memory_write(body: MemoryBody, memory_id: Option<String>) -> Result<MemoryWrite, ApiError> {
    Ok(MemoryWrite {
        request_id: body.request_id,
        memory_id,
        kind: parse_kind(&body.kind)?,
        text: body.text,
        payload: body.payload.unwrap_or_else(|| serde_json::json!({})),
        status: parse_status(body.status.as_deref().unwrap_or("candidate"))?,
        namespace: body.namespace.unwrap_or_else(|| "default".into()),
        scope: body.scope.unwrap_or_else(|| "global".into()),
        confidence: body.confidence.unwrap_or(0.5),
        salience: body.salience.unwrap_or(0.5),
        valid_from: ts(body.valid_from),
        valid_to: ts(body.valid_to),
        session_id: body.session_id,
        source_route: body.source_route,
        source_agent: body.source_agent,
        trace_id: body.trace_id,
    })
}

#[utoipa::path(post, path = "/v1/users/{user}/memories", tag = "memories",
    params(("user" = String, Path, description = "User id")),
    request_body = MemoryBody,
    responses((status = 200, body = MemoryResponse), (status = 400, body = ErrorBody)))]
/// Writes a memory (a candidate unless `status` says `active`), resolving conflicts.
pub async fn create_memory(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<MemoryBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let write = memory_write(body, None)?;
    let ack = s.ask(&caller, &key, write).await?;
    Ok(ok(MemoryResponse::from(ack)))
}

#[utoipa::path(put, path = "/v1/users/{user}/memories/{memory_id}", tag = "memories",
    params(("user" = String, Path, description = "User id"), ("memory_id" = String, Path, description = "Memory id")),
    request_body = MemoryBody,
    responses((status = 200, body = MemoryResponse), (status = 400, body = ErrorBody)))]
/// Creates or replaces the memory with this id.
pub async fn upsert_memory(
    State(s): State<AppState>,
    caller: Caller,
    Path((user, memory_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<MemoryBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let write = memory_write(body, Some(memory_id))?;
    let ack = s.ask(&caller, &key, write).await?;
    Ok(ok(MemoryResponse::from(ack)))
}

#[utoipa::path(post, path = "/v1/users/{user}/memories/{memory_id}/status", tag = "memories",
    params(("user" = String, Path, description = "User id"), ("memory_id" = String, Path, description = "Memory id")),
    request_body = StatusBody,
    responses((status = 200, body = MemoryResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
/// Activates, suppresses or deletes a memory.
pub async fn set_status(
    State(s): State<AppState>,
    caller: Caller,
    Path((user, memory_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<StatusBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let change = StatusChange {
        request_id: body.request_id,
        memory_id,
        status: parse_status(&body.status)?,
    };
    let ack = s.ask(&caller, &key, change).await?;
    Ok(ok(MemoryResponse::from(ack)))
}

/// Query of the memory list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct KindQuery {
    /// Only this kind (`profile`, `episodic`, `correction`).
    pub kind: Option<String>,
}

#[utoipa::path(get, path = "/v1/users/{user}/memories", tag = "memories",
    params(("user" = String, Path, description = "User id"), KindQuery),
    responses((status = 200, body = MemoriesResponse), (status = 400, body = ErrorBody)))]
/// Lists the user's memories, of one kind or all.
pub async fn list_memories(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    query: Result<Query<KindQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let Query(query) = query?;
    let kind = query.kind.as_deref().map(parse_kind).transpose()?;
    let records = s.ask(&caller, &key, ListMemories { kind }).await?;
    let sensitive = records.iter().any(|r| r.pii_level == PiiLevel::High);
    // Segmenting every text is CPU work (jieba): off the async workers.
    let extractor = s.extractor.clone();
    let memories = tokio::task::spawn_blocking(move || {
        records
            .into_iter()
            .map(|r| {
                let entities = extractor.extract(&r.summary_text);
                MemoryView {
                    entities: Some(entities),
                    ..r.into()
                }
            })
            .collect()
    })
    .await
    .map_err(|err| ApiError::from_join(&err))?;
    Ok(sensitive_if(sensitive, ok(MemoriesResponse { memories })))
}

#[utoipa::path(get, path = "/v1/users/{user}/sessions", tag = "sessions",
    params(("user" = String, Path, description = "User id")),
    responses((status = 200, body = SessionsResponse)))]
/// Lists the user's sessions.
pub async fn list_sessions(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let sessions = s.ask(&caller, &key, ListSessions).await?;
    Ok(ok(SessionsResponse {
        sessions: sessions.into_iter().map(Into::into).collect(),
    }))
}

/// Query of a session's memory.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LimitQuery {
    /// Newest turns to return (default 50, at most 500).
    pub limit: Option<usize>,
}

#[utoipa::path(get, path = "/v1/users/{user}/sessions/{session_id}/memory", tag = "sessions",
    params(("user" = String, Path, description = "User id"), ("session_id" = String, Path, description = "Session id"), LimitQuery),
    responses((status = 200, body = SessionMemoryResponse), (status = 404, body = ErrorBody)))]
/// A session's newest turns.
pub async fn session_memory(
    State(s): State<AppState>,
    caller: Caller,
    Path((user, session)): Path<(String, String)>,
    query: Result<Query<LimitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let Query(query) = query?;
    let (memory, sensitive) = session_memory_of(&s, &caller, &key, session, query.limit).await?;
    Ok(sensitive_if(
        sensitive,
        ok(SessionMemoryResponse {
            session: memory.session.into(),
            turns: memory.turns.into_iter().map(TurnView::from).collect(),
        }),
    ))
}

/// A session's newest turns, for `/v1` and the seed endpoint, and whether they show the
/// user's high-PII turns (see [`sensitive_if`]).
pub async fn session_memory_of(
    s: &AppState,
    caller: &Caller,
    key: &UserKey,
    session: String,
    limit: Option<usize>,
) -> Result<(SessionMemory, bool), ApiError> {
    let limit = super::page_limit(limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let memory = s.ask(caller, key, SessionQuery { session, limit }).await?;
    let sensitive = memory.turns.iter().any(|t| t.pii_level == PiiLevel::High);
    Ok((memory, sensitive))
}

/// Marks `response` as having shown the user's high-PII items when `sensitive`: its audit
/// entry is then durable before it is sent, however reads are audited.
pub fn sensitive_if(sensitive: bool, mut response: Response) -> Response {
    if sensitive {
        response
            .extensions_mut()
            .insert(crate::audit::SensitiveRead);
    }
    response
}

/// The idempotency key of a request without a body: the `Idempotency-Key` header, or a
/// fresh one (the operation is then retried as a new request).
pub fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get("idempotency-key") {
        Some(v) => Ok(v
            .to_str()
            .map_err(|_| ApiError::invalid("invalid Idempotency-Key: not visible ASCII"))?
            .to_owned()),
        None => Ok(uuid::Uuid::new_v4().to_string()),
    }
}

#[utoipa::path(delete, path = "/v1/users/{user}/sessions/{session_id}/memory", tag = "sessions",
    params(("user" = String, Path, description = "User id"), ("session_id" = String, Path, description = "Session id"),
        ("idempotency-key" = Option<String>, Header, description = "Idempotency key")),
    responses((status = 200, body = DeletedResponse), (status = 404, body = ErrorBody)))]
/// Deletes a session's turns; returns how many were deleted.
pub async fn clear_session(
    State(s): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path((user, session)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let ack = clear_session_of(&s, &caller, &key, &headers, session).await?;
    Ok(ok(DeletedResponse::from(ack)))
}

/// Deletes a session's turns, for `/v1` and the seed endpoint.
pub async fn clear_session_of(
    s: &AppState,
    caller: &Caller,
    key: &UserKey,
    headers: &HeaderMap,
    session: String,
) -> Result<ClearAck, ApiError> {
    engram_actors::user::check_id("session_id", &session)?;
    let request_id = idempotency_key(headers)?;
    s.ask(
        caller,
        key,
        ClearSession {
            request_id,
            session,
        },
    )
    .await
}

#[utoipa::path(get, path = "/v1/users/{user}/conflicts", tag = "memories",
    params(("user" = String, Path, description = "User id")),
    responses((status = 200, body = ConflictsResponse)))]
/// Contradictions flagged for review.
pub async fn conflicts(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let flags = s.ask(&caller, &key, ListFlags).await?;
    Ok(ok(ConflictsResponse {
        conflicts: flags.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(post, path = "/v1/users/{user}/conflicts/{flag_id}/resolve", tag = "memories",
    params(("user" = String, Path, description = "User id"), ("flag_id" = String, Path, description = "Flag id")),
    request_body = ResolveBody,
    responses((status = 200, body = ResolveResponse), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
/// Settles a contradiction flagged for review: keep the old memory, the new one, or both.
pub async fn resolve_conflict(
    State(s): State<AppState>,
    caller: Caller,
    Path((user, flag_id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let settle = ResolveConflict {
        request_id: body.request_id,
        flag_id,
        choice: parse_resolution(&body.resolution)?,
    };
    let ack = s.ask(&caller, &key, settle).await?;
    Ok(ok(ResolveResponse::from(ack)))
}

#[utoipa::path(delete, path = "/v1/users/{user}", tag = "users",
    params(("user" = String, Path, description = "User id")),
    responses((status = 200, body = ForgetResponse)))]
/// Forgets the user: every key of theirs and their cached state are erased.
pub async fn forget(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let ack = s.ask(&caller, &key, Forget).await?;
    Ok(ok(ForgetResponse::from(ack)))
}
