//! The seed-compatible endpoints (DESIGN.md section 7), kept for gateways built against the
//! design this product follows: sessions and their memory by `user_id` query parameter, and
//! `/write` + `/recall` of distilled intents. They call the same actors as `/v1`.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use engram_actors::user::UserMsg;
use engram_actors::user::api::IntentWrite;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::routes::{clear_session_of, session_memory_of};
use super::wire::{DeletedResponse, ErrorBody, SessionMemoryResponse, SessionsResponse};
use super::{ApiError, ApiJson, AppState, ok, user_key};
use crate::auth::Caller;

/// `?user_id=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UserQuery {
    /// The user.
    pub user_id: String,
}

/// `?user_id=&limit=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct UserLimitQuery {
    /// The user.
    pub user_id: String,
    /// Newest turns to return (default 50, at most 500).
    pub limit: Option<usize>,
}

/// `?user_id=&intent_type=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RecallQuery {
    /// The user.
    pub user_id: String,
    /// The intent type.
    pub intent_type: String,
}

type QueryResult<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

#[utoipa::path(get, path = "/chat/sessions", tag = "seed", params(UserQuery),
    responses((status = 200, body = SessionsResponse), (status = 400, body = ErrorBody)))]
/// The user's sessions.
pub async fn sessions(
    State(s): State<AppState>,
    caller: Caller,
    query: QueryResult<UserQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    let sessions = s.directory.call(&key, UserMsg::ListSessions).await?;
    Ok(ok(SessionsResponse {
        sessions: sessions.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(get, path = "/chat/sessions/{session_id}/memory", tag = "seed",
    params(("session_id" = String, Path, description = "Session id"), UserLimitQuery),
    responses((status = 200, body = SessionMemoryResponse), (status = 404, body = ErrorBody)))]
/// A session's newest turns (default 50, at most 500).
pub async fn session_memory(
    State(s): State<AppState>,
    caller: Caller,
    Path(session): Path<String>,
    query: QueryResult<UserLimitQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    session_memory_of(&s, &caller, &key, session, q.limit).await
}

#[utoipa::path(delete, path = "/chat/sessions/{session_id}/memory", tag = "seed",
    params(("session_id" = String, Path, description = "Session id"), UserQuery),
    responses((status = 200, body = DeletedResponse), (status = 404, body = ErrorBody)))]
/// Deletes a session's turns; returns the deleted count.
pub async fn clear_session(
    State(s): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(session): Path<String>,
    query: QueryResult<UserQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    clear_session_of(&s, &key, &headers, session).await
}

/// A distilled intent to record.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    /// The user.
    pub user_id: String,
    /// Idempotency key.
    pub request_id: String,
    /// Intent type.
    pub intent_type: String,
    /// Extracted fields (a JSON object).
    #[schema(value_type = Object)]
    pub fields: serde_json::Value,
}

/// The recorded version.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WriteResponse {
    /// Intent type.
    pub intent_type: String,
    /// The new version (Unix ms).
    pub version: i64,
    /// Earlier versions made inactive.
    pub deactivated: Vec<i64>,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

#[utoipa::path(post, path = "/write", tag = "seed", request_body = WriteBody,
    responses((status = 200, body = WriteResponse), (status = 400, body = ErrorBody)))]
/// Records a new version of a distilled intent; earlier active versions become inactive.
pub async fn write(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<WriteBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &body.user_id)?;
    let req = IntentWrite {
        request_id: body.request_id,
        intent_type: body.intent_type,
        fields: body.fields,
    };
    let ack = s
        .directory
        .call(&key, |reply| UserMsg::WriteIntent(req.clone(), reply))
        .await?;
    Ok(ok(WriteResponse {
        intent_type: ack.intent_type,
        version: ack.version.0,
        deactivated: ack.deactivated.iter().map(|t| t.0).collect(),
        replayed: ack.replayed,
    }))
}

/// One version of an intent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntentView {
    /// Intent type.
    pub intent_type: String,
    /// Version (Unix ms).
    pub version: i64,
    /// Fields.
    #[schema(value_type = Object)]
    pub fields: serde_json::Value,
    /// Whether it is the current version.
    pub active: bool,
}

/// The versions of an intent type, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RecallResponse {
    /// Versions, newest first.
    pub intents: Vec<IntentView>,
}

#[utoipa::path(get, path = "/recall", tag = "seed", params(RecallQuery),
    responses((status = 200, body = RecallResponse), (status = 400, body = ErrorBody)))]
/// The versions of a user's intent type, newest first.
pub async fn recall(
    State(s): State<AppState>,
    caller: Caller,
    query: QueryResult<RecallQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    let intent_type = q.intent_type;
    let intents = s
        .directory
        .call(&key, |reply| UserMsg::Intents(intent_type.clone(), reply))
        .await?;
    // Intents holding ID, bank card or passport numbers are sensitive reads, masked or not.
    let sensitive = engram_actors::model::pii::level_of(intents.iter().map(|i| i.fields.as_str()))
        == engram_storage::model::PiiLevel::High;
    super::routes::guard_sensitive(&s, &caller, &key, sensitive).await?;
    Ok(ok(RecallResponse {
        intents: intents
            .into_iter()
            .map(|i| IntentView {
                intent_type: i.intent_type,
                version: i.version.0,
                fields: serde_json::from_str(&engram_actors::model::context::gateway_text(
                    &i.fields,
                ))
                .unwrap_or(serde_json::Value::Null),
                active: i.active,
            })
            .collect(),
    }))
}
