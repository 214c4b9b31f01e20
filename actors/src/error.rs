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
        field: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The user, session or memory does not exist (the caller's fault, 404).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// The reader may not ask this of the user: an admin-only request from a gateway or
    /// operator key, or a key of another tenant (the caller's fault, 403).
    #[error("forbidden: {0}")]
    Forbidden(String),

    /// The sensitive-read breaker refuses this principal's further sensitive reads of the user
    /// until an admin approves (the caller's, 403 `approval_required`).
    #[error("{reads} sensitive reads of this user by this key in the window already")]
    ApprovalRequired {
        /// Sensitive reads counted within the window.
        reads: u32,
    },

    /// A value or the write as a whole is over the store's size limits, as the owner of the
    /// user reported it (the caller's fault, 400 `too_large`).
    #[error("too large: {0}")]
    TooLarge(String),

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
    pub fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}
