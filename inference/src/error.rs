//! The crate's error type.
//!
//! Every failure here is ours, not the client's: a caller that maps these errors to HTTP
//! answers 5xx (503 for a missing model or device, an overloaded or closed pool, since the
//! node cannot serve embeddings now but may soon; 500 otherwise). Texts are never rejected:
//! over-long inputs are truncated to the model's maximum length.

use std::path::PathBuf;
use std::sync::Arc;

/// The result of this crate's fallible operations.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong while loading or running an encoder.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model file is not installed where the configuration points: ours (503); the
    /// operator runs `.ci/models`, which installs the pinned models and checks their hashes.
    #[error(
        "model file {} is missing: run .ci/models to install the pinned models \
         (under ENGRAM_CACHE, default ~/.cache/engram)",
        path.display()
    )]
    ModelMissing {
        /// The file that was looked for.
        path: PathBuf,
    },

    /// A model file exists but could not be read: ours (500).
    #[error("cannot read model file {}", path.display())]
    Io {
        /// The file that was read.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// A model file or its configuration is malformed, or does not describe the model the
    /// encoder expects: ours (500).
    #[error("malformed model file {}: {reason}", path.display())]
    Format {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The tokenizer could not be loaded or failed on a text: ours (500).
    #[error("tokenizer failed while {action}")]
    Tokenizer {
        /// What the tokenizer was doing.
        action: &'static str,
        /// The tokenizers crate's error.
        #[source]
        source: tokenizers::Error,
    },

    /// libtorch failed: ours (500).
    #[error("libtorch failed")]
    Torch(#[from] tch::TchError),

    /// libtorch's quantized operators failed to pack or apply an int8 or float16 layer, or a
    /// precision was asked of a model that does not take it: ours (500). The message is
    /// libtorch's or ours (shapes, kinds and names, never data).
    #[error("packed linear layer: {0}")]
    Quantise(String),

    /// The configuration asks for a CUDA device that this machine does not have: ours (503).
    #[error("cuda device {index} is not available (this machine has {available})")]
    DeviceUnavailable {
        /// The device asked for.
        index: usize,
        /// How many CUDA devices libtorch sees.
        available: usize,
    },

    /// A pool's queue is full and the request was shed instead of queued: ours,
    /// 503 (the caller may retry after a pause, ideally with backoff).
    #[error("inference pool overloaded: {queued} queued, capacity {capacity}")]
    Overloaded {
        /// Texts waiting when the request arrived.
        queued: usize,
        /// The queue's capacity in texts.
        capacity: usize,
    },

    /// A generation stopped at its token bound before its answer was whole: ours, 500.
    #[error("generation stopped after {tokens} tokens without a whole answer")]
    Unfinished {
        /// Tokens generated.
        tokens: usize,
    },

    /// A pool is shutting down or has stopped, or a message to one of its actors could not
    /// be delivered: ours, 503 (another node, or this one after a restart, serves).
    #[error("inference pool is closed")]
    PoolClosed,

    /// The request's expiry passed while it waited in the queue (its caller had stopped
    /// waiting), so it was skipped rather than embedded: ours, 503.
    #[error("inference request expired before its answer")]
    Expired,

    /// The worker running this request's batch died (a panic in the forward pass): ours, 500.
    #[error("embedding worker failed")]
    WorkerFailed,

    /// The forward pass of this request's batch failed; every request in the batch gets the
    /// same shared error: ours, 500.
    #[error("embedding batch failed")]
    BatchFailed(#[source] Arc<Error>),

    /// The pool's actors could not be spawned: ours, 500.
    #[error("cannot start the embedding pool: {reason}")]
    PoolStart {
        /// ractor's spawn error, as text.
        reason: String,
    },
}
