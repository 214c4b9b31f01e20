//! Engram's storage: an ordered key-value seam with serializable transactions (modelled on
//! FoundationDB), its backends, the keyspace, and the typed data layer above it.
//!
//! Layers, bottom up:
//! - [`kv`]: the seam. [`kv::Engine`] / [`kv::EngineTxn`] are implemented by [`sqlite`] (the
//!   embedded default) and `fdb` (cargo feature `fdb`); callers use [`Txn`], which enforces
//!   FoundationDB's size limits for every backend.
//! - [`Store`]: runs a closure as a transaction on a blocking thread, retrying conflicts and
//!   busy errors with backoff up to a bound. On SQLite, concurrent `Store::run` transactions
//!   share one durable commit ([`sqlite::GroupCommit`]).
//! - [`keyspace`] and [`codec`]: tuple-encoded keys under a root prefix and versioned values.
//! - [`data`] and [`cluster`]: typed reads and writes of users' memory and of cluster rows.
//!
//! Architecture invariants:
//! - This is the only crate that talks to SQLite or FoundationDB. It knows nothing of actors,
//!   HTTP, JSON wire types or configuration files.
//! - Every operation runs inside a caller-supplied transaction; nothing here holds a
//!   transaction open across anything but storage calls (never across inference or network).
//! - Time is always passed in ([`types::Timestamp`]); this crate never reads a clock for data.

pub mod access;
pub mod cluster;
pub mod codec;
pub mod crypto;
pub mod data;
mod error;
#[cfg(feature = "fdb")]
pub mod fdb;
mod idempotency;
pub mod keyspace;
pub mod kv;
pub mod schema;
pub mod shared;
pub mod sqlite;
mod store;
pub mod types;
pub mod vector;

pub use error::{Error, Outcome, Result};
pub use keyspace::{KeyRange, Keyspace, WorkQueue};
pub use kv::{Limits, RangeOptions, Txn, TxnMode};
pub use store::{RetryPolicy, Store, StoreStats};

use std::sync::Arc;

impl Store {
    /// Opens the SQLite store at `path`.
    pub fn sqlite(path: &std::path::Path, options: sqlite::SqliteOptions) -> Result<Store> {
        Ok(Store::new(Arc::new(sqlite::SqliteEngine::open(
            path, options,
        )?)))
    }

    /// Opens the SQLite store at `path` with the given group commit
    /// ([`sqlite::GroupCommit::off`] makes every transaction commit on its own).
    pub fn sqlite_with(
        path: &std::path::Path,
        options: sqlite::SqliteOptions,
        group_commit: sqlite::GroupCommit,
    ) -> Result<Store> {
        Ok(Store::new(Arc::new(sqlite::SqliteEngine::open_with(
            path,
            options,
            group_commit,
        )?)))
    }

    /// A private in-memory SQLite store, for unit tests.
    pub fn in_memory() -> Result<Store> {
        Ok(Store::new(Arc::new(sqlite::SqliteEngine::in_memory()?)))
    }
}

#[cfg(feature = "fdb")]
impl Store {
    /// Connects to FoundationDB.
    pub fn fdb(options: fdb::FdbOptions) -> Result<Store> {
        Ok(Store::new(Arc::new(fdb::FdbEngine::open(options)?)))
    }
}
