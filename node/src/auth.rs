//! Authentication and authorisation of API requests: keys, tokens, who a caller is and what
//! a route needs. No HTTP here: the middleware that reads the bearer token and applies
//! [`Access`] is `http/middleware/auth.rs`, and what each route needs is written in the
//! route table (`http/table.rs`).
//!
//! Every request except health, readiness, metrics and the OpenAPI document carries an API key
//! as a bearer token, `egk_<id>_<secret>`. Keys belong to a tenant and carry one scope
//! ([`Scope`]); storage keeps the SHA-256 of the secret, never the secret, and the check
//! compares in constant time. The configured admin key (`security.admin-key-file` or
//! `ENGRAM_ADMIN_KEY`) is the root: admin of every tenant (it names the tenant it acts for
//! with `x-engram-tenant`) and operator of the cluster; it is never stored.
//!
//! Cluster operation is not a tenant's business: operator keys are made only by the root key
//! or the command line ([`CLI`]), a tenant's admin may neither make nor rotate nor revoke one,
//! and `/v1/cluster` accepts only the root and operator keys so made (an operator key a
//! tenant admin made before this rule is refused there).
//!
//! The result of authentication travels with the request as a
//! [`Caller`](crate::caller::Caller) extension; the handler asks the user's actor through the
//! front door with the caller's reader (key id, scope, tenant), which travels with the typed
//! request to the owner, never as a header a client could set, together with the client's
//! token: the owner authenticates it again and serves the request only for the reader it
//! proves ([`PeerCallers`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_storage::access::{self, ApiKey, Scope};
use engram_storage::types::Timestamp;
use engram_storage::{Keyspace, Store};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use self::limiter::RateLimiter;
use self::lookup::{KeyList, LookupStats, MAX_SECRET_LEN, NegativeCache};
pub use self::peers::PeerCallers;
use crate::config::LookupLimits;
use crate::metrics::KeyLookups;

mod limiter;
pub mod lookup;
pub mod peers;

/// Prefix of every API key token.
pub const TOKEN_PREFIX: &str = "egk_";
/// The principal name of the configured admin key.
pub const ROOT: &str = "root";
/// The principal name of key changes made with the command line (`engram-node keys`).
pub const CLI: &str = "cli";
/// Header with which the root key names the tenant it acts for.
pub const TENANT_HEADER: &str = "x-engram-tenant";
/// Tenant the root key acts for when it names none.
pub const DEFAULT_TENANT: &str = "default";
/// How long a key row read from storage is trusted before it is read again (a revocation
/// made on another node takes effect within this; on the node that made it, at once).
const CACHE_TTL: Duration = Duration::from_secs(2);
/// Key rows cached before stale ones are dropped.
const MAX_CACHED_KEYS: usize = 100_000;

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

/// Whether a key made (or last rotated) by `created_by` was made by the root key or the
/// command line, the only makers of operator keys.
pub fn made_by_root(created_by: &str) -> bool {
    created_by == ROOT || created_by == CLI
}

/// What a token was found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Key id (`root` for the configured admin key).
    pub principal: String,
    /// The key's tenant; `None` for the root.
    pub tenant: Option<String>,
    /// The key's scope.
    pub scope: Scope,
    /// Whether it may operate the cluster: the root, or an operator key the root or the
    /// command line made.
    pub operates_cluster: bool,
}

/// Checks tokens against the configured admin key and the key rows in storage.
pub struct Authenticator {
    store: Store,
    keyspace: Keyspace,
    root: Option<[u8; 32]>,
    /// Key rows read from storage (only keys that exist), each trusted for [`CACHE_TTL`].
    cache: Mutex<HashMap<String, (ApiKey, Instant)>>,
    /// Ids storage has no key for.
    unknown: Mutex<NegativeCache>,
    /// Storage reads of key rows per client address (of ids not in `listed`).
    lookups: RateLimiter,
    /// Ids of the keys in storage, which the address limit never refuses.
    listed: Mutex<KeyList>,
    /// Held while the list of key ids is read (one read at a time).
    listing: tokio::sync::Mutex<()>,
    /// The per-key request rate.
    pub limiter: RateLimiter,
    /// Counters of key lookups.
    pub stats: LookupStats,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not a key, a wrong secret, revoked or expired: 401.
    Invalid,
    /// The client address caused too many key lookups: 429, retry after the wait.
    Limited(Duration),
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("root", &self.root.is_some())
            .finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator over `store`, with the configured admin key `root` (if any), the
    /// per-key request rate `limiter` and the bounds of key lookups.
    pub fn new(
        store: Store,
        keyspace: Keyspace,
        root: Option<&str>,
        limiter: RateLimiter,
        lookups: LookupLimits,
    ) -> Self {
        Authenticator {
            store,
            keyspace,
            root: root.map(hash_secret),
            cache: Mutex::new(HashMap::new()),
            unknown: Mutex::new(NegativeCache::new(lookups.negative_entries)),
            lookups: RateLimiter::new(lookups.per_address_rate, lookups.per_address_burst),
            listed: Mutex::new(KeyList::default()),
            listing: tokio::sync::Mutex::new(()),
            limiter,
            stats: LookupStats::default(),
        }
    }

    /// Forgets what is cached of `key_id` (after it changed, or was made, on this node).
    pub fn invalidate(&self, key_id: &str) {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key_id);
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key_id);
        self.unknown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key_id);
    }

    /// Negative answers held.
    pub fn unknown_ids_cached(&self) -> usize {
        self.unknown.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Its key lookups so far, for the node's metrics.
    pub fn lookups(&self) -> KeyLookups {
        let s = &self.stats;
        KeyLookups {
            unknown_cached: self.unknown_ids_cached(),
            storage_reads: s.storage_reads.load(Ordering::Relaxed),
            negative_hits: s.negative_hits.load(Ordering::Relaxed),
            refused_by_address: s.refused_by_address.load(Ordering::Relaxed),
            malformed: s.malformed.load(Ordering::Relaxed),
            list_reads: s.list_reads.load(Ordering::Relaxed),
        }
    }

    /// The key a bearer token stands for, from `client` (its address; storage reads of key
    /// rows are limited per address). A malformed token costs no storage read.
    pub async fn check(
        &self,
        token: &str,
        now: Timestamp,
        client: &str,
    ) -> Result<Checked, Denied> {
        if let Some(root) = &self.root
            && bool::from(hash_secret(token).ct_eq(root))
        {
            return Ok(Checked {
                principal: ROOT.to_owned(),
                tenant: None,
                scope: Scope::Admin,
                operates_cluster: true,
            });
        }
        let Some((id, secret)) = parse_token(token)
            .filter(|(id, secret)| lookup::well_formed_id(id) && secret.len() <= MAX_SECRET_LEN)
        else {
            LookupStats::count(&self.stats.malformed);
            return Err(Denied::Invalid);
        };
        let key = self.key(id, client).await?.ok_or(Denied::Invalid)?;
        if !bool::from(hash_secret(secret).ct_eq(&key.secret_hash)) || !key.is_valid_at(now) {
            return Err(Denied::Invalid);
        }
        let operates_cluster = key.scope == Scope::Operator && made_by_root(&key.created_by);
        Ok(Checked {
            principal: key.id,
            tenant: Some(key.tenant),
            scope: key.scope,
            operates_cluster,
        })
    }

    /// The row of key `id`: cached, or read from storage when `client` is within its rate of
    /// lookups.
    async fn key(&self, id: &str, client: &str) -> Result<Option<ApiKey>, Denied> {
        if let Some((key, at)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(id)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(Some(key.clone()));
        }
        if self
            .unknown
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id, CACHE_TTL)
        {
            LookupStats::count(&self.stats.negative_hits);
            return Ok(None);
        }
        let listed = self
            .listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id);
        if !listed
            && let Err(wait) = self.lookups.take(client)
            && !self.listed_in_storage(id).await
        {
            LookupStats::count(&self.stats.refused_by_address);
            return Err(Denied::Limited(wait));
        }
        LookupStats::count(&self.stats.storage_reads);
        let (ks, key_id) = (self.keyspace.clone(), id.to_owned());
        let key = match self
            .store
            .read(move |txn| access::api_key(txn, &ks, &key_id))
            .await
        {
            Ok(key) => key,
            Err(err) => {
                tracing::warn!(%err, "reading an API key failed");
                return Ok(None);
            }
        };
        match &key {
            Some(row) => {
                self.listed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id);
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                // Only keys that exist are cached here, so this holds at most the key rows;
                // stale ones are dropped when it grows.
                if cache.len() >= MAX_CACHED_KEYS {
                    cache.retain(|_, (_, at)| at.elapsed() < CACHE_TTL);
                }
                cache.insert(id.to_owned(), (row.clone(), Instant::now()));
            }
            None => self
                .unknown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id),
        }
        Ok(key)
    }

    /// Whether a key with id `id` is in storage, by the list of every key id, read again
    /// when it is older than [`lookup::LIST_REFRESH`] (so at most once that often, however
    /// many addresses are over their budget): an address over its budget of key-row reads
    /// is refused only ids that are no key's.
    async fn listed_in_storage(&self, id: &str) -> bool {
        let _one_reader = self.listing.lock().await;
        {
            let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
            if listed.contains(id) || listed.fresh() {
                return listed.contains(id);
            }
        }
        LookupStats::count(&self.stats.list_reads);
        let ks = self.keyspace.clone();
        match self
            .store
            .read(move |txn| access::api_keys(txn, &ks, None))
            .await
        {
            Ok(keys) => {
                let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
                listed.replace(keys.into_iter().map(|key| key.id));
                listed.contains(id)
            }
            Err(err) => {
                tracing::warn!(%err, "reading the list of API keys failed");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
