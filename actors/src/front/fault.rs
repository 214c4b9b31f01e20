//! A deliberately broken front door, for the chaos tests to show that their history checker
//! catches what a final-state check misses. In a debug build whose node runs with
//! `ENGRAM_FAULT=stale-reads`, the front door keeps the last answer to each read it served as
//! its user's owner and, once the shard has moved to another node, answers the same read from
//! that copy instead of asking the new owner: a node serving reads from a stale cache after
//! losing its shard. Writes are untouched, so every acknowledged write is still stored once and
//! in order. A release build never turns it on, whatever its environment.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::Result;
use crate::placement::UserKey;
use crate::request::{UserReply, UserRequest};

/// The environment variable that turns the fault on in a debug build.
pub const FAULT_ENV: &str = "ENGRAM_FAULT";

/// Answers to reads served as owner, by user and request.
#[derive(Debug, Default)]
pub(super) struct StaleReads(Mutex<HashMap<String, UserReply>>);

impl StaleReads {
    /// The cache, when this is a debug build asked for the fault.
    pub(super) fn from_env() -> Option<Self> {
        let asked = std::env::var(FAULT_ENV).is_ok_and(|v| v == "stale-reads");
        if cfg!(debug_assertions) && asked {
            tracing::warn!("deliberately broken build: reads are answered from a stale cache");
            Some(StaleReads::default())
        } else {
            None
        }
    }

    fn key(user: &UserKey, request: &UserRequest) -> Option<String> {
        (!request.writes()).then(|| format!("{user:?} {request:?}"))
    }

    /// Keeps `reply` to a read served as owner.
    pub(super) fn remember(
        &self,
        user: &UserKey,
        request: &UserRequest,
        reply: &Result<UserReply>,
    ) {
        if let (Some(key), Ok(reply)) = (Self::key(user, request), reply) {
            self.0.lock().unwrap().insert(key, reply.clone());
        }
    }

    /// The answer kept for the same read, if any.
    pub(super) fn recall(&self, user: &UserKey, request: &UserRequest) -> Option<UserReply> {
        let key = Self::key(user, request)?;
        self.0.lock().unwrap().get(&key).cloned()
    }
}
