//! Why a read ranked without its query's vector: the reason a context or a search reports,
//! and the metrics count, when the query's embedding did not come in time or at all.

use serde::{Deserialize, Serialize};

/// Why a read ranked without its query's vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// The embedding did not come within the query deadline.
    Deadline,
    /// The pool refused the query (its queue, or the tenant's share, was full).
    Overloaded,
    /// The pool is closed or failed.
    Unavailable,
}

impl Fallback {
    /// The name used in responses and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Deadline => "deadline",
            Fallback::Overloaded => "overloaded",
            Fallback::Unavailable => "unavailable",
        }
    }
}
