//! The actors crate's error type. Each variant says whose fault it is; the gateway maps them
//! to HTTP statuses with an exhaustive match.

/// Result of actor operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong handling a user's request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed (the caller's fault, 400).
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// The user, session or memory does not exist (the caller's fault, 404).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// The node cannot take more work now (ours, 503 with Retry-After).
    #[error("overloaded: {0}")]
    Overloaded(String),

    /// This node does not serve the user's shard now: another node holds it, it is moving, or
    /// this node could not confirm its leases in time (503: retry, on the owner).
    #[error("not the owner: {0}")]
    NotOwner(String),

    /// The user's actor could not be reached (ours, 503: retry with the same request id).
    #[error("unavailable: {0}")]
    Unavailable(String),

    /// Storage failed (ours; the storage error says whether a retry may help).
    #[error("storage: {0}")]
    Storage(#[from] engram_storage::Error),

    /// A stored value is inconsistent with the model (ours, 500).
    #[error("internal: {0}")]
    Internal(String),
}

impl Error {
    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}
