//! The narrow handle that user and tenant actors, and their shard supervisors, have on the
//! node's table of live actors. The table is the directory's ([`crate::directory`], above
//! them): an actor learns through this handle whether it may stop to make room, and says
//! that it stopped; a supervisor says that it restarted one. Neither can reach the directory
//! itself, nor the router above it.

use std::fmt;

use ractor::{ActorCell, ActorId};

use crate::placement::UserKey;

/// The node's table of live user actors, as the actors under it see it.
pub trait Roster: Send + Sync + fmt::Debug {
    /// Whether `key`'s actor, asked to stop to make room for another, may stop: it was not
    /// used since it was chosen. If it was, it stays and may be chosen again.
    fn evictable(&self, key: &UserKey) -> bool;

    /// Actor `id` of `key` stopped: it is forgotten, if it is still the one listed.
    fn left(&self, key: &UserKey, id: ActorId);

    /// `key`'s actor failed and its supervisor started `actor` in its place.
    fn restarted(&self, key: UserKey, actor: ActorCell);
}
