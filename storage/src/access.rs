//! Access control in storage: API keys (kept as a hash of their secret, never the secret),
//! and the append-only audit trail.
//!
//! What a scope may do, how secrets are made and checked, and when to write an audit entry
//! is policy and lives above (`node`); this module reads and writes the rows in the caller's
//! transaction. The audit trail names users by a keyed pseudonym ([`user_pseudonym`]), so
//! forgetting a user leaves no id of theirs in the keyspace while an admin who knows an id
//! can still find its entries.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::codec::{decode, encode};
use crate::error::{Error, Result};
use crate::keyspace::Keyspace;
use crate::kv::{RangeOptions, Txn};
use crate::types::Timestamp;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Read and write the tenant's users (what an agent gateway needs).
    Gateway,
    /// Cluster operations: status, drain.
    Operator,
    /// Everything of the tenant: forget, audit, approvals, key management, full-text reads.
    Admin,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 3] = [Scope::Gateway, Scope::Operator, Scope::Admin];

    /// The scope's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Gateway => "gateway",
            Scope::Operator => "operator",
            Scope::Admin => "admin",
        }
    }

    /// The scope named `name`.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// An API key's row. The secret is not stored: only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// Public id (the part of the token before the secret).
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// What it may do.
    pub scope: Scope,
    /// A label for people.
    pub name: String,
    /// SHA-256 of the secret.
    pub secret_hash: [u8; 32],
    /// When it was made.
    pub created_at: Timestamp,
    /// Who made it (a key id).
    pub created_by: String,
    /// From when it no longer authenticates (revoked, or rotated with a grace period).
    pub expires_at: Option<Timestamp>,
    /// The key that replaced it, when rotated.
    pub replaced_by: Option<String>,
}

impl ApiKey {
    /// Whether the key authenticates at `now`.
    pub fn is_valid_at(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

/// Writes (creates or replaces) a key's row.
pub fn put_api_key(txn: &mut Txn, keyspace: &Keyspace, key: &ApiKey) -> Result<()> {
    txn.set(&keyspace.api_key(&key.id), &encode("api key", key)?)
}

/// The key with `id`, if any.
pub fn api_key(txn: &mut Txn, keyspace: &Keyspace, id: &str) -> Result<Option<ApiKey>> {
    txn.get(&keyspace.api_key(id))?
        .map(|v| decode("api key", &v))
        .transpose()
}

/// Every key of `tenant` (every key of every tenant when `None`), by id.
pub fn api_keys(txn: &mut Txn, keyspace: &Keyspace, tenant: Option<&str>) -> Result<Vec<ApiKey>> {
    let range = keyspace.api_keys();
    let rows = txn.get_range(&range.begin, &range.end, RangeOptions::default())?;
    let mut keys = Vec::with_capacity(rows.len());
    for (_, value) in rows {
        let key: ApiKey = decode("api key", &value)?;
        if tenant.is_none_or(|t| t == key.tenant) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// One entry of the audit trail: who did what to whom, from where, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Unique id (orders entries of the same millisecond).
    pub id: String,
    /// When.
    pub at: Timestamp,
    /// The key id that acted (`root` for the configured admin key).
    pub principal: String,
    /// The tenant acted on.
    pub tenant: String,
    /// The user acted on, as [`user_pseudonym`], if any.
    pub user: Option<String>,
    /// What was done (e.g. `context.read`, `memory.write`, `user.forget`, `key.create`).
    pub action: String,
    /// Ids the action named (memory, session, key ids), never content.
    pub ids: Vec<String>,
    /// The client's address.
    pub client: Option<String>,
    /// The HTTP status of the answer.
    pub outcome: u16,
}

/// Appends `entries`. Entries are never changed afterwards; only [`purge_audit_before`]
/// removes them, past the retention period.
pub fn append_audit(txn: &mut Txn, keyspace: &Keyspace, entries: &[AuditEntry]) -> Result<()> {
    for entry in entries {
        txn.set(
            &keyspace.audit(&entry.tenant, entry.at, &entry.id),
            &encode("audit entry", entry)?,
        )?;
    }
    Ok(())
}

/// Entries of `tenant` with `from <= at < to`, oldest first, that pass `filter`, at most
/// `limit`; scanning stops after `scan` rows. Returns the entries and the time to continue
/// from when the scan stopped early.
pub fn audit_page(
    txn: &mut Txn,
    keyspace: &Keyspace,
    tenant: &str,
    (from, to): (Timestamp, Timestamp),
    limit: usize,
    filter: impl Fn(&AuditEntry) -> bool,
) -> Result<(Vec<AuditEntry>, Option<Timestamp>)> {
    const SCAN: usize = 1_000;
    let range = keyspace.audit_between(tenant, from, to);
    let mut begin = range.begin;
    let mut found = Vec::new();
    loop {
        let rows = txn.get_range(&begin, &range.end, RangeOptions::first(SCAN))?;
        let full = rows.len() == SCAN;
        for (key, value) in &rows {
            let entry: AuditEntry = decode("audit entry", value)?;
            if filter(&entry) {
                found.push(entry);
                if found.len() == limit {
                    let next = keyspace.parse_audit(key).map(|(_, at)| at);
                    return Ok((found, next));
                }
            }
        }
        match rows.last() {
            Some((last, _)) if full => {
                begin = last.clone();
                begin.push(0);
            }
            Some(_) | None => return Ok((found, None)),
        }
    }
}

/// Removes every audit entry (of every tenant) older than `cutoff`, a range clear per
/// tenant (reading one key each); returns the tenants swept.
pub fn purge_audit_before(txn: &mut Txn, keyspace: &Keyspace, cutoff: Timestamp) -> Result<usize> {
    let all = keyspace.audit_all();
    let mut begin = all.begin;
    let mut tenants = 0;
    loop {
        let first = txn.get_range(&begin, &all.end, RangeOptions::first(1))?;
        let Some((key, _)) = first.first() else {
            return Ok(tenants);
        };
        let (tenant, _) = keyspace.parse_audit(key).ok_or_else(|| Error::Decode {
            what: "audit key",
            reason: "not an audit key".into(),
        })?;
        let old = keyspace.audit_between(&tenant, Timestamp(i64::MIN), cutoff);
        txn.clear_range(&old.begin, &old.end)?;
        tenants += 1;
        begin = keyspace.audit_of(&tenant).end;
    }
}

/// The audit trail's pseudonym key: read, or made from `fresh` by the first caller.
pub fn audit_pepper(txn: &mut Txn, keyspace: &Keyspace, fresh: [u8; 32]) -> Result<[u8; 32]> {
    let key = keyspace.audit_pepper();
    if let Some(value) = txn.get(&key)? {
        return value.as_slice().try_into().map_err(|_| Error::Decode {
            what: "audit pepper",
            reason: format!("{} bytes, not 32", value.len()),
        });
    }
    txn.set(&key, &fresh)?;
    Ok(fresh)
}

/// The pseudonym of a user in the audit trail: HMAC-SHA256 of tenant and user id under the
/// pepper, hex; equal ids give equal pseudonyms, and nothing gives the id back.
pub fn user_pseudonym(pepper: &[u8; 32], tenant: &str, user: &str) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(pepper) else {
        unreachable!("HMAC takes keys of any length")
    };
    mac.update(&(tenant.len() as u64).to_be_bytes());
    mac.update(tenant.as_bytes());
    mac.update(user.as_bytes());
    to_hex(&mac.finalize().into_bytes())
}

/// Lower-case hex of `bytes` (key ids, secrets, pseudonyms).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
