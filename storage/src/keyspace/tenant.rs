//! The keys of one tenant's shared sets, under `("t", tenant)`.

use foundationdb_tuple::Subspace;

use super::KeyRange;

/// The keys under `("t", tenant)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantKeys {
    pub(super) space: Subspace,
}

impl TenantKeys {
    /// Every key of the tenant's shared sets.
    pub fn all(&self) -> KeyRange {
        KeyRange::of(&self.space)
    }

    /// An entry of the semantic SQL cache.
    pub fn sql_entry(&self, id: &str) -> Vec<u8> {
        self.space.pack(&("sql", id))
    }

    /// Every entry of the semantic SQL cache.
    pub fn sql_entries(&self) -> KeyRange {
        KeyRange::of(&self.space.subspace(&("sql",)))
    }

    /// An example of the few-shot library.
    pub fn example(&self, id: &str) -> Vec<u8> {
        self.space.pack(&("fs", id))
    }

    /// Every example of the few-shot library.
    pub fn examples(&self) -> KeyRange {
        KeyRange::of(&self.space.subspace(&("fs",)))
    }

    /// The distinct keys that recorded a few-shot example successful (what auto-promotion
    /// counts).
    pub fn example_recorders(&self, id: &str) -> Vec<u8> {
        self.space.pack(&("fsk", id))
    }

    /// The idempotency entry of a write to the shared sets.
    pub fn idempotency(&self, request_id: &str) -> Vec<u8> {
        self.space.pack(&("idem", request_id))
    }

    /// Every idempotency entry of the shared sets.
    pub fn idempotencies(&self) -> KeyRange {
        KeyRange::of(&self.space.subspace(&("idem",)))
    }

    /// The tenant's settings of its shared sets.
    pub fn settings(&self) -> Vec<u8> {
        self.space.pack(&("settings",))
    }
}
