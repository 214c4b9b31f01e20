//! Placement of users on shards: `shard = hash(tenant, user) mod S` with a hash that is the
//! same in every process and version (FNV-1a over the two ids with a separator), and the
//! pseudonymous user hash that logs carry instead of user ids.

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

    /// A pseudonym for logs: never the user id itself.
    pub fn log_id(&self) -> String {
        format!("{:016x}", self.hash64())
    }
}

#[cfg(test)]
mod tests {
    use super::UserKey;

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
        assert!(!UserKey::new("acme", "alice").log_id().contains("alice"));
    }
}
