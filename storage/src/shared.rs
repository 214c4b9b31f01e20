//! A tenant's shared sets: the semantic SQL cache and the few-shot library, shared by the
//! tenant's users and written by one actor (the tenant's, on the node that holds its shard).
//!
//! Keys `("t", tenant, ...)` ([`crate::keyspace::TenantKeys`]): one value per SQL cache entry and
//! per few-shot example, each holding its question's embedding (the node-local vector indexes
//! are rebuilt from them, never loaded from a dump), per example the distinct key ids that
//! recorded it successful (what auto-promotion counts), the idempotency entries of the sets'
//! writes, and the tenant's settings of them. Values are plain postcard (like the tenant's
//! schema metadata): they hold questions and SQL, never query results or users' memories.
//!
//! Entries are read in pages ([`TenantData::sql_page`], [`TenantData::example_page`]) so that
//! loading a large set never exceeds a transaction's limits.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::access::{AuditEntry, append_audit};
use crate::codec::{decode, encode};
use crate::error::Result;
use crate::keyspace::{KeyRange, Keyspace, TenantKeys};
use crate::kv::{RangeOptions, Txn};
use crate::types::{IdempotencyEntry, Timestamp};

/// One entry of the semantic SQL cache: a normalised question, its embedding, where it was
/// asked (route and domain) and the SQL that answered it. Never the SQL's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqlEntry {
    /// Id: a hash of (route, domain, normalised question).
    pub id: String,
    /// The question, normalised (trimmed, whitespace collapsed, lower case).
    pub question: String,
    /// The gateway's route (e.g. `nl2sql`).
    pub route: String,
    /// The data domain (e.g. `sales`).
    pub domain: String,
    /// The SQL text.
    pub sql: String,
    /// The tables the SQL reads, as parsed, lower case (what an invalidation matches first).
    pub tables: Vec<String>,
    /// The question's embedding (empty when stored without an encoder).
    pub vector: Vec<f32>,
    /// The encoder that made `vector`.
    pub model: String,
    /// When it was stored.
    pub stored_at: Timestamp,
    /// When it stops being served.
    pub expires_at: Timestamp,
}

/// Where a few-shot example stands in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExampleStatus {
    /// Recorded from a success; not served until approved.
    PendingReview,
    /// Served as an example.
    Approved,
    /// Refused by a reviewer; kept (so it is not recorded again) but never served.
    Rejected,
}

impl ExampleStatus {
    /// The name used on the wire and in exports.
    pub fn as_str(self) -> &'static str {
        match self {
            ExampleStatus::PendingReview => "pending_review",
            ExampleStatus::Approved => "approved",
            ExampleStatus::Rejected => "rejected",
        }
    }
}

/// One example of the few-shot library: a question and the SQL that answered it well.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// Id: a hash of (route, normalised question, SQL).
    pub id: String,
    /// The question, normalised.
    pub question: String,
    /// The SQL text.
    pub sql: String,
    /// The gateway's route.
    pub route: String,
    /// The gateway's confidence in the SQL, 0 to 1 (the highest recorded).
    pub confidence: f32,
    /// Review status.
    pub status: ExampleStatus,
    /// Successes recorded.
    pub successes: u32,
    /// Failures reported.
    pub fail_count: u32,
    /// When it was first recorded.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// When it was last served or recorded (an example unused for 30 days expires).
    pub last_used_at: Timestamp,
    /// Who approved, rejected or edited it last (a key id, or `auto-promotion`).
    pub reviewed_by: Option<String>,
    /// The question's embedding (empty when stored without an encoder).
    pub vector: Vec<f32>,
    /// The encoder that made `vector`.
    pub model: String,
}

/// Thresholds and lifetimes of one domain's SQL cache, where they differ from the tenant's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainSettings {
    /// Least cosine similarity of a hit.
    pub similarity: Option<f32>,
    /// How long an entry is served, in milliseconds.
    pub ttl_ms: Option<i64>,
}

/// A tenant's settings of its shared sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedSettings {
    /// Least cosine similarity of a SQL cache hit (default 0.92).
    pub sql_similarity: f32,
    /// How long a SQL cache entry is served, in milliseconds (default 15 minutes).
    pub sql_ttl_ms: i64,
    /// Per-domain overrides.
    pub domains: BTreeMap<String, DomainSettings>,
    /// Whether examples recorded successful by three distinct keys that are near-duplicates
    /// of approved ones are approved without a reviewer (off by default).
    pub auto_promote: bool,
    /// Whether a cached SQL answers only questions with the same literals (numbers, time
    /// expressions) as its own, however similar (on by default).
    pub literal_guard: bool,
}

impl Default for SharedSettings {
    fn default() -> Self {
        SharedSettings {
            sql_similarity: 0.92,
            sql_ttl_ms: 15 * 60 * 1000,
            domains: BTreeMap::new(),
            auto_promote: false,
            literal_guard: true,
        }
    }
}

impl SharedSettings {
    /// The least similarity of a hit in `domain`.
    pub fn similarity(&self, domain: &str) -> f32 {
        self.domains
            .get(domain)
            .and_then(|d| d.similarity)
            .unwrap_or(self.sql_similarity)
    }

    /// How long an entry of `domain` is served, in milliseconds.
    pub fn ttl_ms(&self, domain: &str) -> i64 {
        self.domains
            .get(domain)
            .and_then(|d| d.ttl_ms)
            .unwrap_or(self.sql_ttl_ms)
    }
}

/// One page of a set, and the key to read on after (`None` at the end).
pub type Page<T> = (Vec<T>, Option<Vec<u8>>);

/// Typed access to one tenant's shared sets within a transaction.
pub struct TenantData<'a> {
    txn: &'a mut Txn,
    keyspace: Keyspace,
    keys: TenantKeys,
    tenant: String,
}

impl<'a> TenantData<'a> {
    /// The shared sets of `tenant` in `txn`.
    pub fn new(txn: &'a mut Txn, keyspace: &Keyspace, tenant: &str) -> Self {
        TenantData {
            keys: keyspace.tenant(tenant),
            keyspace: keyspace.clone(),
            tenant: tenant.to_owned(),
            txn,
        }
    }

    fn get<T: DeserializeOwned>(&mut self, what: &'static str, key: &[u8]) -> Result<Option<T>> {
        self.txn.get(key)?.map(|v| decode(what, &v)).transpose()
    }

    fn page<T: DeserializeOwned>(
        &mut self,
        what: &'static str,
        range: KeyRange,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Page<T>> {
        let begin = match after {
            // The least key greater than `after`.
            Some(after) => [after, &[0u8]].concat(),
            None => range.begin,
        };
        let rows = self
            .txn
            .get_range(&begin, &range.end, RangeOptions::first(limit))?;
        let next = (rows.len() == limit && limit > 0).then(|| rows[rows.len() - 1].0.clone());
        let values = rows
            .iter()
            .map(|(_, v)| decode(what, v))
            .collect::<Result<Vec<T>>>()?;
        Ok((values, next))
    }

    /// The tenant's settings (the defaults when none are stored).
    pub fn settings(&mut self) -> Result<SharedSettings> {
        Ok(self
            .get("shared settings", &self.keys.settings())?
            .unwrap_or_default())
    }

    /// Stores the tenant's settings.
    pub fn put_settings(&mut self, settings: &SharedSettings) -> Result<()> {
        self.txn
            .set(&self.keys.settings(), &encode("shared settings", settings)?)
    }

    /// A SQL cache entry.
    pub fn sql_entry(&mut self, id: &str) -> Result<Option<SqlEntry>> {
        self.get("sql cache entry", &self.keys.sql_entry(id))
    }

    /// Stores (or replaces) a SQL cache entry.
    pub fn put_sql_entry(&mut self, entry: &SqlEntry) -> Result<()> {
        self.txn.set(
            &self.keys.sql_entry(&entry.id),
            &encode("sql cache entry", entry)?,
        )
    }

    /// Removes a SQL cache entry.
    pub fn delete_sql_entry(&mut self, id: &str) -> Result<()> {
        self.txn.clear(&self.keys.sql_entry(id))
    }

    /// Up to `limit` SQL cache entries in id order, after the key `after`.
    pub fn sql_page(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Page<SqlEntry>> {
        self.page("sql cache entry", self.keys.sql_entries(), after, limit)
    }

    /// A few-shot example.
    pub fn example(&mut self, id: &str) -> Result<Option<Example>> {
        self.get("few-shot example", &self.keys.example(id))
    }

    /// Stores (or replaces) a few-shot example.
    pub fn put_example(&mut self, example: &Example) -> Result<()> {
        self.txn.set(
            &self.keys.example(&example.id),
            &encode("few-shot example", example)?,
        )
    }

    /// Removes a few-shot example, and the keys that recorded it.
    pub fn delete_example(&mut self, id: &str) -> Result<()> {
        self.txn.clear(&self.keys.example_recorders(id))?;
        self.txn.clear(&self.keys.example(id))
    }

    /// The distinct key ids that recorded the example `id` successful, in the order they
    /// first did (at most as many as [`TenantData::add_example_recorder`] keeps).
    pub fn example_recorders(&mut self, id: &str) -> Result<Vec<String>> {
        Ok(self
            .get("few-shot recorders", &self.keys.example_recorders(id))?
            .unwrap_or_default())
    }

    /// Counts `key_id` among the distinct keys that recorded the example `id` (once however
    /// often it records), keeping at most `keep` of them: only key ids are stored, never
    /// what the keys asked. Returns how many distinct keys are counted now.
    pub fn add_example_recorder(&mut self, id: &str, key_id: &str, keep: usize) -> Result<usize> {
        let mut keys = self.example_recorders(id)?;
        if keys.len() < keep && !keys.iter().any(|k| k == key_id) {
            keys.push(key_id.to_owned());
            self.txn.set(
                &self.keys.example_recorders(id),
                &encode("few-shot recorders", &keys)?,
            )?;
        }
        Ok(keys.len())
    }

    /// Up to `limit` few-shot examples in id order, after the key `after`.
    pub fn example_page(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Page<Example>> {
        self.page("few-shot example", self.keys.examples(), after, limit)
    }

    /// Stores (or replaces) an entry of the tenant's schema metadata cache; `false` when the
    /// tenant is full ([`crate::schema::put`]).
    pub fn put_schema_entry(&mut self, entry: &crate::schema::SchemaEntry) -> Result<bool> {
        crate::schema::put(self.txn, &self.keyspace, &self.tenant, entry)
    }

    /// Removes the schema metadata entry `name`; whether there was one
    /// ([`crate::schema::remove`]).
    pub fn remove_schema_entry(&mut self, name: &str) -> Result<bool> {
        crate::schema::remove(self.txn, &self.keyspace, &self.tenant, name)
    }

    /// The tenant's schema metadata entries live at `now`, by name ([`crate::schema::live`]).
    pub fn schema_entries(&mut self, now: Timestamp) -> Result<Vec<crate::schema::SchemaEntry>> {
        crate::schema::live(self.txn, &self.keyspace, &self.tenant, now)
    }

    /// Appends an entry to the audit trail in this transaction (an action the tenant's actor
    /// takes on its own, such as an automatic approval).
    pub fn audit(&mut self, entry: &AuditEntry) -> Result<()> {
        append_audit(self.txn, &self.keyspace, std::slice::from_ref(entry))
    }

    /// The stored reply of a write to the shared sets, by request id.
    pub fn idempotency(&mut self, request_id: &str) -> Result<Option<IdempotencyEntry>> {
        self.get("idempotency entry", &self.keys.idempotency(request_id))
    }

    /// Records the reply of a write to the shared sets.
    pub fn put_idempotency(&mut self, request_id: &str, entry: &IdempotencyEntry) -> Result<()> {
        self.txn.set(
            &self.keys.idempotency(request_id),
            &encode("idempotency entry", entry)?,
        )
    }

    /// Reads up to `limit` idempotency entries after the key `after` (from the start when
    /// `None`) and removes those recorded before `before` (a retry comes within minutes; a day
    /// is kept). Returns how many were removed and the key to go on from (`None`: the range
    /// ended, start over next time). Bounded reads, so a sweep never exceeds a transaction's
    /// limits however many entries there are.
    pub fn prune_idempotency_page(
        &mut self,
        after: Option<&[u8]>,
        limit: usize,
        before: Timestamp,
    ) -> Result<(usize, Option<Vec<u8>>)> {
        crate::idempotency::prune_page(
            self.txn,
            self.keys.idempotencies(),
            after,
            limit,
            before,
            |_, value| decode("idempotency entry", value),
        )
    }
}

#[cfg(test)]
mod tests;
