//! The node's error type: why the process could not start or stop cleanly.
//!
//! These errors end the process with a non-zero status; `main` prints them. Request-level
//! errors of the gateway (4xx / 5xx) will get their own type when the gateway exists.

use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;

/// Result of the node's start-up and shutdown steps.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the node could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot be loaded or is invalid (the operator's to fix).
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// A secret the node needs is missing or unusable (the operator's to fix): the admin key.
    #[error("{0}")]
    Secret(String),

    /// A log filter (from `log.level` or `RUST_LOG`) does not parse (the operator's to fix).
    #[error("{origin} = {value:?} is not a log filter: {reason}")]
    LogFilter {
        /// Where the filter came from: `log.level` or `RUST_LOG`.
        origin: &'static str,
        /// The filter as written.
        value: String,
        /// Why it does not parse.
        reason: String,
    },

    /// The log subscriber could not be installed (ours: one was installed already).
    #[error("cannot install the log subscriber: {0}")]
    LogInit(String),

    /// A storage step failed: opening the store, the start-up self-check, or the
    /// membership writes (the store's or the operator's: permissions, disk, cluster file).
    #[error("{step}: {source}")]
    Storage {
        /// What the node was doing.
        step: &'static str,
        /// The storage error.
        source: engram_storage::Error,
    },

    /// A local I/O step failed: creating the data directory, installing signal handlers, or
    /// starting the runtime.
    #[error("{step}: {source}")]
    Io {
        /// What the node was doing.
        step: String,
        /// The I/O error.
        source: io::Error,
    },

    /// A file the configuration names (the cluster cookie, a certificate, a private key, a
    /// CA) is missing, unreadable, open to group or others, or malformed (the operator's to
    /// fix). The message names the key and the path, never the file's contents.
    #[error("{key} {}: {reason}", path.display())]
    File {
        /// The setting that names the file (`cluster.cookie-file`).
        key: &'static str,
        /// The file, as resolved against `node.data-dir`.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The embedding pool could not start (the operator's: models not installed, or a CUDA
    /// device named that is not there). The message says what to do.
    #[error("starting the embedding pool: {0}")]
    Inference(#[from] engram_inference::Error),

    /// The lease protocol failed at start-up or shutdown (storage, usually).
    #[error("cluster: {0}")]
    Cluster(String),

    /// The start-up self-check read back something other than what it wrote (ours or the
    /// store's: the node does not start on a store it cannot trust).
    #[error("storage self-check failed: {0}")]
    SelfCheck(String),

    /// An operator command that does not apply to this configuration (the operator's: the
    /// message says what to use instead).
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    /// Wraps a storage error with the step that failed.
    pub fn storage(step: &'static str) -> impl FnOnce(engram_storage::Error) -> Error {
        move |source| Error::Storage { step, source }
    }
}
