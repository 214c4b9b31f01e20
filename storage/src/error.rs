//! The storage crate's one error type.
//!
//! Each variant says whether it is the caller's fault (maps to 4xx at the gateway) or ours
//! (5xx). Expected outcomes such as "not found" are `Option`s, not errors; the one exception is
//! [`Error::Fenced`], which must abort the transaction that observed it and is therefore an error.

use std::time::Duration;

/// Result of storage operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong below the storage seam.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another transaction committed a conflicting write first (ours, 5xx if it persists).
    /// Retryable: [`crate::Store::run`] retries it.
    #[error("transaction conflict")]
    Conflict,

    /// The store is locked by another writer or process for longer than the busy timeout
    /// (ours, 503). Retryable: [`crate::Store::run`] retries it.
    #[error("store busy")]
    Busy,

    /// The retry bound of [`crate::Store::run`] was reached (ours, 503).
    #[error("transaction gave up after {attempts} attempts in {elapsed:?}: {last}")]
    RetriesExhausted {
        /// How many attempts were made.
        attempts: u32,
        /// Time spent from the first attempt to giving up.
        elapsed: Duration,
        /// The error of the last attempt.
        last: Box<Error>,
    },

    /// A key longer than FoundationDB allows (the caller's fault, 400).
    #[error("key of {len} bytes exceeds the limit of {limit} bytes")]
    KeyTooLarge {
        /// Length of the offending key.
        len: usize,
        /// The limit.
        limit: usize,
    },

    /// A value longer than FoundationDB allows (the caller's fault, 400).
    #[error("value of {len} bytes exceeds the limit of {limit} bytes")]
    ValueTooLarge {
        /// Length of the offending value.
        len: usize,
        /// The limit.
        limit: usize,
    },

    /// The transaction's mutations exceed FoundationDB's transaction size limit
    /// (the caller's fault, 400: split the write).
    #[error("transaction of {size} bytes exceeds the limit of {limit} bytes")]
    TransactionTooLarge {
        /// Bytes written so far, including the mutation that crossed the limit.
        size: usize,
        /// The limit.
        limit: usize,
    },

    /// A write was attempted in a read-only transaction (a bug of ours, 500).
    #[error("write in a read-only transaction")]
    ReadOnly,

    /// The transaction is fenced: the shard's lease row no longer names this owner and epoch.
    /// An expected outcome during hand-off (503 with retry); the transaction was aborted and
    /// nothing it wrote is visible.
    #[error(
        "shard {shard} is fenced: lease held by {holder:?} at epoch {holder_epoch}, we had epoch {epoch}"
    )]
    Fenced {
        /// The shard.
        shard: u32,
        /// The epoch this writer believed it held.
        epoch: u64,
        /// The owner named in storage, if any.
        holder: Option<String>,
        /// The epoch in storage (0 if the row is absent).
        holder_epoch: u64,
    },

    /// A stored value could not be decoded (ours, 500: corrupt data or a missing migration).
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded (a value kind or a key).
        what: &'static str,
        /// Why it failed.
        reason: String,
    },

    /// A value could not be encoded (ours, 500).
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },

    /// The key service could not wrap, unwrap or key an anchor, e.g. an external KMS that is
    /// unreachable or refuses (ours, 503: a later retry may succeed; [`crate::Store::run`]
    /// does not retry it).
    #[error("key service: {0}")]
    KeyService(String),

    /// The store could not be opened or configured (ours or the operator's, 500).
    #[error("cannot open store: {0}")]
    Open(String),

    /// The store's disk is full (507: nothing of the transaction was written; writes may
    /// succeed once space returns, reads go on). [`crate::Store::run`] does not retry it.
    #[error("the store's disk is full: {0}")]
    Full(String),

    /// The store's disk failed to write or sync (503: nothing of the transaction was
    /// acknowledged; a later retry with the same request id may succeed).
    /// [`crate::Store::run`] does not retry it.
    #[error("the store's disk failed: {0}")]
    Io(String),

    /// SQLite reported an error that is not a conflict or busy condition (ours, 500).
    #[error("sqlite: {0}")]
    Sqlite(rusqlite::Error),

    /// FoundationDB reported a non-retryable error (ours, 500).
    #[cfg(feature = "fdb")]
    #[error("foundationdb: {0}")]
    Fdb(String),

    /// A blocking storage task was cancelled or panicked (ours, 500).
    #[error("storage task failed: {0}")]
    Task(String),
}

/// What a storage failure means to the client whose request hit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A key, value or transaction over the size limits (the client's, 400).
    TooLarge,
    /// Busy, conflicting, or fenced away: a retry with the same request id may succeed (503).
    Busy,
    /// The key service failed (503: a later retry may succeed).
    KeyService,
    /// The store's disk is full (507: a later retry may succeed once space returns).
    Full,
    /// The store's disk failed to write or sync (503: a later retry may succeed).
    Io,
    /// Ours (500).
    Internal,
}

impl Error {
    /// What this failure means to the client.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::KeyTooLarge { .. }
            | Error::ValueTooLarge { .. }
            | Error::TransactionTooLarge { .. } => Outcome::TooLarge,
            Error::Conflict
            | Error::Busy
            | Error::RetriesExhausted { .. }
            | Error::Fenced { .. } => Outcome::Busy,
            Error::KeyService(_) => Outcome::KeyService,
            Error::Full(_) => Outcome::Full,
            Error::Io(_) => Outcome::Io,
            Error::ReadOnly
            | Error::Decode { .. }
            | Error::Encode { .. }
            | Error::Open(_)
            | Error::Sqlite(_)
            | Error::Task(_) => Outcome::Internal,
            #[cfg(feature = "fdb")]
            Error::Fdb(_) => Outcome::Internal,
        }
    }

    /// Whether a fresh attempt of the same transaction may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Conflict | Error::Busy => true,
            Error::RetriesExhausted { .. }
            | Error::KeyTooLarge { .. }
            | Error::ValueTooLarge { .. }
            | Error::TransactionTooLarge { .. }
            | Error::ReadOnly
            | Error::Fenced { .. }
            | Error::Decode { .. }
            | Error::Encode { .. }
            | Error::KeyService(_)
            | Error::Full(_)
            | Error::Io(_)
            | Error::Open(_)
            | Error::Sqlite(_)
            | Error::Task(_) => false,
            #[cfg(feature = "fdb")]
            Error::Fdb(_) => false,
        }
    }
}
