//! Engram's actors: per-user memory actors, shard regions, placement and membership, and the
//! memory model (formation, conflicts, decay, context assembly).
//!
//! Architecture invariants:
//! - Depends on `storage` and `inference`, never on `node`; knows no HTTP or JSON wire types.
//! - A user actor's state is a cache of storage: killing any actor or node at any moment loses
//!   no acknowledged write.
//! - Per-user actors stay local to their node; only the shard-region actor is remote-capable.

pub mod model;
