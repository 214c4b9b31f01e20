//! Engram's actors: per-user memory actors under per-shard supervisors, the node's directory
//! of them, and the memory model (formation, conflicts, decay, context assembly).
//!
//! Everything a user's memory can be asked goes through one door, [`front::Users`]: typed,
//! serialisable requests with the reader asking, served by the local actor or sent to the
//! owner of the user's shard through a peer link the node implements.
//!
//! Architecture invariants:
//! - Depends on `storage` and `inference`, never on `node`; knows no HTTP or JSON wire types.
//! - A user actor's state is a cache of storage: killing any actor or node at any moment loses
//!   no acknowledged write.
//! - All writes of a user go through that user's actor, one at a time, each one storage
//!   transaction that also records its request id, acknowledged only after the commit.
//! - Per-user actors stay local to their node; only the node's shard-region actor (in `node`)
//!   is remote-capable. A node writes a user only under its shard's lease, fenced by epoch
//!   ([`ownership`], which the lease round in [`cluster`] fills in; ownership imports neither
//!   the round nor the directory).
//! - Embeddings come from the node's pool ([`embed::Embedder`]), never inside a write
//!   transaction: after the commit, through the durable pipeline ([`pipeline`]), or (without
//!   one) before the transaction starts; a node without a pool ranks by words and priors alone.
//! - Time comes from the injected [`clock::Clock`]; no process-global state of ours.
//! - The modules form a stack, each importing only those below it (docs/architecture.md,
//!   "Layering"; `tests/tests/layering.rs` holds it): the router [`front`] above the handles
//!   and rounds that use the directory ([`admin`], [`cluster`], [`jobs`], [`dispatch`]),
//!   above [`directory`], above [`supervisor`], above the [`tenant`] and [`user`] actors,
//!   above [`services`] and the leaves ([`request`], [`model`], ...). The actors reach the
//!   directory only through the narrow [`roster::Roster`].

pub mod admin;
pub mod breaker;
pub mod clock;
pub mod cluster;
pub mod directory;
pub mod dispatch;
pub mod distillation;
pub mod embed;
mod error;
pub mod front;
pub mod jobs;
pub mod model;
pub mod ownership;
pub mod pipeline;
pub mod placement;
pub mod request;
pub mod rerank;
pub mod roster;
pub mod services;
pub mod supervisor;
pub mod tenant;
pub mod user;

pub use error::{Error, Result};
