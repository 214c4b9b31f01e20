//! The key layout of docs/architecture.md, "Keyspace", encoded with the FoundationDB tuple
//! layer under one root prefix, so that SQLite and FoundationDB hold byte-identical keys.
//!
//! ```text
//! ("node", node_id)                               membership row
//! ("shard", shard_id)                             shard lease: owner, epoch
//! ("u", tenant, user, "hdr")                      user header
//! ("u", tenant, user, "sess", session)            session row
//! ("u", tenant, user, "turn", session, seq)       conversation turns
//! ("u", tenant, user, "rec", kind, memory_id)     memory records
//! ("u", tenant, user, "intent", type, version)    versioned intents (expiring ones indexed
//!                                                 in the expiry index, tag "intent")
//! ("u", tenant, user, "vec", memory_id)           embeddings
//! ("u", tenant, user, "pend", memory_id)          pending inference: a text awaiting its vector
//! ("u", tenant, user, "dist", entry_id)           pending distillation: a message awaiting the model
//! ("u", tenant, user, "sum", session, seq)        the model's summary of a turn
//! ("u", tenant, user, "idem", request_id)         idempotency keys
//! ("u", tenant, user, "flag", flag_id)            contradictions flagged for review
//! ("u", tenant, user, "choice", hash)             counts of repeated choices, by keyed hash
//! ("u", tenant, user, "reads")                   the sensitive-read breaker's counts, per key
//! ("u", tenant, user, "anchor", hmac)             identity anchors, by keyed hash
//! ("u", tenant, user, "archive", session)         archive row of a session
//! ("u", tenant, user, "arch", session, seq)       archived raw turns (full text)
//! ("u", tenant, user, "archd", session, seq)      archived turn digests (hashes, no text)
//! ("exp", at, tenant, user, "rec", kind, id)      expiry index: a memory record's TTL
//! ("exp", at, tenant, user, "sess", session)      expiry index: a session's raw-turn retention
//! ("exp", at, tenant, user, "idle", session)      expiry index: a session window idle past 24 h
//! ("exp", at, tenant, user, "arch", session)      expiry index: a session's archive purge
//! ("pend", tenant, user)                          users with pending inference (the work index)
//! ("dist", tenant, user)                          users with pending distillation (its work index)
//! ("key", key_id)                                 API key: tenant, scope, hash of the secret
//! ("t", tenant, "sql", entry_id)                  the tenant's semantic SQL cache
//! ("t", tenant, "fs", example_id)                 the tenant's few-shot library
//! ("t", tenant, "idem", request_id)               idempotency keys of the tenant's shared sets
//! ("t", tenant, "settings")                       the tenant's settings of its shared sets
//! ("audit", tenant, at, entry_id)                 audit trail (append-only)
//! ("audit-pepper",)                               key of the audit trail's user pseudonyms
//! ```
//!
//! Everything of a user sits under `("u", tenant, user)`; the expiry index and the work
//! index of pending inference are the only places outside that prefix that name a user. This module only builds byte strings; it reads and
//! writes nothing.

use std::sync::Arc;

use foundationdb_tuple::{PackResult, Subspace, TupleDepth, TupleUnpack};

use crate::crypto::{Cipher, Encryption, KeyService, MasterKeys};
use crate::types::{MemoryKind, Timestamp};

/// What an expiry-index entry points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExpiryTarget {
    /// A memory record, whose TTL ran out.
    Record {
        /// Its layer.
        kind: MemoryKind,
        /// Its id.
        memory_id: String,
    },
    /// A session, whose oldest raw turns passed the retention period.
    Session {
        /// Its id.
        session_id: String,
    },
    /// A session whose working-memory window closes for being idle.
    SessionIdle {
        /// Its id.
        session_id: String,
    },
    /// A session whose oldest archived turns passed the archive retention period.
    Archive {
        /// Its id.
        session_id: String,
    },
    /// A version of a distilled intent, whose TTL ran out.
    Intent {
        /// Its type.
        intent_type: String,
        /// Its version.
        version: Timestamp,
    },
}

/// A half-open key range `[begin, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// First key of the range (inclusive).
    pub begin: Vec<u8>,
    /// End of the range (exclusive).
    pub end: Vec<u8>,
}

impl KeyRange {
    fn of(subspace: &Subspace) -> Self {
        let (begin, end) = subspace.range();
        KeyRange { begin, end }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.begin.as_slice() && key < self.end.as_slice()
    }
}

/// The pipeline's durable work queues: each has its entries under the user's prefix and its
/// own work index of users with entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkQueue {
    /// Texts awaiting their embeddings (tag `pend`).
    Embedding,
    /// Messages awaiting the generative model's distillation (tag `dist`).
    Distillation,
}

impl WorkQueue {
    /// The key tag of the queue, in the user's prefix and in the work index.
    pub fn tag(self) -> &'static str {
        match self {
            WorkQueue::Embedding => "pend",
            WorkQueue::Distillation => "dist",
        }
    }
}

/// The root of Engram's keys, and the encryption user values are sealed with (none: values
/// are stored in clear). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Keyspace {
    root: Subspace,
    encryption: Option<Encryption>,
}

impl PartialEq for Keyspace {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Eq for Keyspace {}

impl Keyspace {
    /// Keys under the tuple-encoded root name (e.g. `"engram"`), so several deployments can
    /// share one store.
    pub fn new(root: &str) -> Self {
        Keyspace {
            root: Subspace::all().subspace(&(root,)),
            encryption: None,
        }
    }

    /// The same keyspace with user values sealed under per-user data keys
    /// ([`crate::crypto`]).
    pub fn with_encryption(mut self, encryption: Encryption) -> Self {
        self.encryption = Some(encryption);
        self
    }

    /// The same keyspace with user values sealed with `cipher` under per-user data keys that
    /// `keys` wraps.
    pub fn with_key_service(self, keys: Arc<dyn KeyService>, cipher: Cipher) -> Self {
        self.with_encryption(Encryption::new(keys, cipher))
    }

    /// The same keyspace with user values sealed under per-user data keys wrapped by
    /// `master_keys`, with the cipher they wrap with ([`MasterKeys::with_cipher`]).
    pub fn with_master_keys(self, master_keys: MasterKeys) -> Self {
        let cipher = master_keys.cipher();
        self.with_key_service(Arc::new(master_keys), cipher)
    }

    /// The encryption at rest, when user values are sealed.
    pub fn encryption(&self) -> Option<&Encryption> {
        self.encryption.as_ref()
    }

    /// Every key of this keyspace.
    pub fn all(&self) -> KeyRange {
        KeyRange::of(&self.root)
    }

    /// The membership row of a node.
    pub fn node(&self, node_id: &str) -> Vec<u8> {
        self.root.pack(&("node", node_id))
    }

    /// All membership rows.
    pub fn nodes(&self) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("node",)))
    }

    /// The lease row of a shard.
    pub fn shard(&self, shard: u32) -> Vec<u8> {
        self.root.pack(&("shard", shard))
    }

    /// All shard rows.
    pub fn shards(&self) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("shard",)))
    }

    /// The keys of one user.
    pub fn user(&self, tenant: &str, user: &str) -> UserKeys {
        UserKeys {
            space: self.root.subspace(&("u", tenant, user)),
        }
    }

    /// The keys of a tenant's shared sets (SQL cache, few-shot library).
    pub fn tenant(&self, tenant: &str) -> TenantKeys {
        TenantKeys {
            space: self.root.subspace(&("t", tenant)),
        }
    }

    /// Every key of every user of `tenant`: the users' prefixes `("u", tenant, user)`, in
    /// user id order.
    pub fn tenant_users(&self, tenant: &str) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("u", tenant)))
    }

    /// Decodes any key under a user's prefix `("u", tenant, user, ...)` into (tenant, user),
    /// whatever follows the user id.
    pub fn parse_user_key(&self, key: &[u8]) -> Option<(String, String)> {
        let (tag, tenant, user, _): (String, String, String, Remainder) =
            self.root.unpack(key).ok()?;
        (tag == "u").then_some((tenant, user))
    }

    /// An entry of the expiry index.
    pub fn expiry(
        &self,
        at: Timestamp,
        tenant: &str,
        user: &str,
        target: &ExpiryTarget,
    ) -> Vec<u8> {
        match target {
            ExpiryTarget::Record { kind, memory_id } => {
                self.root
                    .pack(&("exp", at.0, tenant, user, "rec", kind.as_str(), memory_id))
            }
            ExpiryTarget::Session { session_id } => self
                .root
                .pack(&("exp", at.0, tenant, user, "sess", session_id)),
            ExpiryTarget::SessionIdle { session_id } => self
                .root
                .pack(&("exp", at.0, tenant, user, "idle", session_id)),
            ExpiryTarget::Archive { session_id } => self
                .root
                .pack(&("exp", at.0, tenant, user, "arch", session_id)),
            ExpiryTarget::Intent {
                intent_type,
                version,
            } => self
                .root
                .pack(&("exp", at.0, tenant, user, "intent", intent_type, version.0)),
        }
    }

    /// Expiry entries with `expires_at < before`, oldest first.
    pub fn expiries_before(&self, before: Timestamp) -> KeyRange {
        let all = self.root.subspace(&("exp",));
        KeyRange {
            begin: all.range().0,
            end: all.pack(&(before.0,)),
        }
    }

    /// Decodes an expiry-index key into (expires_at, tenant, user, target).
    pub fn parse_expiry(&self, key: &[u8]) -> Option<(Timestamp, String, String, ExpiryTarget)> {
        if let Ok((tag, at, tenant, user, rec, kind, id)) =
            self.root
                .unpack::<(String, i64, String, String, String, String, String)>(key)
        {
            let kind = MemoryKind::parse(&kind)?;
            return (tag == "exp" && rec == "rec").then_some((
                Timestamp(at),
                tenant,
                user,
                ExpiryTarget::Record {
                    kind,
                    memory_id: id,
                },
            ));
        }
        if let Ok((tag, at, tenant, user, intent, intent_type, version)) =
            self.root
                .unpack::<(String, i64, String, String, String, String, i64)>(key)
        {
            return (tag == "exp" && intent == "intent").then_some((
                Timestamp(at),
                tenant,
                user,
                ExpiryTarget::Intent {
                    intent_type,
                    version: Timestamp(version),
                },
            ));
        }
        let (tag, at, tenant, user, sess, id): (String, i64, String, String, String, String) =
            self.root.unpack(key).ok()?;
        let target = match sess.as_str() {
            "sess" => ExpiryTarget::Session { session_id: id },
            "idle" => ExpiryTarget::SessionIdle { session_id: id },
            "arch" => ExpiryTarget::Archive { session_id: id },
            _ => return None,
        };
        (tag == "exp").then_some((Timestamp(at), tenant, user, target))
    }

    /// The entry of a user in the work index of `queue` (its value: when the oldest entry
    /// was queued, [`crate::data::pending::PENDING_SINCE_LEN`] bytes).
    pub fn pending_user(&self, queue: WorkQueue, tenant: &str, user: &str) -> Vec<u8> {
        self.root.pack(&(queue.tag(), tenant, user))
    }

    /// Every entry of the work index of `queue`, by tenant then user.
    pub fn pending_users(&self, queue: WorkQueue) -> KeyRange {
        KeyRange::of(&self.root.subspace(&(queue.tag(),)))
    }

    /// Decodes a key of the work index of `queue` into (tenant, user).
    pub fn parse_pending_user(&self, queue: WorkQueue, key: &[u8]) -> Option<(String, String)> {
        let (tag, tenant, user): (String, String, String) = self.root.unpack(key).ok()?;
        (tag == queue.tag()).then_some((tenant, user))
    }

    /// The row of an API key.
    pub fn api_key(&self, key_id: &str) -> Vec<u8> {
        self.root.pack(&("key", key_id))
    }

    /// Every API key row.
    pub fn api_keys(&self) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("key",)))
    }

    /// A tenant's cached schema metadata entry (a table's, by name).
    pub fn schema_entry(&self, tenant: &str, name: &str) -> Vec<u8> {
        self.root.pack(&("schema", tenant, name))
    }

    /// Every cached schema metadata entry of `tenant`.
    pub fn schema_entries(&self, tenant: &str) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("schema", tenant)))
    }

    /// An audit entry of `tenant`, ordered by time.
    pub fn audit(&self, tenant: &str, at: Timestamp, entry_id: &str) -> Vec<u8> {
        self.root.pack(&("audit", tenant, at.0, entry_id))
    }

    /// Audit entries of `tenant` with `from <= at < to`.
    pub fn audit_between(&self, tenant: &str, from: Timestamp, to: Timestamp) -> KeyRange {
        let space = self.root.subspace(&("audit", tenant));
        KeyRange {
            begin: space.pack(&(from.0,)),
            end: space.pack(&(to.0,)),
        }
    }

    /// Every audit entry of `tenant`.
    pub fn audit_of(&self, tenant: &str) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("audit", tenant)))
    }

    /// Every audit entry, of every tenant.
    pub fn audit_all(&self) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("audit",)))
    }

    /// Decodes an audit key into (tenant, at).
    pub fn parse_audit(&self, key: &[u8]) -> Option<(String, Timestamp)> {
        let (tag, tenant, at, _id): (String, String, i64, String) = self.root.unpack(key).ok()?;
        (tag == "audit").then_some((tenant, Timestamp(at)))
    }

    /// A compliance notice of `tenant` (a health condition a distilled intent holds), ordered
    /// by time.
    pub fn notice(&self, tenant: &str, at: Timestamp, notice_id: &str) -> Vec<u8> {
        self.root.pack(&("notice", tenant, at.0, notice_id))
    }

    /// Every compliance notice of `tenant`, oldest first.
    pub fn notices_of(&self, tenant: &str) -> KeyRange {
        KeyRange::of(&self.root.subspace(&("notice", tenant)))
    }

    /// The key that pseudonymises user ids in the audit trail.
    pub fn audit_pepper(&self) -> Vec<u8> {
        self.root.pack(&("audit-pepper",))
    }

    /// Decodes a membership key into its node id.
    pub fn parse_node(&self, key: &[u8]) -> Option<String> {
        let (tag, id): (String, String) = self.root.unpack(key).ok()?;
        (tag == "node").then_some(id)
    }

    /// Decodes a lease key into its shard.
    pub fn parse_shard(&self, key: &[u8]) -> Option<u32> {
        let (tag, shard): (String, u32) = self.root.unpack(key).ok()?;
        (tag == "shard").then_some(shard)
    }
}

/// Whatever follows the elements a parser reads, left undecoded (so that a key of any shape
/// under a prefix decodes).
struct Remainder;

impl<'de> TupleUnpack<'de> for Remainder {
    fn unpack(input: &'de [u8], _depth: TupleDepth) -> PackResult<(&'de [u8], Self)> {
        Ok((&input[input.len()..], Remainder))
    }
}

mod tenant;
mod user;

pub use self::tenant::TenantKeys;
pub use self::user::UserKeys;

#[cfg(test)]
mod tests;
