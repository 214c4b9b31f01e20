//! Admin endpoints: API keys (create, list, rotate, revoke), the audit trail, the tenant's
//! users, and approvals of sensitive reads. Every one needs an admin key and acts on the
//! tenant the key acts for: a tenant's admin on its own, the root key (the configured one) on
//! the tenant it names with `x-engram-tenant`.
//!
//! Operator keys are the root's business: only the root key makes, rotates or revokes them
//! through these endpoints (or the command line); a tenant's admin gets 403 and nothing is
//! stored.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use engram_storage::access::Scope;
use engram_storage::types::Timestamp;

use super::wire::admin::{
    AnchorBody, AnchorResponse, ApprovalResponse, ArchiveKindParam, ArchiveMatchBody,
    ArchiveMatchResponse, ArchiveNext, ArchiveParams, ArchiveResponse, ArchivedDigestView,
    ArchivedTurnView, AuditQuery, AuditResponse, KeyBody, KeysResponse, MatchRole, NewKeyResponse,
    NoticesQuery, NoticesResponse, RotateBody, UserView, UsersQuery, UsersResponse,
};
use super::{ApiError, ApiJson, AppState, ErrorBody, ok, optional_json, page_limit, user_key};
use crate::caller::Caller;
use crate::keys;
use engram_actors::request::user::{
    AnchorMatch, AnchorQuery, ApproveReads, ArchiveCursor, ArchiveKind, ArchiveMatch, ArchiveQuery,
    MAX_ARCHIVE_PAGE, Role,
};
use engram_storage::types::TurnDigest;

/// Largest page of the audit trail.
const MAX_AUDIT_PAGE: usize = 1_000;
/// Largest page of a tenant's users.
const MAX_USERS_PAGE: usize = 1_000;

fn now(s: &AppState) -> Timestamp {
    s.admin.now()
}

/// The tenant whose keys a caller manages: the one it acts for (the root names it with
/// `x-engram-tenant`, so that the change is audited in that tenant's trail).
fn key_tenant(caller: &Caller, named: Option<String>) -> Result<String, ApiError> {
    match named {
        Some(tenant) if tenant != caller.tenant => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "wrong_tenant",
            "a key manages the keys of the tenant it acts for (the root key names it with \
             x-engram-tenant)",
        )),
        Some(_) | None => Ok(caller.tenant.clone()),
    }
}

/// 403: a tenant's admin asked to make, rotate or revoke an operator key.
fn operator_keys_are_the_roots() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        "operator keys operate the whole cluster: only the root key or `engram-node keys` \
         makes, rotates or revokes them",
    )
}

/// Refuses a tenant's admin (anyone but the root) acting on the key `key_id` when it is an
/// operator key. A key's scope never changes, so reading it before the change is enough.
async fn refuse_operator_key(s: &AppState, caller: &Caller, key_id: &str) -> Result<(), ApiError> {
    if caller.root {
        return Ok(());
    }
    let key = s.admin.keys().get(key_id).await?;
    match key {
        Some(key) if key.scope == Scope::Operator && key.tenant == caller.tenant => {
            Err(operator_keys_are_the_roots())
        }
        Some(_) | None => Ok(()),
    }
}

/// 201 with the new key and its token; its id goes into the audit entry.
fn new_key_response(new: keys::NewKey) -> Response {
    let made = crate::audit::AuditIds(vec![format!("new_key_id={}", new.key.id)]);
    let mut response = (
        StatusCode::CREATED,
        axum::Json(NewKeyResponse {
            key: new.key.into(),
            token: new.token,
        }),
    )
        .into_response();
    response.extensions_mut().insert(made);
    response
}

#[utoipa::path(post, path = "/v1/admin/keys", tag = "admin",
    request_body = KeyBody,
    responses((status = 201, body = NewKeyResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
/// Creates an API key; the answer carries its token, which is shown only this once.
pub async fn create_key(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<KeyBody>,
) -> Result<Response, ApiError> {
    let tenant = key_tenant(&caller, body.tenant)?;
    let scope = Scope::parse(&body.scope)
        .ok_or_else(|| ApiError::invalid("invalid scope: expected gateway, operator or admin"))?;
    if scope == Scope::Operator && !caller.root {
        return Err(operator_keys_are_the_roots());
    }
    let name = body.name.unwrap_or_default();
    if name.chars().count() > 200 {
        return Err(ApiError::invalid("invalid name: at most 200 characters"));
    }
    let new = keys::create(
        &s.admin.keys(),
        (&tenant, scope, &name),
        &caller.principal,
        now(&s),
    )
    .await?;
    Ok(new_key_response(new))
}

#[utoipa::path(get, path = "/v1/admin/keys", tag = "admin",
    responses((status = 200, body = KeysResponse), (status = 403, body = ErrorBody)))]
/// Lists the tenant's keys (never their secrets), revoked and rotated ones included.
pub async fn list_keys(State(s): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let keys = keys::list(&s.admin.keys(), Some(&caller.tenant)).await?;
    Ok(ok(KeysResponse {
        keys: keys.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(post, path = "/v1/admin/keys/{key_id}/rotate", tag = "admin",
    params(("key_id" = String, Path, description = "Key id")),
    request_body = RotateBody,
    responses((status = 201, body = NewKeyResponse), (status = 404, body = ErrorBody)))]
/// Replaces a key by a new one of the same tenant, scope and name; the old one keeps working
/// for `grace_seconds`.
pub async fn rotate_key(
    State(s): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let body: RotateBody = optional_json(&body, "rotate")?;
    refuse_operator_key(&s, &caller, &key_id).await?;
    let grace_ms = i64::try_from(body.grace_seconds.unwrap_or(0).saturating_mul(1_000))
        .map_err(|_| ApiError::invalid("invalid grace_seconds: too large"))?;
    let tenant = Some(caller.tenant.as_str());
    let rotated = keys::rotate(
        &s.admin.keys(),
        (tenant, &key_id),
        grace_ms,
        &caller.principal,
        now(&s),
    )
    .await?;
    s.auth.invalidate(&key_id);
    match rotated {
        Some(new) => Ok(new_key_response(new)),
        None => Err(ApiError::not_found(format!("no live key {key_id}"))),
    }
}

#[utoipa::path(delete, path = "/v1/admin/keys/{key_id}", tag = "admin",
    params(("key_id" = String, Path, description = "Key id")),
    responses((status = 200, body = crate::http::wire::admin::KeyView), (status = 404, body = ErrorBody)))]
/// Revokes a key at once (idempotent).
pub async fn revoke_key(
    State(s): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> Result<Response, ApiError> {
    refuse_operator_key(&s, &caller, &key_id).await?;
    let tenant = Some(caller.tenant.as_str());
    let revoked = keys::revoke(&s.admin.keys(), (tenant, &key_id), now(&s)).await?;
    s.auth.invalidate(&key_id);
    match revoked {
        Some(key) => Ok(ok(crate::http::wire::admin::KeyView::from(key))),
        None => Err(ApiError::not_found(format!("no key {key_id}"))),
    }
}

#[utoipa::path(get, path = "/v1/admin/audit", tag = "admin",
    params(AuditQuery),
    responses((status = 200, body = AuditResponse), (status = 400, body = ErrorBody)))]
/// The tenant's audit trail, oldest first, by user, principal, action and time range.
pub async fn audit(
    State(s): State<AppState>,
    caller: Caller,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit, 100, MAX_AUDIT_PAGE)?;
    if let Some(user) = &query.user {
        engram_actors::user::check_id("user", user)?;
    }
    let from = Timestamp(query.from.unwrap_or(0));
    let to = Timestamp(query.to.unwrap_or(now(&s).0 + 1));
    let user = query
        .user
        .as_deref()
        .map(|u| s.audit.pseudonym(&caller.tenant, u));
    let (principal, action) = (query.principal, query.action);
    let (entries, next) = s
        .admin
        .audit_page(&caller.tenant, (from, to), limit, move |e| {
            user.as_ref().is_none_or(|u| e.user.as_ref() == Some(u))
                && principal.as_ref().is_none_or(|p| &e.principal == p)
                && action.as_ref().is_none_or(|a| &e.action == a)
        })
        .await?;
    Ok(ok(AuditResponse {
        entries: entries.into_iter().map(Into::into).collect(),
        next_from: next.map(|t| t.0),
    }))
}

#[utoipa::path(get, path = "/v1/admin/users", tag = "admin",
    params(UsersQuery),
    responses((status = 200, body = UsersResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
/// The tenant's users (those holding any data; a forgotten user is gone), in key order, a
/// page at a time: `next_after` is the `after` of the next page. A page of n users costs
/// n + 1 one-key reads, however much data each holds.
pub async fn list_users(
    State(s): State<AppState>,
    caller: Caller,
    query: Result<Query<UsersQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit, 100, MAX_USERS_PAGE)?;
    if let Some(after) = &query.after {
        engram_actors::user::check_id("after", after)?;
    }
    let page = s
        .admin
        .users_page(&caller.tenant, query.after, limit)
        .await?;
    Ok(ok(UsersResponse {
        users: page
            .users
            .into_iter()
            .map(|user_id| UserView { user_id })
            .collect(),
        next_after: page.next,
    }))
}

#[utoipa::path(get, path = "/v1/admin/notices", tag = "admin",
    params(NoticesQuery),
    responses((status = 200, body = NoticesResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
/// The tenant's compliance notices, oldest first, a page at a time: what the memory model
/// protected on its own (a distilled intent whose identity holds a health condition) and
/// whether it is sealed at rest. A forgotten user's notices are gone.
pub async fn list_notices(
    State(s): State<AppState>,
    caller: Caller,
    query: Result<Query<NoticesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit, 100, MAX_USERS_PAGE)?;
    let after = match &query.after {
        None => None,
        Some(cursor) => Some(
            cursor
                .split_once('-')
                .and_then(|(at, id)| Some((Timestamp(at.parse().ok()?), id.to_owned())))
                .filter(|(_, id)| !id.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid("invalid after: give the next_after of the previous page")
                })?,
        ),
    };
    let notices = s.admin.notices_page(&caller.tenant, after, limit).await?;
    let next_after = (notices.len() == limit)
        .then(|| {
            notices
                .last()
                .map(|n| format!("{}-{}", n.at.0, n.notice_id))
        })
        .flatten();
    Ok(ok(NoticesResponse {
        notices: notices.into_iter().map(Into::into).collect(),
        next_after,
    }))
}

#[utoipa::path(post, path = "/v1/admin/users/{user}/approvals", tag = "admin",
    params(("user" = String, Path, description = "User id")),
    responses((status = 200, body = ApprovalResponse), (status = 403, body = ErrorBody)))]
/// Approves further reads of the user's sensitive memories: clears the circuit breaker's
/// count (the approval itself is audited).
pub async fn approve_sensitive_reads(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let ack = s.ask(&caller, &key, ApproveReads).await?;
    Ok(ok(ApprovalResponse {
        cleared: ack.cleared,
    }))
}

#[utoipa::path(get, path = "/v1/admin/users/{user}/archive", tag = "admin",
    params(("user" = String, Path, description = "User id"), ArchiveParams),
    responses((status = 200, body = ArchiveResponse), (status = 400, body = ErrorBody)))]
/// The user's archive: what retention kept of the turns it deleted (`memory.archive`:
/// digests, or whole turns where a tenant keeps the full text), for
/// `memory.archive-retention`, for audits. Read-only, admins only; every read is audited.
pub async fn archive(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    query: Result<Query<ArchiveParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let Query(params) = query?;
    let limit = page_limit(params.limit, 100, MAX_ARCHIVE_PAGE)?;
    let after = match (params.after_session, params.after_seq) {
        (Some(session), Some(seq)) => Some(ArchiveCursor { session, seq }),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(ApiError::invalid(
                "invalid cursor: after_session and after_seq go together",
            ));
        }
    };
    let query = ArchiveQuery {
        session: params.session,
        after,
        limit,
        kind: params.kind.map(|kind| match kind {
            ArchiveKindParam::Turns => ArchiveKind::Turns,
            ArchiveKindParam::Digests => ArchiveKind::Digests,
        }),
    };
    let page = s.ask(&caller, &key, query).await?;
    Ok(ok(ArchiveResponse {
        kind: match page.kind {
            ArchiveKind::Turns => ArchiveKindParam::Turns,
            ArchiveKind::Digests => ArchiveKindParam::Digests,
        },
        digests: page.digests.into_iter().map(digest_view).collect(),
        turns: page
            .turns
            .into_iter()
            .map(|a| ArchivedTurnView {
                session_id: a.turn.session_id,
                seq: a.turn.seq,
                user_text: a.turn.user_text,
                assistant_text: a.turn.assistant_text,
                route: a.turn.route,
                created_at: a.turn.created_at.0,
                archived_at: a.archived_at.0,
            })
            .collect(),
        next: page.next.map(|c| ArchiveNext {
            after_session: c.session,
            after_seq: c.seq,
        }),
    }))
}

#[utoipa::path(post, path = "/v1/admin/users/{user}/archive/match", tag = "admin",
    params(("user" = String, Path, description = "User id")),
    request_body = ArchiveMatchBody,
    responses((status = 200, body = ArchiveMatchResponse), (status = 400, body = ErrorBody)))]
/// Whether the user (or the assistant) said this text in a turn retention archived as a
/// digest, and when: the text is hashed as the archive hashed it and compared; the archive
/// holds no text. Read-only, admins only; audited.
pub async fn match_archive(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<ArchiveMatchBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let role = match body.role {
        None | Some(MatchRole::User) => Role::User,
        Some(MatchRole::Assistant) => Role::Assistant,
    };
    let found = s
        .ask(
            &caller,
            &key,
            ArchiveMatch {
                role,
                text: body.text,
            },
        )
        .await?;
    Ok(ok(ArchiveMatchResponse {
        matches: found.into_iter().map(digest_view).collect(),
    }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest_view(d: TurnDigest) -> ArchivedDigestView {
    ArchivedDigestView {
        session_id: d.session_id,
        seq: d.seq,
        route: d.route,
        created_at: d.created_at.0,
        archived_at: d.archived_at.0,
        user_hash: hex(&d.user_hash),
        assistant_hash: hex(&d.assistant_hash),
        keyed: d.key_id.is_some(),
        user_chars: d.user_chars,
        assistant_chars: d.assistant_chars,
        pii_level: format!("{:?}", d.pii_level).to_lowercase(),
    }
}

#[utoipa::path(post, path = "/v1/users/{user}/anchors/match", tag = "users",
    params(("user" = String, Path, description = "User id")),
    request_body = AnchorBody,
    responses((status = 200, body = AnchorResponse), (status = 400, body = ErrorBody)))]
/// Whether the user gave this resident ID or passport number: matched against the keyed
/// hashes kept of the identifiers users give (the numbers themselves are never stored).
pub async fn match_anchor(
    State(s): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    ApiJson(body): ApiJson<AnchorBody>,
) -> Result<Response, ApiError> {
    let key = user_key(&caller, &user)?;
    let found = s
        .ask(&caller, &key, AnchorQuery { value: body.value })
        .await?;
    let (matched, keyed) = match &found {
        AnchorMatch::Matched { kind, first_seen } => (Some((*kind, *first_seen)), true),
        AnchorMatch::NoMatch => (None, true),
        AnchorMatch::Unkeyed => (None, false),
    };
    Ok(ok(AnchorResponse {
        matched: matched.is_some(),
        kind: matched.map(|(kind, _)| kind.as_str().to_owned()),
        first_seen: matched.map(|(_, at)| at.0),
        keyed,
    }))
}
