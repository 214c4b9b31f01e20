//! The users of a tenant, listed in key order for the admin console.
//!
//! Nothing indexes users apart from their data: a user exists while some key of theirs sits
//! under `("u", tenant, user)`, and forgetting one clears that prefix. So a page is a skip
//! scan: each step reads the first key at or after the cursor within the tenant's users
//! (one key), decodes the user id from it, and continues after that user's whole prefix. A
//! page of `limit` users costs `limit + 1` single-key range reads, however much each user
//! holds; it reads no value it keeps and opens nothing sealed.
//!
//! Not here: what a user's data is ([`super::UserData`]), nor who may list users.

use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::kv::{RangeOptions, Txn};

/// A page of a tenant's user ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsersPage {
    /// User ids in key order (byte order of their tuple encoding, which for ids without NUL
    /// is their UTF-8 byte order).
    pub users: Vec<String>,
    /// The cursor of the next page (the last id of this one) when more users follow.
    pub next: Option<String>,
}

/// Up to `limit` users of `tenant` after the user id `after` (exclusive; from the first when
/// `None`), with the cursor of the next page.
pub fn page(
    txn: &mut Txn,
    keyspace: &Keyspace,
    tenant: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<UsersPage> {
    let range = keyspace.tenant_users(tenant);
    let mut begin = match after {
        Some(user) => keyspace.user(tenant, user).all().end,
        None => range.begin.clone(),
    };
    let mut users = Vec::new();
    loop {
        let first = txn.get_range(&begin, &range.end, RangeOptions::first(1))?;
        let Some((key, _)) = first.first() else {
            return Ok(UsersPage { users, next: None });
        };
        if users.len() == limit {
            let next = users.last().cloned();
            return Ok(UsersPage { users, next });
        }
        let (_, user) = keyspace
            .parse_user_key(key)
            .ok_or_else(|| crate::Error::Decode {
                what: "user key",
                reason: "not a key under a user's prefix".into(),
            })?;
        begin = keyspace.user(tenant, &user).all().end;
        users.push(user);
    }
}
