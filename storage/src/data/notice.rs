//! Compliance notices: what the memory model tells a tenant it did under a protection rule
//! (a distilled intent that holds a health condition was protected), listed for the tenant's
//! admins in time order at `("notice", tenant, at, id)`.
//!
//! A notice names the user, the intent's type and version and why; never the condition or
//! any text. Each is pointed to from the user's prefix (`("u", tenant, user, "notice", id)`),
//! so forgetting the user removes their notices in the same transaction.

use serde::{Deserialize, Serialize};

use crate::access::{AuditEntry, append_audit, audit_pepper, user_pseudonym};
use crate::codec::{decode, encode};
use crate::error::Result;
use crate::keyspace::Keyspace;
use crate::kv::{RangeOptions, Txn};
use crate::types::Timestamp;

use super::UserData;

/// A notice to the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Unique id.
    pub notice_id: String,
    /// When.
    pub at: Timestamp,
    /// The user it concerns.
    pub user_id: String,
    /// Why: `health_condition`.
    pub reason: String,
    /// The intent type of the protected version.
    pub intent_type: String,
    /// Its version.
    pub version: Timestamp,
    /// Whether the version is sealed at rest (the node has a key service).
    pub sealed: bool,
}

impl UserData<'_> {
    /// Records `notice` for the tenant (the user in it is this one).
    pub fn put_notice(&mut self, notice: &Notice) -> Result<()> {
        let key = self
            .keyspace
            .notice(self.tenant, notice.at, &notice.notice_id);
        self.txn.set(&key, &encode("notice", notice)?)?;
        self.txn.set(&self.keys.notice(&notice.notice_id), &key)
    }

    /// Removes the user's notices from the tenant's list (forgetting; the pointers go with
    /// the user's prefix). Returns how many.
    pub(super) fn clear_notices(&mut self) -> Result<usize> {
        let range = self.keys.notices();
        let pointers = self
            .txn
            .get_range(&range.begin, &range.end, RangeOptions::default())?;
        for (_, key) in &pointers {
            self.txn.clear(key)?;
        }
        Ok(pointers.len())
    }

    /// Whether this user's values are sealed at rest (the keyspace has a key service).
    pub fn seals(&self) -> bool {
        self.keyspace.encryption().is_some()
    }

    /// Appends an action the memory model took on its own for this user to the tenant's audit
    /// trail (the user named by the trail's pseudonym), as `principal`.
    pub fn audit(
        &mut self,
        id: String,
        at: Timestamp,
        principal: &str,
        action: &str,
        ids: Vec<String>,
    ) -> Result<()> {
        let pepper = audit_pepper(self.txn, self.keyspace, rand::random())?;
        let entry = AuditEntry {
            id,
            at,
            principal: principal.to_owned(),
            tenant: self.tenant.to_owned(),
            user: Some(user_pseudonym(&pepper, self.tenant, self.user)),
            action: action.to_owned(),
            ids,
            client: None,
            outcome: 200,
        };
        append_audit(self.txn, self.keyspace, std::slice::from_ref(&entry))
    }
}

/// A page of `tenant`'s notices, oldest first, after the notice at `after` (its `at` and id),
/// at most `limit`.
pub fn notices_page(
    txn: &mut Txn,
    keyspace: &Keyspace,
    tenant: &str,
    after: Option<(Timestamp, &str)>,
    limit: usize,
) -> Result<Vec<Notice>> {
    let range = keyspace.notices_of(tenant);
    let begin = match after {
        // Just past the key of the last one seen.
        Some((at, id)) => {
            let mut key = keyspace.notice(tenant, at, id);
            key.push(0);
            key
        }
        None => range.begin,
    };
    txn.get_range(&begin, &range.end, RangeOptions::first(limit))?
        .iter()
        .map(|(_, v)| decode("notice", v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::data::tests::with_user;

    fn notice(id: &str, user: &str, at: i64) -> Notice {
        Notice {
            notice_id: id.into(),
            at: Timestamp(at),
            user_id: user.into(),
            reason: "health_condition".into(),
            intent_type: "appointment".into(),
            version: Timestamp(at),
            sealed: false,
        }
    }

    fn page(store: &Store, ks: &Keyspace, after: Option<(Timestamp, &str)>) -> Vec<String> {
        store
            .run_blocking(|txn| notices_page(txn, ks, "acme", after, 10))
            .unwrap()
            .into_iter()
            .map(|n| n.notice_id)
            .collect()
    }

    #[test]
    fn notices_list_in_time_order_by_page_and_go_when_their_user_is_forgotten() {
        let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
        with_user(&store, &ks, "alice", |u| {
            u.put_notice(&notice("n2", "alice", 20))
        });
        with_user(&store, &ks, "bob", |u| {
            u.put_notice(&notice("n1", "bob", 10))
        });
        with_user(&store, &ks, "alice", |u| {
            u.put_notice(&notice("n3", "alice", 30))
        });
        assert_eq!(page(&store, &ks, None), ["n1", "n2", "n3"]);
        assert_eq!(page(&store, &ks, Some((Timestamp(20), "n2"))), ["n3"]);
        let report = with_user(&store, &ks, "alice", |u| u.forget());
        assert_eq!(report.notices, 2);
        assert_eq!(page(&store, &ks, None), ["n1"]);
    }
}
