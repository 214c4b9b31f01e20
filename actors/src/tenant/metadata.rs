//! The tenant's schema metadata cache (`/v1/metadata`): entries the gateway stores by name
//! with a time to live ([`engram_storage::schema`]), written by the tenant's actor like its
//! shared sets (one transaction fenced by the tenant shard's lease) and read by the nl2sql
//! contexts of the tenant's users. The actor caches none of it: every request reads or
//! writes storage. A retry of a put stores the same entry again (stamped anew).

use engram_storage::schema::SchemaEntry;

use super::TenantState;
use crate::error::Result;
use crate::request::tenant::{MetadataPut, MetadataRemove};
use crate::user::check_id;

impl TenantState {
    /// Stores the entry, stamped now; `None` when the tenant caches as many as it may.
    pub(super) async fn put_metadata(&self, q: MetadataPut) -> Result<Option<SchemaEntry>> {
        check_id("name", &q.name)?;
        let at = self.now();
        let entry = SchemaEntry {
            name: q.name,
            content: q.content,
            stored_at: at,
            expires_at: at.plus_millis(q.ttl_ms),
        };
        let stored = entry.clone();
        let fitted = self.run(move |t| t.put_schema_entry(&stored)).await?;
        Ok(fitted.then_some(entry))
    }

    /// The entries live now, by name.
    pub(super) async fn list_metadata(&self) -> Result<Vec<SchemaEntry>> {
        let now = self.now();
        let (ks, tenant) = (
            self.args.services.keyspace.clone(),
            self.tenant().to_owned(),
        );
        Ok(self
            .args
            .services
            .store
            .read(move |txn| {
                engram_storage::shared::TenantData::new(txn, &ks, &tenant).schema_entries(now)
            })
            .await?)
    }

    /// Removes the entry; whether there was one.
    pub(super) async fn remove_metadata(&self, q: MetadataRemove) -> Result<bool> {
        check_id("name", &q.name)?;
        self.run(move |t| t.remove_schema_entry(&q.name)).await
    }
}
