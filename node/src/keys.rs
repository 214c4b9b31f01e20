//! Key management, shared by the admin endpoints and the `engram-node keys` command: create,
//! list, rotate and revoke API keys. A new key's token is returned once and never stored.

use engram_storage::access::{self, ApiKey, Scope};
use engram_storage::model::Timestamp;
use engram_storage::{Keyspace, Store};

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
    store: &Store,
    keyspace: &Keyspace,
    (tenant, scope, name): (&str, Scope, &str),
    by: &str,
    now: Timestamp,
) -> engram_storage::Result<NewKey> {
    let new = make(tenant, scope, name, by, now);
    let (ks, row) = (keyspace.clone(), new.key.clone());
    store
        .run(move |txn| access::put_api_key(txn, &ks, &row))
        .await?;
    Ok(new)
}

/// The keys of `tenant` (of every tenant when `None`).
pub async fn list(
    store: &Store,
    keyspace: &Keyspace,
    tenant: Option<&str>,
) -> engram_storage::Result<Vec<ApiKey>> {
    let (ks, tenant) = (keyspace.clone(), tenant.map(str::to_owned));
    store
        .read(move |txn| access::api_keys(txn, &ks, tenant.as_deref()))
        .await
}

/// Replaces the key `id` (of `tenant`, when given) by a new one with the same tenant, scope
/// and name; the old one stops working after `grace_ms`. `None` if there is no such live key.
pub async fn rotate(
    store: &Store,
    keyspace: &Keyspace,
    (tenant, id): (Option<&str>, &str),
    grace_ms: i64,
    by: &str,
    now: Timestamp,
) -> engram_storage::Result<Option<NewKey>> {
    let (ks, tenant, id, by) = (
        keyspace.clone(),
        tenant.map(str::to_owned),
        id.to_owned(),
        by.to_owned(),
    );
    store
        .run(move |txn| {
            let Some(mut old) = access::api_key(txn, &ks, &id)?
                .filter(|k| tenant.as_deref().is_none_or(|t| t == k.tenant))
                .filter(|k| k.is_valid_at(now))
            else {
                return Ok(None);
            };
            let new = make(&old.tenant, old.scope, &old.name, &by, now);
            old.expires_at = Some(now.plus_millis(grace_ms.max(0)));
            old.replaced_by = Some(new.key.id.clone());
            access::put_api_key(txn, &ks, &old)?;
            access::put_api_key(txn, &ks, &new.key)?;
            Ok(Some(new))
        })
        .await
}

/// Revokes the key `id` (of `tenant`, when given) at `now`. `None` if there is no such key.
pub async fn revoke(
    store: &Store,
    keyspace: &Keyspace,
    (tenant, id): (Option<&str>, &str),
    now: Timestamp,
) -> engram_storage::Result<Option<ApiKey>> {
    let (ks, tenant, id) = (keyspace.clone(), tenant.map(str::to_owned), id.to_owned());
    store
        .run(move |txn| {
            let Some(mut key) = access::api_key(txn, &ks, &id)?
                .filter(|k| tenant.as_deref().is_none_or(|t| t == k.tenant))
            else {
                return Ok(None);
            };
            if key.is_valid_at(now) {
                key.expires_at = Some(now);
                access::put_api_key(txn, &ks, &key)?;
            }
            Ok(Some(key))
        })
        .await
}
