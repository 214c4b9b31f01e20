//! Key management, shared by the admin endpoints and the `engram-node keys` command: create,
//! list, rotate and revoke API keys. A new key's token is returned once and never stored;
//! the rows are the key ring's ([`KeyRing`]).

use engram_actors::admin::KeyRing;
use engram_storage::access::{ApiKey, Scope};
use engram_storage::types::Timestamp;

use crate::auth::fresh_token;

/// A key just made: its row and its token (shown once).
#[derive(Debug, Clone)]
pub struct NewKey {
    /// The stored row.
    pub key: ApiKey,
    /// The bearer token.
    pub token: String,
}

fn make(tenant: &str, scope: Scope, name: &str, by: &str, now: Timestamp) -> NewKey {
    let (id, secret, token) = fresh_token();
    NewKey {
        key: ApiKey {
            id,
            tenant: tenant.to_owned(),
            scope,
            name: name.to_owned(),
            secret_hash: crate::auth::hash_secret(&secret),
            created_at: now,
            created_by: by.to_owned(),
            expires_at: None,
            replaced_by: None,
        },
        token,
    }
}

/// Creates a key of `tenant` with `scope`, made by the key `by`.
pub async fn create(
    keys: &KeyRing,
    (tenant, scope, name): (&str, Scope, &str),
    by: &str,
    now: Timestamp,
) -> engram_storage::Result<NewKey> {
    let new = make(tenant, scope, name, by, now);
    keys.put(new.key.clone()).await?;
    Ok(new)
}

/// The keys of `tenant` (of every tenant when `None`).
pub async fn list(keys: &KeyRing, tenant: Option<&str>) -> engram_storage::Result<Vec<ApiKey>> {
    keys.list(tenant).await
}

/// Replaces the key `id` (of `tenant`, when given) by a new one with the same tenant, scope
/// and name; the old one stops working after `grace_ms`. `None` if there is no such live key.
pub async fn rotate(
    keys: &KeyRing,
    (tenant, id): (Option<&str>, &str),
    grace_ms: i64,
    by: &str,
    now: Timestamp,
) -> engram_storage::Result<Option<NewKey>> {
    let by = by.to_owned();
    keys.rotate((tenant, id), grace_ms, now, move |old| {
        let new = make(&old.tenant, old.scope, &old.name, &by, now);
        (new.key.clone(), new)
    })
    .await
}

/// Revokes the key `id` (of `tenant`, when given) at `now`. `None` if there is no such key.
pub async fn revoke(
    keys: &KeyRing,
    (tenant, id): (Option<&str>, &str),
    now: Timestamp,
) -> engram_storage::Result<Option<ApiKey>> {
    keys.revoke((tenant, id), now).await
}
