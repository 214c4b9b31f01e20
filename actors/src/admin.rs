//! The admin's and operator's handle: what the gateway's admin and operations endpoints may
//! do beside asking users' and tenants' actors through the front door ([`crate::front`]).
//! API keys ([`KeyRing`]), a tenant's users, compliance notices and audit trail, the cluster as storage records
//! it, this node's pipeline, drain marks and the clock's time, each as one method, so that no
//! handler reaches the node's services (the store, the keyspace, the leases) itself.
//!
//! Nothing here writes a user's or a tenant's data: keys, drain marks and (through the
//! audit endpoints' middleware) the audit trail are the cluster's and the operators' rows.
//! Above the directory and the services whose handles it lends, below the front door.

use std::sync::Arc;

use engram_storage::access::{self, ApiKey, AuditEntry};
use engram_storage::data::users::UsersPage;
use engram_storage::types::{Member, ShardLease, Timestamp};
use engram_storage::{Keyspace, Store};

pub use engram_storage::data::notice::Notice;

use crate::directory::Directory;
use crate::error::Result;
use crate::pipeline::Pending;
use crate::services::Services;

/// The admin's and operator's handle on this node (cheap to clone).
#[derive(Debug, Clone)]
pub struct Admin {
    directory: Arc<Directory>,
}

/// This node's inference pipeline: what is pending for its shards (counted in storage now)
/// and what its dispatcher did since it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineView {
    /// What is pending.
    pub pending: Pending,
    /// Vectors stored since the node started.
    pub stored: u64,
    /// Vectors dropped since the node started.
    pub dropped: u64,
}

impl Admin {
    /// The handle over the services of `directory`.
    pub fn new(directory: Arc<Directory>) -> Self {
        Admin { directory }
    }

    fn services(&self) -> &Services {
        self.directory.services()
    }

    /// The clock's time now.
    pub fn now(&self) -> Timestamp {
        self.services().clock.now()
    }

    /// This node's id (empty without leases).
    pub fn node(&self) -> String {
        self.services()
            .ownership
            .as_ref()
            .map(|o| o.node().to_owned())
            .unwrap_or_default()
    }

    /// The number of shards.
    pub fn shards(&self) -> u32 {
        self.services().settings.shards
    }

    /// Shards this node holds now (0 without leases).
    pub fn held(&self) -> usize {
        self.services().ownership.as_ref().map_or(0, |o| o.held())
    }

    /// The API keys.
    pub fn keys(&self) -> KeyRing {
        let services = self.services();
        KeyRing::new(services.store.clone(), services.keyspace.clone())
    }

    /// Up to `limit` users of `tenant` (those holding any data) after the user id `after`.
    pub async fn users_page(
        &self,
        tenant: &str,
        after: Option<String>,
        limit: usize,
    ) -> engram_storage::Result<UsersPage> {
        let services = self.services();
        let (ks, tenant) = (services.keyspace.clone(), tenant.to_owned());
        services
            .store
            .read(move |txn| {
                engram_storage::data::users::page(txn, &ks, &tenant, after.as_deref(), limit)
            })
            .await
    }

    /// Up to `limit` of `tenant`'s compliance notices, oldest first, after the one at
    /// `after` (its time and id).
    pub async fn notices_page(
        &self,
        tenant: &str,
        after: Option<(Timestamp, String)>,
        limit: usize,
    ) -> engram_storage::Result<Vec<Notice>> {
        let services = self.services();
        let (ks, tenant) = (services.keyspace.clone(), tenant.to_owned());
        services
            .store
            .read(move |txn| {
                let after = after.as_ref().map(|(at, id)| (*at, id.as_str()));
                engram_storage::data::notice::notices_page(txn, &ks, &tenant, after, limit)
            })
            .await
    }

    /// A page of `tenant`'s audit trail between `from` and `to`, oldest first: up to `limit`
    /// entries that `filter` keeps, and where the next page starts.
    pub async fn audit_page(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        limit: usize,
        filter: impl Fn(&AuditEntry) -> bool + Send + 'static,
    ) -> engram_storage::Result<(Vec<AuditEntry>, Option<Timestamp>)> {
        let services = self.services();
        let (ks, tenant) = (services.keyspace.clone(), tenant.to_owned());
        services
            .store
            .read(move |txn| access::audit_page(txn, &ks, &tenant, (from, to), limit, &filter))
            .await
    }

    /// The cluster's members as storage records them (a read that also proves storage
    /// answers).
    pub async fn members(&self) -> engram_storage::Result<Vec<Member>> {
        let services = self.services();
        let ks = services.keyspace.clone();
        services
            .store
            .read(move |txn| engram_storage::cluster::members(txn, &ks))
            .await
    }

    /// The members and every shard's lease, read at once.
    pub async fn members_and_leases(
        &self,
    ) -> engram_storage::Result<(Vec<Member>, Vec<(u32, ShardLease)>)> {
        let services = self.services();
        let ks = services.keyspace.clone();
        services
            .store
            .read(move |txn| {
                Ok((
                    engram_storage::cluster::members(txn, &ks)?,
                    engram_storage::cluster::shard_leases(txn, &ks)?,
                ))
            })
            .await
    }

    /// This node's pipeline (`None` when it runs none).
    pub async fn pipeline(&self) -> Result<Option<PipelineView>> {
        let services = self.services();
        let Some(pipeline) = &services.pipeline else {
            return Ok(None);
        };
        let pending = pipeline.pending(services).await?;
        let metrics = pipeline.metrics();
        Ok(Some(PipelineView {
            pending,
            stored: metrics.stored.load(std::sync::atomic::Ordering::Relaxed),
            dropped: metrics.dropped.load(std::sync::atomic::Ordering::Relaxed),
        }))
    }

    /// Asks `node_id` to drain ([`crate::cluster::request_drain`]).
    pub async fn request_drain(&self, node_id: &str) -> Result<Option<Member>> {
        let services = self.services();
        crate::cluster::request_drain(&services.store, &services.keyspace, node_id).await
    }
}

/// The API keys in storage: rows only (making a key's token and hashing its secret is the
/// node's business).
#[derive(Debug, Clone)]
pub struct KeyRing {
    store: Store,
    keyspace: Keyspace,
}

impl KeyRing {
    /// The keys in `store` under `keyspace`.
    pub fn new(store: Store, keyspace: Keyspace) -> Self {
        KeyRing { store, keyspace }
    }

    /// The key `id`, whatever its tenant and state.
    pub async fn get(&self, id: &str) -> engram_storage::Result<Option<ApiKey>> {
        let (ks, id) = (self.keyspace.clone(), id.to_owned());
        self.store
            .read(move |txn| access::api_key(txn, &ks, &id))
            .await
    }

    /// Stores a new key.
    pub async fn put(&self, key: ApiKey) -> engram_storage::Result<()> {
        let ks = self.keyspace.clone();
        self.store
            .run(move |txn| access::put_api_key(txn, &ks, &key))
            .await
    }

    /// The keys of `tenant` (of every tenant when `None`).
    pub async fn list(&self, tenant: Option<&str>) -> engram_storage::Result<Vec<ApiKey>> {
        let (ks, tenant) = (self.keyspace.clone(), tenant.map(str::to_owned));
        self.store
            .read(move |txn| access::api_keys(txn, &ks, tenant.as_deref()))
            .await
    }

    /// Replaces the live key `id` (of `tenant`, when given) by the one `make` makes of it, in
    /// one transaction: the old one stops working after `grace_ms` and names its successor.
    /// `make` answers the new row and what the caller keeps of it (its token). `None` if
    /// there is no such live key.
    pub async fn rotate<T: Send + 'static>(
        &self,
        (tenant, id): (Option<&str>, &str),
        grace_ms: i64,
        now: Timestamp,
        make: impl Fn(&ApiKey) -> (ApiKey, T) + Send + 'static,
    ) -> engram_storage::Result<Option<T>> {
        let (ks, tenant, id) = (
            self.keyspace.clone(),
            tenant.map(str::to_owned),
            id.to_owned(),
        );
        self.store
            .run(move |txn| {
                let Some(mut old) =
                    key_of(txn, &ks, tenant.as_deref(), &id)?.filter(|k| k.is_valid_at(now))
                else {
                    return Ok(None);
                };
                let (new, kept) = make(&old);
                old.expires_at = Some(now.plus_millis(grace_ms.max(0)));
                old.replaced_by = Some(new.id.clone());
                access::put_api_key(txn, &ks, &old)?;
                access::put_api_key(txn, &ks, &new)?;
                Ok(Some(kept))
            })
            .await
    }

    /// Revokes the key `id` (of `tenant`, when given) at `now`. `None` if there is no such
    /// key.
    pub async fn revoke(
        &self,
        (tenant, id): (Option<&str>, &str),
        now: Timestamp,
    ) -> engram_storage::Result<Option<ApiKey>> {
        let (ks, tenant, id) = (
            self.keyspace.clone(),
            tenant.map(str::to_owned),
            id.to_owned(),
        );
        self.store
            .run(move |txn| {
                let Some(mut key) = key_of(txn, &ks, tenant.as_deref(), &id)? else {
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
}

/// The key `id`, if it belongs to `tenant` (to any tenant when `None`).
fn key_of(
    txn: &mut engram_storage::Txn,
    ks: &Keyspace,
    tenant: Option<&str>,
    id: &str,
) -> engram_storage::Result<Option<ApiKey>> {
    Ok(access::api_key(txn, ks, id)?.filter(|k| tenant.is_none_or(|t| t == k.tenant)))
}
