//! Authentication and authorisation of API requests.
//!
//! Every request except health, readiness, metrics and the OpenAPI document carries an API key
//! as a bearer token, `egk_<id>_<secret>`. Keys belong to a tenant and carry one scope
//! ([`Scope`]); storage keeps the SHA-256 of the secret, never the secret, and the check
//! compares in constant time. The configured admin key (`security.admin-key-file` or
//! `ENGRAM_ADMIN_KEY`) is the root: admin of every tenant (it names the tenant it acts for
//! with `x-engram-tenant`) and operator of the cluster; it is never stored.
//!
//! What each route needs is one table, [`rule`], keyed by the route's template, so that a
//! route without a rule is refused and a test can check every documented route has one.
//! The result of authentication travels with the request as a [`Caller`] extension; the
//! handler asks the user's actor through the front door with the caller's reader (key id,
//! scope, tenant), which travels with the typed request to the owner, never as a header a
//! client could set.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use engram_storage::access::{self, ApiKey, Scope};
use engram_storage::model::Timestamp;
use engram_storage::{Keyspace, Store};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::http::{ApiError, AppState};

/// Prefix of every API key token.
pub const TOKEN_PREFIX: &str = "egk_";
/// The principal name of the configured admin key.
pub const ROOT: &str = "root";
/// Header with which the root key names the tenant it acts for.
pub const TENANT_HEADER: &str = "x-engram-tenant";
/// Tenant the root key acts for when it names none.
pub const DEFAULT_TENANT: &str = "default";
/// Shortest accepted configured admin key.
pub const MIN_ADMIN_KEY_LEN: usize = 32;
/// How long a key row read from storage is trusted before it is read again (a revocation
/// made on another node takes effect within this; on the node that made it, at once).
const CACHE_TTL: Duration = Duration::from_secs(2);

/// Who is calling: a key (or the root), its scope, and the tenant it acts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// Key id (`root` for the configured admin key).
    pub principal: String,
    /// The key's scope.
    pub scope: Scope,
    /// Whether this is the configured admin key (admin of every tenant, and operator).
    pub root: bool,
    /// The tenant the request acts for.
    pub tenant: String,
    /// The client's address, as the node that accepted the connection saw it.
    pub client: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "this endpoint needs an API key",
            )
        })
    }
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing: health, readiness, metrics, the API document.
    Public,
    /// A key that may read and write the tenant's users: gateway or admin.
    Gateway,
    /// A key that may operate the cluster: operator, or the root.
    Operator,
    /// An admin key of the tenant.
    Admin,
}

impl Access {
    /// Whether a key of `scope` (`root` for the configured key) may pass.
    pub fn allows(self, scope: Scope, root: bool) -> bool {
        match self {
            Access::Public => true,
            Access::Gateway => matches!(scope, Scope::Gateway | Scope::Admin),
            Access::Operator => root || scope == Scope::Operator,
            Access::Admin => scope == Scope::Admin,
        }
    }
}

/// What a route needs, and the action its audit entries record (`None`: not audited).
/// `None` for a route without a rule, which is then refused.
pub fn rule(method: &Method, route: &str) -> Option<(Access, Option<&'static str>)> {
    use Access::{Admin, Gateway, Operator, Public};
    let m = method.as_str();
    let (access, action) = match (m, route) {
        ("GET", "/health" | "/ready" | "/metrics" | "/openapi.json") => (Public, ""),
        ("POST", "/v1/users/{user}/turns") => (Gateway, "turn.append"),
        ("POST", "/v1/users/{user}/feedback") => (Gateway, "feedback.write"),
        ("POST", "/v1/users/{user}/context") => (Gateway, "context.read"),
        ("POST", "/v1/users/{user}/memories" | "/write")
        | ("PUT", "/v1/users/{user}/memories/{memory_id}") => (Gateway, "memory.write"),
        ("GET", "/v1/users/{user}/memories") => (Gateway, "memory.list"),
        ("POST", "/v1/users/{user}/memories/search") | ("GET", "/recall") => {
            (Gateway, "memory.search")
        }
        ("POST", "/v1/users/{user}/memories/{memory_id}/status") => (Gateway, "memory.status"),
        ("GET", "/v1/users/{user}/sessions" | "/chat/sessions") => (Gateway, "session.list"),
        (
            "GET",
            "/v1/users/{user}/sessions/{session_id}/memory" | "/chat/sessions/{session_id}/memory",
        ) => (Gateway, "session.read"),
        (
            "DELETE",
            "/v1/users/{user}/sessions/{session_id}/memory" | "/chat/sessions/{session_id}/memory",
        ) => (Gateway, "session.clear"),
        ("GET", "/v1/users/{user}/conflicts") => (Gateway, "conflict.list"),
        ("POST", "/v1/users/{user}/anchors/match") => (Gateway, "anchor.match"),
        ("DELETE", "/v1/users/{user}") => (Admin, "user.forget"),
        ("GET", "/v1/cluster/status") => (Operator, "cluster.status"),
        ("POST", "/v1/cluster/drain") => (Operator, "cluster.drain"),
        ("POST", "/v1/admin/keys") => (Admin, "key.create"),
        ("GET", "/v1/admin/keys") => (Admin, "key.list"),
        ("POST", "/v1/admin/keys/{key_id}/rotate") => (Admin, "key.rotate"),
        ("DELETE", "/v1/admin/keys/{key_id}") => (Admin, "key.revoke"),
        ("GET", "/v1/admin/audit") => (Admin, "audit.read"),
        ("POST", "/v1/admin/users/{user}/approvals") => (Admin, "breaker.approve"),
        ("GET", "/v1/admin/users/{user}/archive") => (Admin, "archive.read"),
        _ => return None,
    };
    Some((access, (!action.is_empty()).then_some(action)))
}

/// A token's parts: `egk_<id>_<secret>`.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (!id.is_empty() && !secret.is_empty()).then_some((id, secret))
}

/// SHA-256 of a secret.
pub fn hash_secret(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// A fresh key id and secret (8 and 32 random bytes, hex) and the token made of them.
pub fn fresh_token() -> (String, String, String) {
    let id = access::to_hex(&rand::random::<[u8; 8]>());
    let secret = access::to_hex(&rand::random::<[u8; 32]>());
    let token = format!("{TOKEN_PREFIX}{id}_{secret}");
    (id, secret, token)
}

/// A per-key token bucket: `rate` requests a second, bursts of `burst`.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// A limiter; `rate == 0` lets everything through.
    pub fn new(rate: u32, burst: u32) -> Self {
        RateLimiter {
            rate: f64::from(rate),
            burst: f64::from(burst.max(rate).max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `key`; `Err(wait)` when its bucket is empty.
    pub fn take(&self, key: &str) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.rate))
        }
    }
}

/// Checks tokens against the configured admin key and the key rows in storage.
pub struct Authenticator {
    store: Store,
    keyspace: Keyspace,
    root: Option<[u8; 32]>,
    cache: Mutex<HashMap<String, (Option<ApiKey>, Instant)>>,
    /// The per-key request rate.
    pub limiter: RateLimiter,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("root", &self.root.is_some())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator over `store`, with the configured admin key `root` (if any).
    pub fn new(store: Store, keyspace: Keyspace, root: Option<&str>, limiter: RateLimiter) -> Self {
        Authenticator {
            store,
            keyspace,
            root: root.map(hash_secret),
            cache: Mutex::new(HashMap::new()),
            limiter,
        }
    }

    /// Forgets the cached row of `key_id` (after it changed on this node).
    pub fn invalidate(&self, key_id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key_id);
    }

    /// The key a bearer token stands for, `(principal, tenant, scope)` with the tenant `None`
    /// for the root; `None` for a token that is not a key, has a wrong secret, or is revoked
    /// or expired.
    pub async fn check(
        &self,
        token: &str,
        now: Timestamp,
    ) -> Option<(String, Option<String>, Scope)> {
        if let Some(root) = &self.root
            && bool::from(hash_secret(token).ct_eq(root))
        {
            return Some((ROOT.to_owned(), None, Scope::Admin));
        }
        let (id, secret) = parse_token(token)?;
        let key = self.key(id).await?;
        if !bool::from(hash_secret(secret).ct_eq(&key.secret_hash)) || !key.is_valid_at(now) {
            return None;
        }
        Some((key.id, Some(key.tenant), key.scope))
    }

    async fn key(&self, id: &str) -> Option<ApiKey> {
        if let Some((key, at)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(id)
            && at.elapsed() < CACHE_TTL
        {
            return key.clone();
        }
        let (ks, key_id) = (self.keyspace.clone(), id.to_owned());
        let key = match self
            .store
            .read(move |txn| access::api_key(txn, &ks, &key_id))
            .await
        {
            Ok(key) => key,
            Err(err) => {
                tracing::warn!(%err, "reading an API key failed");
                return None;
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() > 100_000 {
            cache.clear();
        }
        cache.insert(id.to_owned(), (key.clone(), Instant::now()));
        key
    }
}

fn unauthenticated(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

/// The middleware: finds the route's rule, authenticates the bearer token, checks the scope
/// and the tenant, applies the key's rate limit, and puts the [`Caller`] on the request.
/// Requests replayed from a peer already carry their caller and pass.
pub async fn authenticate(State(s): State<AppState>, mut request: Request, next: Next) -> Response {
    if request.extensions().get::<Caller>().is_some() {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let Some((access, _)) = rule(request.method(), &route) else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this endpoint has no access rule",
        )
        .into_response();
    };
    if access == Access::Public {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(token) = token else {
        s.metrics.auth_refused("missing");
        return unauthenticated("send an API key: Authorization: Bearer <key>");
    };
    let now = s.users.directory().services().clock.now();
    let (principal, key_tenant, scope) = match s.auth.check(token, now).await {
        Some(found) => found,
        None => {
            s.metrics.auth_refused("invalid");
            return unauthenticated("the API key is unknown, revoked or expired");
        }
    };
    let root = key_tenant.is_none();
    let named = match request.headers().get(TENANT_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(t)) => Some(t.to_owned()),
        Some(Err(_)) => {
            return ApiError::invalid(format!("invalid {TENANT_HEADER}: not visible ASCII"))
                .into_response();
        }
    };
    let tenant = match (key_tenant, named) {
        (Some(own), Some(named)) if own != named => {
            s.metrics.auth_refused("tenant");
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "wrong_tenant",
                "this key acts for another tenant",
            )
            .into_response();
        }
        (Some(own), Some(_) | None) => own,
        (None, Some(named)) => named,
        (None, None) => DEFAULT_TENANT.to_owned(),
    };
    if let Err(err) = engram_actors::user::check_id("tenant", &tenant) {
        return ApiError::from(err).into_response();
    }
    if let Err(wait) = s.auth.limiter.take(&principal) {
        s.metrics.auth_refused("rate");
        let mut response = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "this key is over its request rate (security.rate-limit); retry after the delay",
        )
        .into_response();
        let secs = wait.as_secs().max(1).to_string();
        if let Ok(value) = header::HeaderValue::from_str(&secs) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let client = request
        .extensions()
        .get::<ConnectInfo<crate::http::ClientAddr>>()
        .map(|ConnectInfo(addr)| addr.0.to_string());
    let caller = Caller {
        principal,
        scope,
        root,
        tenant,
        client,
    };
    if !access.allows(caller.scope, caller.root) {
        s.metrics.auth_refused("scope");
        request.extensions_mut().insert(caller.clone());
        let refusal = ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("a {} key may not use this endpoint", caller.scope.as_str()),
        )
        .into_response();
        let method = request.method().clone();
        crate::audit::record_refusal(&s, &caller, &method, &route, refusal.status()).await;
        return refusal;
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests;
