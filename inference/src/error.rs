//! The crate's error type.
//!
//! Every failure here is ours, not the client's: a caller that maps these errors to HTTP
//! answers 5xx (503 for a missing model or device, since the node cannot serve embeddings
//! until an operator fixes it; 500 otherwise). Texts are never rejected: over-long inputs are
//! truncated to the model's maximum length.

use std::path::PathBuf;

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

    /// The configuration asks for a CUDA device that this machine does not have: ours (503).
    #[error("cuda device {index} is not available (this machine has {available})")]
    DeviceUnavailable {
        /// The device asked for.
        index: usize,
        /// How many CUDA devices libtorch sees.
        available: usize,
    },
}
