//! The seed-compatible endpoints (docs/api.md), kept for gateways built against the
//! design this product follows: sessions and their memory by `user_id` query parameter, and
//! `/write` + `/recall` of distilled intents. They call the same actors as `/v1`.

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use engram_actors::model::intent::target_value_of;
use engram_actors::model::text::extractive_summary;
use engram_actors::request::user::{
    IntentQuery, IntentWrite, KeyIntents, ListSessions, MAX_INTENT_PAGE, MessageWrite,
};
use engram_storage::types::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::routes::{DEFAULT_LIMIT, MAX_LIMIT, clear_session_of, sensitive_if, session_memory_of};
use super::wire::IntentVersionView;
use super::{ApiError, ApiJson, AppState, ErrorBody, ok, user_key};
use crate::caller::Caller;

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
    /// Newest messages to return (default 50, at most 500).
    pub limit: Option<usize>,
}

/// `?user_id=&intent_type=&all=&limit=&before=`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RecallQuery {
    /// The user.
    pub user_id: String,
    /// The intent type.
    pub intent_type: String,
    /// Every version, newest first, a page at a time (default: only the latest).
    pub all: Option<bool>,
    /// With `all`: versions per page (default 50, at most 500).
    pub limit: Option<usize>,
    /// With `all`: only versions older than this one (`next_before` of the previous page).
    pub before: Option<i64>,
}

type QueryResult<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// The seed's success envelope: `code` 0, `message` "ok", and the data.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedSessions {
    /// 0.
    pub code: u16,
    /// "ok".
    pub message: String,
    /// The user's sessions, by id.
    pub data: Vec<SeedSession>,
}

/// A session as the seed lists it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedSession {
    /// Id.
    pub session_id: String,
    /// The user.
    pub user_id: String,
    /// The session's first user message (at most 50 characters, personal data masked);
    /// null once retention removed that turn.
    pub title: Option<String>,
    /// Messages written: two a turn (the user's and the assistant's).
    pub message_count: u32,
    /// The last turn's time, RFC 3339 in UTC.
    pub last_activity: String,
}

/// The seed's envelope of a session's messages.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedSessionMemory {
    /// 0.
    pub code: u16,
    /// "ok".
    pub message: String,
    /// The session's newest messages, oldest first.
    pub data: Vec<SeedMessage>,
}

/// One message of a session, as the seed answers it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedMessage {
    /// The message's id, unique among the user's messages and stable: its turn's sequence
    /// number times two, plus one for the assistant's answer.
    pub id: u64,
    /// The user.
    pub user_id: String,
    /// The session.
    pub session_id: String,
    /// `user` or `assistant`.
    pub role: String,
    /// The text (personal data masked).
    pub content: String,
    /// The turn's summary (20 to 60 characters): the model's when stored, else the
    /// extractive one.
    pub summary: String,
    /// Entities the turn mentions, as the seed stores them: a JSON array in a string
    /// (`"[\"sales_data\",\"TotalRevenue\"]"`).
    pub entities: String,
    /// Written at, RFC 3339 in UTC.
    pub created_at: String,
}

/// The seed's envelope of a deletion.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedDeleted {
    /// 0.
    pub code: u16,
    /// "ok".
    pub message: String,
    /// What was deleted.
    pub data: SeedDeletedData,
}

/// What deleting a session's memory deleted, counted as the seed counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedDeletedData {
    /// Messages deleted (the user's of each turn, and the assistant's where it answered).
    pub deleted: usize,
    /// Turns deleted.
    pub turns: usize,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

/// The seed's envelope of an error: the HTTP status as `code`, the stable code of `/v1`'s
/// errors as `error`, and no data.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SeedError {
    /// The HTTP status (never 0).
    pub code: u16,
    /// Stable, machine-readable code (as `/v1`'s `code`).
    pub error: String,
    /// What was wrong, for people.
    pub message: String,
    /// Always null.
    #[schema(value_type = Option<Object>)]
    pub data: Option<()>,
}

/// The seed's chat endpoints, whose answers (errors included) use its envelope.
pub const SEED_CHAT_PREFIX: &str = "/chat/";

/// `ms` as RFC 3339 in UTC, with milliseconds.
fn rfc3339(ms: i64) -> String {
    use chrono::{SecondsFormat, TimeZone, Utc};
    Utc.timestamp_millis_opt(ms)
        .single()
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The `message` of a seed success.
const SEED_OK: &str = "ok";

#[utoipa::path(get, path = "/chat/sessions", tag = "seed", params(UserQuery),
    responses((status = 200, body = SeedSessions), (status = 400, body = SeedError)))]
/// The user's sessions, with their titles.
pub async fn sessions(
    State(s): State<AppState>,
    caller: Caller,
    query: QueryResult<UserQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    let sessions = s.ask(&caller, &key, ListSessions).await?;
    let data = sessions
        .into_iter()
        .map(|l| SeedSession {
            user_id: q.user_id.clone(),
            message_count: l.session.turn_count.saturating_mul(2),
            last_activity: rfc3339(l.session.last_turn_at.0),
            session_id: l.session.session_id,
            title: l.title,
        })
        .collect();
    Ok(ok(SeedSessions {
        code: 0,
        message: SEED_OK.into(),
        data,
    }))
}

#[utoipa::path(get, path = "/chat/sessions/{session_id}/memory", tag = "seed",
    params(("session_id" = String, Path, description = "Session id"), UserLimitQuery),
    responses((status = 200, body = SeedSessionMemory), (status = 404, body = SeedError)))]
/// A session's newest messages (default 50, at most 500), oldest first.
pub async fn session_memory(
    State(s): State<AppState>,
    caller: Caller,
    Path(session): Path<String>,
    query: QueryResult<UserLimitQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    // `limit` counts messages; a turn holds one or two, so `limit` turns hold enough.
    let limit = super::page_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let (memory, sensitive) =
        session_memory_of(&s, &caller, &key, session.clone(), Some(limit)).await?;
    let entities_of =
        |entities: &[String]| serde_json::to_string(entities).unwrap_or_else(|_| "[]".to_owned());
    let mut rows = Vec::with_capacity(memory.turns.len() * 2);
    for turn in memory.turns {
        let summary = memory
            .summaries
            .iter()
            .find(|(seq, _)| *seq == turn.seq)
            .map_or_else(
                || extractive_summary(&turn.user_text, &turn.assistant_text, &turn.entities),
                |(_, text)| text.clone(),
            );
        let created_at = rfc3339(turn.created_at.0);
        let entities = entities_of(&turn.entities);
        let roles = [("user", turn.user_text), ("assistant", turn.assistant_text)];
        for (id, (role, content)) in (turn.seq * 2..).zip(roles) {
            if role == "assistant" && content.is_empty() {
                continue;
            }
            rows.push(SeedMessage {
                id,
                user_id: q.user_id.clone(),
                session_id: session.clone(),
                role: role.to_owned(),
                content,
                summary: summary.clone(),
                entities: entities.clone(),
                created_at: created_at.clone(),
            });
        }
    }
    let rows = rows.split_off(rows.len().saturating_sub(limit));
    Ok(sensitive_if(
        sensitive,
        ok(SeedSessionMemory {
            code: 0,
            message: SEED_OK.into(),
            data: rows,
        }),
    ))
}

#[utoipa::path(delete, path = "/chat/sessions/{session_id}/memory", tag = "seed",
    params(("session_id" = String, Path, description = "Session id"), UserQuery),
    responses((status = 200, body = SeedDeleted), (status = 404, body = SeedError)))]
/// Deletes a session's turns; answers the deleted count.
pub async fn clear_session(
    State(s): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(session): Path<String>,
    query: QueryResult<UserQuery>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let key = user_key(&caller, &q.user_id)?;
    let ack = clear_session_of(&s, &caller, &key, &headers, session).await?;
    Ok(ok(SeedDeleted {
        code: 0,
        message: SEED_OK.into(),
        data: SeedDeletedData {
            deleted: ack.messages,
            turns: ack.deleted,
            replayed: ack.replayed,
        },
    }))
}

/// Middleware: an error answered on a seed chat path ([`SEED_CHAT_PREFIX`]) is rewritten into
/// the seed's envelope ([`SeedError`]), whichever layer produced it (authentication, the body
/// limit, load shedding, the handler); the status and headers stay.
pub async fn error_envelope(request: Request, next: Next) -> Response {
    let seed = request.uri().path().starts_with(SEED_CHAT_PREFIX);
    let response = next.run(request).await;
    if !seed || response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Error bodies are small JSON objects; a longer or unreadable one keeps only its status.
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let (error, message) = match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(e) => (e.code, e.message),
        Err(_) => (
            "error".to_owned(),
            String::from_utf8_lossy(&bytes).trim().to_owned(),
        ),
    };
    let body = SeedError {
        code: parts.status.as_u16(),
        error,
        message,
        data: None,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(
        parts,
        Body::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// `POST /write`: either a message to distil (the seed's `{user_id, message}`: the rules run
/// at once, the model's result follows), or a distilled intent to record
/// (`intent_type` + `fields`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteBody {
    /// The user.
    pub user_id: String,
    /// Idempotency key. Optional, as in the seed: without one, the key is derived from the
    /// body and the ten-minute period it arrives in ([`derived_request_id`]), so a retry of
    /// the same body within that period replays the first answer.
    pub request_id: Option<String>,
    /// The user's message to distil (without `intent_type` and `fields`).
    pub message: Option<String>,
    /// Intent type (with `fields`, without `message`).
    pub intent_type: Option<String>,
    /// Extracted fields (a JSON object).
    #[schema(value_type = Option<Object>)]
    pub fields: Option<serde_json::Value>,
}

/// The period a derived idempotency key lasts: the gate's window in which a distilled intent
/// of the same type replaces the previous one (`distillation.replace-within`, 10 minutes by
/// default).
pub const DERIVED_ID_PERIOD_MS: i64 = 10 * 60 * 1000;

/// The idempotency key of a `/write` sent without `request_id`: a hash of what it writes
/// (the message, or the type and fields) and the [`DERIVED_ID_PERIOD_MS`] period `now_ms`
/// falls in. A retry of the same body in the same period replays the first answer; one that
/// crosses into the next period runs again, and the gate's replace window then leaves one
/// version of the intent (the newer), never two. The same message sent again later is a new
/// write, as the seed treats it.
pub fn derived_request_id(body: &WriteBody, now_ms: i64) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [
        body.message.as_deref(),
        body.intent_type.as_deref(),
        body.fields.as_ref().map(ToString::to_string).as_deref(),
    ] {
        // Each part framed by its presence and length, so no two bodies hash alike.
        match part {
            Some(text) => {
                hash.update([1]);
                hash.update((text.len() as u64).to_le_bytes());
                hash.update(text.as_bytes());
            }
            None => hash.update([0]),
        }
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("seed-{hex}-{}", now_ms.div_euclid(DERIVED_ID_PERIOD_MS))
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The recorded version, or what distilling the message did at once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WriteResponse {
    /// Intent type (of the recorded version; absent for a message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent_type: Option<String>,
    /// The new version (Unix ms; absent for a message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// Earlier versions made inactive.
    pub deactivated: Vec<i64>,
    /// For a message: what the rules found and wrote at once.
    pub intents: Vec<IntentVersionView>,
    /// For a message: whether the generative model's result follows.
    pub distilling: bool,
    /// True when this replays an earlier request.
    pub replayed: bool,
}

#[utoipa::path(post, path = "/write", tag = "seed", request_body = WriteBody,
    responses((status = 200, body = WriteResponse), (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody)))]
/// Distils a message (rules at once, the model in the background), or records a new version
/// of a distilled intent (earlier active versions become inactive).
pub async fn write(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<WriteBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &body.user_id)?;
    let request_id = match body.request_id {
        Some(id) => id,
        None => derived_request_id(&body, unix_ms()),
    };
    match (body.message, body.intent_type, body.fields) {
        (Some(message), None, None) => {
            let req = MessageWrite {
                request_id,
                message,
            };
            let ack = s.ask(&caller, &key, req).await?;
            Ok(ok(WriteResponse {
                intent_type: None,
                version: None,
                deactivated: Vec::new(),
                intents: ack.intents.into_iter().map(Into::into).collect(),
                distilling: ack.distilling,
                replayed: ack.replayed,
            }))
        }
        (None, Some(intent_type), Some(fields)) => {
            let req = IntentWrite {
                request_id,
                intent_type,
                fields,
            };
            let ack = s.ask(&caller, &key, req).await?;
            Ok(ok(WriteResponse {
                intent_type: Some(ack.intent_type),
                version: Some(ack.version.0),
                deactivated: ack.deactivated.iter().map(|t| t.0).collect(),
                intents: Vec::new(),
                distilling: false,
                replayed: ack.replayed,
            }))
        }
        _ => Err(ApiError::invalid(
            "invalid body: give either message, or intent_type and fields",
        )),
    }
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

/// The latest target of an intent type, as the seed answers, and its versions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RecallResponse {
    /// The intent type.
    pub intent_type: String,
    /// The target of the current version (null when none is current: none written,
    /// cancelled or past its TTL): an object for the types with a structure (appointment
    /// `{time, location, what}`, complaint `{service, problem}`, subscriptions
    /// `{product, cycle}`), else a string.
    #[schema(value_type = Option<Object>)]
    pub target_value: Option<serde_json::Value>,
    /// The current version (Unix ms).
    pub version: Option<i64>,
    /// The latest version only; with `all`, a page of every version, newest first.
    pub intents: Vec<IntentView>,
    /// `before` of the next page; absent on the last one.
    pub next_before: Option<i64>,
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
    let all = q.all.unwrap_or(false);
    if !all && (q.limit.is_some() || q.before.is_some()) {
        return Err(ApiError::invalid(
            "invalid query: limit and before page through every version; add all=true",
        ));
    }
    let limit = if all {
        super::page_limit(q.limit, 50, MAX_INTENT_PAGE)?
    } else {
        1
    };
    let query = IntentQuery {
        intent_type: q.intent_type.clone(),
        before: q.before.map(Timestamp),
        limit,
    };
    let intents = s.ask(&caller, &key, query).await?;
    let next_before = (all && intents.len() == limit)
        .then(|| intents.last().map(|i| i.version.0))
        .flatten();
    // Only the newest version can be current; a page that starts before it has none.
    let current = intents.first().filter(|i| i.active && q.before.is_none());
    Ok(ok(RecallResponse {
        intent_type: q.intent_type,
        target_value: current.map(target_value_of),
        version: current.map(|i| i.version.0),
        next_before,
        intents: intents.into_iter().map(IntentView::from).collect(),
    }))
}

/// What pre-warm found.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PrewarmResponse {
    /// The current versions of the key intent types (appointment, complaint, subscriptions),
    /// newest first, at most three.
    pub intents: Vec<IntentView>,
}

#[utoipa::path(post, path = "/v1/users/{user}/prewarm", tag = "users",
    params(("user" = String, Path, description = "User id")),
    responses((status = 200, body = PrewarmResponse)))]
/// Pre-warm at login: starts the user's actor (its memory loaded for the session's first
/// context) and returns the latest three current intents of the key types.
pub async fn prewarm(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let intents = s.ask(&caller, &key, KeyIntents { limit: 3 }).await?;
    Ok(ok(PrewarmResponse {
        intents: intents.into_iter().map(IntentView::from).collect(),
    }))
}

impl From<engram_storage::types::Intent> for IntentView {
    fn from(i: engram_storage::types::Intent) -> Self {
        IntentView {
            intent_type: i.intent_type,
            version: i.version.0,
            // Masked by the user's actor.
            fields: serde_json::from_str(&i.fields).unwrap_or(serde_json::Value::Null),
            active: i.active,
        }
    }
}
