//! A tenant's schema metadata cache (the seed caches table and column metadata for 24 hours):
//! entries the gateway stores by name (a table's, usually) with a time to live, shared by
//! the tenant's users and shown in their nl2sql contexts while they live. Tenant-level keys
//! `("schema", tenant, name)`; an entry past its time is neither served nor listed, and the
//! next write of the tenant's cache removes it.

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::kv::{RangeOptions, Txn};
use crate::types::Timestamp;

/// Entries a tenant may hold at once.
pub const MAX_ENTRIES: usize = 1_000;

/// One cached metadata entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaEntry {
    /// Name (a table's), unique within the tenant.
    pub name: String,
    /// The metadata as the gateway gave it (JSON text: columns, types, comments).
    pub content: String,
    /// When it was stored.
    pub stored_at: Timestamp,
    /// When it stops being served.
    pub expires_at: Timestamp,
}

/// Stores (or replaces) `entry`; refuses a new name past [`MAX_ENTRIES`] live entries.
/// Returns `false` when the tenant is full.
pub fn put(txn: &mut Txn, ks: &Keyspace, tenant: &str, entry: &SchemaEntry) -> Result<bool> {
    let range = ks.schema_entries(tenant);
    let mut live = Vec::new();
    for (key, value) in txn.get_range(&range.begin, &range.end, RangeOptions::default())? {
        let stored: SchemaEntry = decode("schema entry", &value)?;
        if stored.expires_at > entry.stored_at {
            live.push(stored.name);
        } else {
            txn.clear(&key)?;
        }
    }
    if live.len() >= MAX_ENTRIES && !live.contains(&entry.name) {
        return Ok(false);
    }
    txn.set(
        &ks.schema_entry(tenant, &entry.name),
        &encode("schema entry", entry)?,
    )?;
    Ok(true)
}

/// Removes the entry `name`; whether there was one.
pub fn remove(txn: &mut Txn, ks: &Keyspace, tenant: &str, name: &str) -> Result<bool> {
    let key = ks.schema_entry(tenant, name);
    let found = txn.get(&key)?.is_some();
    txn.clear(&key)?;
    Ok(found)
}

/// The tenant's entries live at `now`, by name.
pub fn live(
    txn: &mut Txn,
    ks: &Keyspace,
    tenant: &str,
    now: Timestamp,
) -> Result<Vec<SchemaEntry>> {
    let range = ks.schema_entries(tenant);
    let rows = txn.get_range(&range.begin, &range.end, RangeOptions::default())?;
    let mut out = Vec::with_capacity(rows.len());
    for (_, value) in rows {
        let entry: SchemaEntry = decode("schema entry", &value)?;
        if entry.expires_at > now {
            out.push(entry);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    fn entry(name: &str, at: i64, ttl: i64) -> SchemaEntry {
        SchemaEntry {
            name: name.into(),
            content: format!("{{\"table\":\"{name}\"}}"),
            stored_at: Timestamp(at),
            expires_at: Timestamp(at + ttl),
        }
    }

    #[test]
    fn entries_are_served_until_their_time_and_replaced_by_name() {
        let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
        let run =
            |f: &dyn Fn(&mut Txn) -> Result<Vec<String>>| store.run_blocking(|t| f(t)).unwrap();
        let names = |now: i64| {
            move |t: &mut Txn| -> Result<Vec<String>> {
                Ok(live(t, &Keyspace::new("engram"), "acme", Timestamp(now))?
                    .into_iter()
                    .map(|e| e.name)
                    .collect())
            }
        };
        store
            .run_blocking(|t| {
                put(t, &ks, "acme", &entry("dw_orders", 0, 100))?;
                put(t, &ks, "acme", &entry("dim_region", 0, 50))?;
                put(t, &ks, "other", &entry("secret", 0, 100))
            })
            .unwrap();
        assert_eq!(
            run(&names(10)),
            ["dim_region", "dw_orders"],
            "by name, this tenant only"
        );
        assert_eq!(run(&names(50)), ["dw_orders"], "gone at its expiry");
        store
            .run_blocking(|t| put(t, &ks, "acme", &entry("dw_orders", 60, 100)))
            .unwrap();
        assert_eq!(
            run(&names(120)),
            ["dw_orders"],
            "the replacement lives from its own time"
        );
        assert!(
            store
                .run_blocking(|t| remove(t, &ks, "acme", "dw_orders"))
                .unwrap()
        );
        assert!(run(&names(120)).is_empty());
    }
}
