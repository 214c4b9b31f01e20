//! What an unknown key id may cost: a token whose id is malformed is refused without a
//! storage read; an id storage has no key for is remembered in a fixed-size cache of negative
//! answers (the oldest forgotten first, never flushed whole); and the storage reads of key
//! rows a client address causes are rate limited before they happen. Counters of each
//! outcome are exported as metrics.
//!
//! The address limit never refuses a valid key: ids of keys this node has seen in storage
//! ([`KeyList`]) pass without taking from the address's budget, and an id the address's
//! exhausted budget would refuse is first looked up in the list of every key id in storage,
//! read again at most once every [`LIST_REFRESH`] whatever the traffic. So a guesser behind
//! the same address as real clients (a NAT, the MCP server) costs them nothing, and guessing
//! costs at most the address's budget of row reads plus one list read a second.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest key id accepted (ids this build makes are 16 hex digits).
pub const MAX_KEY_ID_LEN: usize = 32;
/// Longest secret accepted (secrets this build makes are 64 hex digits).
pub const MAX_SECRET_LEN: usize = 128;
/// The least time between two reads of the list of key ids.
pub const LIST_REFRESH: Duration = Duration::from_secs(1);

/// Whether `id` may be a key id: 1 to [`MAX_KEY_ID_LEN`] lowercase hex digits.
pub fn well_formed_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Counters of key lookups.
#[derive(Debug, Default)]
pub struct LookupStats {
    /// Key rows read from storage.
    pub storage_reads: AtomicU64,
    /// Lookups answered by the cache of negative answers.
    pub negative_hits: AtomicU64,
    /// Lookups refused by the per-address limit (no storage read).
    pub refused_by_address: AtomicU64,
    /// Tokens refused as malformed (no storage read).
    pub malformed: AtomicU64,
    /// Reads of the list of key ids (an address over its budget presented an id not yet
    /// seen; at most one every [`LIST_REFRESH`]).
    pub list_reads: AtomicU64,
}

impl LookupStats {
    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A fixed-size cache of ids storage has no key for, each trusted for `ttl`; when full,
/// the oldest entry makes room.
#[derive(Debug)]
pub struct NegativeCache {
    capacity: usize,
    entries: HashMap<String, Instant>,
    order: VecDeque<String>,
}

impl NegativeCache {
    /// An empty cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        NegativeCache {
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `id` was found absent less than `ttl` ago.
    pub fn contains(&self, id: &str, ttl: Duration) -> bool {
        self.entries.get(id).is_some_and(|at| at.elapsed() < ttl)
    }

    /// Remembers that `id` is absent, forgetting the oldest entry when full.
    pub fn insert(&mut self, id: &str) {
        if let Some(at) = self.entries.get_mut(id) {
            *at = Instant::now();
            return;
        }
        while self.entries.len() >= self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.entries.remove(&old);
                }
                None => break,
            }
        }
        self.entries.insert(id.to_owned(), Instant::now());
        self.order.push_back(id.to_owned());
        if self.order.len() > 2 * self.capacity {
            // Ids removed by `remove` linger in the order; drop them now and then.
            let entries = &self.entries;
            self.order.retain(|id| entries.contains_key(id));
        }
    }

    /// Forgets `id` (a key with this id was just made).
    pub fn remove(&mut self, id: &str) {
        self.entries.remove(id);
    }
}

/// The ids of keys that exist in storage, as this node has seen them: each key row it read,
/// each key made here, and the whole list read from storage when an address over its budget
/// presents an id not in it ([`LIST_REFRESH`] apart at least). Holds only ids of real keys,
/// so it is bounded by the keys an admin made, never by what a client sends.
#[derive(Debug, Default)]
pub struct KeyList {
    ids: HashSet<String>,
    read_at: Option<Instant>,
}

impl KeyList {
    /// Whether `id` is a key's id, as far as this node knows.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// Records that a key with this id exists.
    pub fn insert(&mut self, id: &str) {
        if !self.ids.contains(id) {
            self.ids.insert(id.to_owned());
        }
    }

    /// Whether the list was read from storage less than [`LIST_REFRESH`] ago.
    pub fn fresh(&self) -> bool {
        self.read_at.is_some_and(|at| at.elapsed() < LIST_REFRESH)
    }

    /// Replaces the ids with the list just read from storage.
    pub fn replace(&mut self, ids: impl IntoIterator<Item = String>) {
        self.ids = ids.into_iter().collect();
        self.read_at = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_negative_cache_keeps_its_bound_and_forgets_the_oldest_first() {
        let mut cache = NegativeCache::new(8);
        let ttl = Duration::from_secs(60);
        for i in 0..100 {
            cache.insert(&format!("{i:x}"));
            assert!(cache.len() <= 8);
        }
        assert!((92..100).all(|i| cache.contains(&format!("{i:x}"), ttl)));
        assert!(!cache.contains("0", ttl));
        cache.remove("63");
        assert!(!cache.contains("63", ttl));
        for i in 0..1_000 {
            cache.insert(&format!("{i:x}"));
            cache.remove(&format!("{i:x}"));
        }
        assert!(cache.order.len() <= 16, "{}", cache.order.len());
    }

    #[test]
    fn only_short_lowercase_hex_ids_are_well_formed() {
        assert!(well_formed_id("0123456789abcdef"));
        for bad in ["", "ABCDEF", "0123456789abcdefg", &"a".repeat(33), "x-1"] {
            assert!(!well_formed_id(bad), "{bad:?}");
        }
    }
}
