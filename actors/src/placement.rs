//! Placement of users on shards: `shard = hash(tenant, user) mod S` with a hash that is the
//! same in every process and version (FNV-1a over the two ids with a separator), and the
//! pseudonym that logs carry instead of user ids.
//!
//! The two are different hashes on purpose. The log pseudonym is keyed ([`LogPepper`]: the
//! deployment's audit-trail pepper, so a log line's pseudonym is the prefix of the audit
//! trail's): an unkeyed hash of a phone-number-like user id is reversed by hashing every
//! phone number. Placement stays unkeyed: every node, the operator CLI and the tests must
//! compute a user's shard alike without holding a secret, and it reveals nothing outside the
//! cluster (shard numbers are not logged next to user ids). What an unkeyed placement allows
//! is crafting ids that share a shard; that concentrates one tenant's own users on one node,
//! bounded by the per-key rate limits, and moves no data between tenants.

use engram_storage::access::user_pseudonym;

/// The user id the tenant's actor is placed under (not a valid user id).
pub const SHARED_USER: &str = "#shared";

/// A user, as (tenant, user id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserKey {
    /// Tenant.
    pub tenant: String,
    /// User id within the tenant.
    pub user: String,
}

impl UserKey {
    /// The key of (`tenant`, `user`).
    pub fn new(tenant: impl Into<String>, user: impl Into<String>) -> Self {
        UserKey {
            tenant: tenant.into(),
            user: user.into(),
        }
    }

    /// The key of `tenant`'s actor of shared sets ([`crate::tenant`]): placed, supervised and
    /// fenced like a user under the reserved id [`SHARED_USER`].
    pub fn shared(tenant: impl Into<String>) -> Self {
        UserKey::new(tenant, SHARED_USER)
    }

    /// Whether this is the key of a tenant's actor of shared sets.
    pub fn is_shared(&self) -> bool {
        self.user == SHARED_USER
    }

    /// A stable 64-bit hash of the user, for placement.
    pub fn hash64(&self) -> u64 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let bytes = self
            .tenant
            .bytes()
            .chain(std::iter::once(0xff))
            .chain(self.user.bytes());
        bytes.fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
    }

    /// The user's shard among `shards`.
    pub fn shard(&self, shards: u32) -> u32 {
        (self.hash64() % u64::from(shards.max(1))) as u32
    }

    /// A pseudonym for logs: never the user id itself, and not computable without the
    /// deployment's secret (the first 16 hex digits of the audit trail's pseudonym).
    pub fn log_id(&self, pepper: &LogPepper) -> String {
        let mut id = user_pseudonym(&pepper.0, &self.tenant, &self.user);
        id.truncate(16);
        id
    }
}

/// The per-deployment secret that keys log pseudonyms: the audit trail's pepper, read from
/// storage at start (`engram_storage::access::audit_pepper`), the same on every node. The
/// default is a random one, for embedders and tests that have no deployment.
#[derive(Clone, PartialEq, Eq)]
pub struct LogPepper([u8; 32]);

impl LogPepper {
    /// The pepper `secret`.
    pub fn new(secret: [u8; 32]) -> Self {
        LogPepper(secret)
    }
}

impl Default for LogPepper {
    fn default() -> Self {
        LogPepper(rand::random())
    }
}

impl std::fmt::Debug for LogPepper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogPepper(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::{LogPepper, UserKey};

    #[test]
    fn shards_are_stable_and_spread() {
        // Fixed values: placement must not change between builds or processes.
        assert_eq!(
            UserKey::new("acme", "alice").hash64(),
            UserKey::new("acme", "alice").hash64()
        );
        assert_ne!(
            UserKey::new("acme", "alice").hash64(),
            UserKey::new("acmea", "lice").hash64()
        );
        let mut counts = vec![0u32; 16];
        for i in 0..16_000 {
            counts[UserKey::new("t", format!("user-{i}")).shard(16) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn log_pseudonyms_are_keyed_by_the_deployment_secret() {
        let user = UserKey::new("acme", "13800138000");
        let (a, b) = (LogPepper::new([1; 32]), LogPepper::new([2; 32]));
        let pseudonym = user.log_id(&a);
        assert_eq!(pseudonym.len(), 16);
        assert!(!pseudonym.contains("13800138000"));
        assert_eq!(pseudonym, user.log_id(&a), "stable within a deployment");
        assert_ne!(
            pseudonym,
            user.log_id(&b),
            "another secret, another pseudonym"
        );
        assert_ne!(
            pseudonym,
            format!("{:016x}", user.hash64()),
            "not the unkeyed placement hash"
        );
        assert!(
            engram_storage::access::user_pseudonym(&[1; 32], "acme", "13800138000")
                .starts_with(&pseudonym),
            "the prefix of the audit trail's pseudonym"
        );
        assert_ne!(
            LogPepper::default(),
            LogPepper::default(),
            "random by default"
        );
    }
}
