//! The pipeline's memory of which users have pending inference: a bounded, fair queue of user
//! keys (never texts: rounds read those from storage).
//!
//! - Fairness: one FIFO of users per tenant, and rounds take one user of each tenant in turn,
//!   so a tenant with ten thousand users waiting delays another tenant's user by at most one
//!   of its users per round.
//! - Bound: at most `capacity` users queued; a user beyond it is not held
//!   ([`Work::overflowed`] says so), and the next storage scan finds it in the work index.
//! - A user in a round is not queued again until the round ends; a notification meanwhile
//!   marks it to be queued again then (its new entries were written after the round read).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use engram_storage::types::Timestamp;

use crate::placement::UserKey;

/// The queue (see the module docs).
#[derive(Debug)]
pub(crate) struct Work {
    capacity: usize,
    lanes: HashMap<Arc<str>, VecDeque<UserKey>>,
    /// Tenants with users queued, the next to serve first; each appears once.
    turn: VecDeque<Arc<str>>,
    /// Queued users and when their oldest entry was queued.
    queued: HashMap<UserKey, Timestamp>,
    /// Users in a round, and when their oldest entry was queued.
    in_round: HashMap<UserKey, Timestamp>,
    /// Users in a round that were notified again meanwhile.
    again: HashSet<UserKey>,
    overflowed: bool,
}

impl Work {
    /// An empty queue of at most `capacity` users (at least 1).
    pub(crate) fn new(capacity: usize) -> Work {
        Work {
            capacity: capacity.max(1),
            lanes: HashMap::new(),
            turn: VecDeque::new(),
            queued: HashMap::new(),
            in_round: HashMap::new(),
            again: HashSet::new(),
            overflowed: false,
        }
    }

    /// Notes that `key` has entries queued since `since`. Returns false when the queue is full
    /// and the user was not held.
    pub(crate) fn push(&mut self, key: UserKey, since: Timestamp) -> bool {
        if let Some(at) = self.in_round.get_mut(&key) {
            *at = (*at).min(since);
            self.again.insert(key);
            return true;
        }
        if let Some(at) = self.queued.get_mut(&key) {
            *at = (*at).min(since);
            return true;
        }
        if self.queued.len() >= self.capacity {
            self.overflowed = true;
            return false;
        }
        let tenant: Arc<str> = Arc::from(key.tenant.as_str());
        let lane = self.lanes.entry(Arc::clone(&tenant)).or_default();
        if lane.is_empty() {
            self.turn.push_back(tenant);
        }
        lane.push_back(key.clone());
        self.queued.insert(key, since);
        true
    }

    /// Takes up to `n` users for a round, one of each tenant in turn.
    pub(crate) fn take(&mut self, n: usize) -> Vec<(UserKey, Timestamp)> {
        let mut taken = Vec::new();
        while taken.len() < n {
            let Some(tenant) = self.turn.pop_front() else {
                break;
            };
            let Some(lane) = self.lanes.get_mut(&tenant) else {
                continue;
            };
            let Some(key) = lane.pop_front() else {
                self.lanes.remove(&tenant);
                continue;
            };
            if lane.is_empty() {
                self.lanes.remove(&tenant);
            } else {
                self.turn.push_back(tenant);
            }
            let since = self.queued.remove(&key).unwrap_or(Timestamp(i64::MAX));
            self.in_round.insert(key.clone(), since);
            taken.push((key, since));
        }
        taken
    }

    /// Ends `key`'s round: queued again when it has entries left (`left`, since when) or was
    /// notified during the round.
    pub(crate) fn finish(&mut self, key: &UserKey, left: Option<Timestamp>) {
        let since = self.in_round.remove(key);
        let again = self.again.remove(key);
        match (left, again) {
            (Some(at), _) => {
                self.push(key.clone(), at);
            }
            (None, true) => {
                self.push(key.clone(), since.unwrap_or(Timestamp(i64::MAX)));
            }
            (None, false) => {}
        }
    }

    /// Drops `key` (forgotten, or its shard is not this node's): its entries, if any, are
    /// found again in storage by whoever serves it.
    pub(crate) fn remove(&mut self, key: &UserKey) {
        self.again.remove(key);
        if self.queued.remove(key).is_some()
            && let Some(lane) = self.lanes.get_mut(key.tenant.as_str())
        {
            lane.retain(|k| k != key);
            if lane.is_empty() {
                self.lanes.remove(key.tenant.as_str());
                self.turn.retain(|t| **t != *key.tenant);
            }
        }
    }

    /// Whether a user was not held since the last [`Work::clear_overflow`].
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Records that users are left in storage (a scan had no room for them).
    pub(crate) fn mark_overflow(&mut self) {
        self.overflowed = true;
    }

    /// Forgets that users were not held (a scan is about to find them).
    pub(crate) fn clear_overflow(&mut self) {
        self.overflowed = false;
    }

    /// Room for more users.
    pub(crate) fn room(&self) -> usize {
        self.capacity.saturating_sub(self.queued.len())
    }

    /// Users queued.
    pub(crate) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Users in rounds.
    pub(crate) fn in_round(&self) -> usize {
        self.in_round.len()
    }

    /// Whether `key` is queued or in a round.
    pub(crate) fn knows(&self, key: &UserKey) -> bool {
        self.queued.contains_key(key) || self.in_round.contains_key(key)
    }

    /// When the oldest entry this queue knows of was queued.
    pub(crate) fn oldest(&self) -> Option<Timestamp> {
        self.queued
            .values()
            .chain(self.in_round.values())
            .copied()
            .filter(|t| t.0 != i64::MAX)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tenant: &str, user: &str) -> UserKey {
        UserKey::new(tenant, user)
    }

    #[test]
    fn rounds_take_one_user_of_each_tenant_in_turn() {
        let mut work = Work::new(100);
        for i in 0..5 {
            work.push(key("noisy", &format!("u{i}")), Timestamp(i));
        }
        work.push(key("quiet", "q"), Timestamp(10));
        let taken: Vec<String> = work
            .take(3)
            .into_iter()
            .map(|(k, _)| format!("{}/{}", k.tenant, k.user))
            .collect();
        assert_eq!(taken, ["noisy/u0", "quiet/q", "noisy/u1"]);
        assert_eq!((work.queued(), work.in_round()), (3, 3));
        assert_eq!(work.oldest(), Some(Timestamp(0)));
    }

    #[test]
    fn a_full_queue_holds_no_more_users_and_says_so() {
        let mut work = Work::new(2);
        assert!(work.push(key("t", "a"), Timestamp(1)));
        assert!(work.push(key("t", "b"), Timestamp(2)));
        assert!(
            work.push(key("t", "a"), Timestamp(0)),
            "a known user is no new entry"
        );
        assert!(!work.push(key("t", "c"), Timestamp(3)));
        assert!(work.overflowed());
        assert_eq!(work.room(), 0);
        assert_eq!(work.oldest(), Some(Timestamp(0)));
    }

    #[test]
    fn a_user_notified_during_its_round_is_queued_again_after_it() {
        let mut work = Work::new(10);
        work.push(key("t", "a"), Timestamp(1));
        work.push(key("t", "b"), Timestamp(1));
        let round = work.take(10);
        assert_eq!(round.len(), 2);
        assert!(work.push(key("t", "a"), Timestamp(5)));
        assert_eq!(work.queued(), 0, "not queued twice while in its round");
        work.finish(&key("t", "a"), None);
        work.finish(&key("t", "b"), None);
        assert_eq!(work.queued(), 1);
        assert!(work.knows(&key("t", "a")) && !work.knows(&key("t", "b")));
        // Entries left after a round keep the user queued, with their time.
        let round = work.take(10);
        work.finish(&round[0].0, Some(Timestamp(7)));
        assert_eq!(work.oldest(), Some(Timestamp(7)));
        work.remove(&key("t", "a"));
        assert_eq!((work.queued(), work.take(10).len()), (0, 0));
    }
}
