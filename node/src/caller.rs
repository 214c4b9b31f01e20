//! Who a request comes from, as it travels with the request: the [`Caller`] that
//! authentication (`http/middleware/auth.rs`, by [`crate::auth`]) puts on it, and the slot
//! ([`AuditedUser`]) in which its handler names the user it asks about for the audit trail
//! ([`crate::audit`]). A leaf, so that the authentication and the audit trail can both name
//! the caller without knowing each other.

use std::sync::{Arc, Mutex};

use engram_actors::front::Credential;
use engram_storage::access::Scope;

/// Who is calling: a key (or the root), its scope, and the tenant it acts for.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Key id (`root` for the configured admin key).
    pub principal: String,
    /// The key's scope.
    pub scope: Scope,
    /// Whether this is the configured admin key (admin of every tenant, and operator).
    pub root: bool,
    /// The tenant the request acts for.
    pub tenant: String,
    /// The client's address, as the node that accepted the connection saw it.
    pub client: Option<String>,
    /// The user the request asks about, once its handler names it (for its audit entry).
    pub audited: AuditedUser,
    /// The bearer token the client presented, which travels with a request to the user's
    /// owner on another node, for it to authenticate the caller itself.
    pub credential: Option<Credential>,
}

/// The user a request asked about, as its handler named it: the handler knows where a request
/// names its user (the path, or the seed API's query string or body), the audit middleware
/// does not. One slot per request, shared by the clones of the request's [`Caller`]; the
/// middleware reads it after the handler ran.
#[derive(Clone, Default)]
pub struct AuditedUser(Arc<Mutex<Option<String>>>);

impl AuditedUser {
    /// Records that the request asks about `user` (the last one named wins).
    pub fn set(&self, user: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(user.to_owned());
    }

    /// The user the handler named, if it named one.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl std::fmt::Debug for AuditedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A user id is never printed; the trail holds its pseudonym.
        f.write_str("AuditedUser(..)")
    }
}
