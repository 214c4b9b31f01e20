//! The tenant's shared sets over HTTP: the semantic SQL cache (`/v1/sql-cache/...`), the
//! few-shot library (`/v1/few-shot/...`, its review under `/v1/admin/few-shot/...`, export and
//! import as YAML) and their settings. Every request goes to the tenant's actor through the
//! front door ([`engram_actors::tenant`]), which checks the input, embeds the questions and
//! holds the rules.

use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use engram_actors::placement::UserKey;
use engram_actors::request::tenant::{
    ExampleSearch, ExampleSearchReply, MAX_EXAMPLES_SERVED, SqlHit, SqlInvalidate, SqlLookup,
    SqlLookupReply, SqlPut,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiJson, AppState, ErrorBody, ok};
use crate::caller::Caller;

pub mod examples;
pub mod settings;

use self::examples::{ExampleHitView, SearchExamplesResponse};

/// The key of the caller's tenant's shared sets.
pub(super) fn shared(caller: &Caller) -> UserKey {
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
    /// The SQL text (never its results; at most 32 KiB): exactly one read-only query
    /// (`SELECT`, `WITH`, `VALUES`; no second statement, DDL, DML or comment), else
    /// 400.
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

pub(super) fn observe(s: &AppState, set: &str, outcome: &str, started: Instant) {
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
    let reply = s
        .ask(
            &caller,
            &shared(&caller),
            SqlLookup {
                question: body.question,
                route: body.route,
                domain: body.domain,
                vector: None,
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
                vector: None,
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
    let examples = async {
        if ask.examples.unwrap_or(true) {
            let search = ExampleSearch {
                question: question.clone(),
                route: ask.route.clone(),
                limit: MAX_EXAMPLES_SERVED,
                vector: None,
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
                    vector: None,
                };
                s.ask(caller, &key, lookup).await.map(Some)
            }
            None => Ok(None),
        }
    };
    let (examples, sql) = tokio::join!(examples, sql);
    let (examples, sql) = (examples?, sql?);
    if let Some(reply) = &examples {
        observe(s, "few_shot", search_outcome(reply), started);
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

pub(super) fn search_outcome(reply: &ExampleSearchReply) -> &'static str {
    match (reply.hits.is_empty(), &reply.fallback) {
        (false, _) => "hit",
        (true, Some(_)) => "fallback",
        (true, None) => "miss",
    }
}

fn lookup_outcome(reply: &SqlLookupReply) -> &'static str {
    match (&reply.hit, &reply.fallback) {
        (Some(_), _) => "hit",
        (None, Some(_)) => "fallback",
        (None, None) => "miss",
    }
}
