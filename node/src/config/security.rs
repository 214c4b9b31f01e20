//! `[security]`: encryption at rest, the root admin key, rate limits, the audit trail and
//! the circuit breaker of sensitive reads.

use std::path::PathBuf;
use std::time::Duration;

use engram_storage::crypto::Cipher;
use serde::{Deserialize, Serialize};

/// `[security]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct SecurityConfig {
    /// File of master keys (`<id> <64 hex digits>` a line; the highest id is current). When
    /// set, every user's values are sealed with `cipher` under a per-user data key wrapped
    /// by the tenant's key derived from the current master key; forgetting a user destroys
    /// their data key. Unset: values are stored in clear.
    pub master_key_file: Option<PathBuf>,
    /// The cipher new values and data keys are sealed with: `"aes-256-gcm"` or `"sm4-gcm"`
    /// (the Chinese national standard). Every stored value names its cipher, so changing
    /// this leaves what was written readable.
    pub cipher: Cipher,
    /// File holding the root admin key (at least 32 characters), the first key of a
    /// deployment: admin of every tenant and operator of the cluster. `ENGRAM_ADMIN_KEY`
    /// overrides it. A node with neither does not start: there is no default key.
    pub admin_key_file: Option<PathBuf>,
    /// Requests a second each API key may make on one node (0: unlimited); beyond it, 429.
    pub rate_limit: u32,
    /// Requests a key may make in a burst above the rate.
    pub rate_burst: u32,
    /// Storage reads of API key rows a client address may cause a second (0: unlimited),
    /// before authentication: a flood of unknown key ids gets 429 instead of reads.
    pub key_lookup_rate: u32,
    /// Such reads in a burst above the rate.
    pub key_lookup_burst: u32,
    /// Whether requests are recorded in the audit trail. Off only to measure its cost:
    /// nothing is recorded then.
    pub audit: bool,
    /// How long audit entries are kept.
    #[serde(with = "humantime_serde")]
    pub audit_retention: Duration,
    /// Reads returning a user's high-PII memories allowed within `sensitive-read-window`
    /// before an admin must approve more (0: no limit).
    pub sensitive_read_limit: u32,
    /// Identity-anchor matches (`anchors/match`) one non-admin key may make of one user within
    /// `sensitive-read-window` before an admin approves more (0: no limit), counted apart
    /// from reads.
    pub anchor_match_limit: u32,
    /// The window of `sensitive-read-limit` and `anchor-match-limit`.
    #[serde(with = "humantime_serde")]
    pub sensitive_read_window: Duration,
    /// How masked gateway reads (contexts, searches, lists, session turns, conflicts, recall)
    /// that show nothing sensitive are audited: `"batched"` records them without making the
    /// answer wait (a crash can lose the entries still queued, at most
    /// `crate::audit::MAX_UNWRITTEN`), `"durable"` answers only once the entry is durable.
    /// Every other request (admin full-text reads, reads counted by the sensitive-read
    /// breaker, writes, key, approval and cluster operations) always waits for its entry.
    pub audit_reads: AuditReads,
}

/// How masked gateway reads are audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditReads {
    /// Recorded without making the answer wait.
    Batched,
    /// Answered once the entry is durable.
    Durable,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            master_key_file: None,
            cipher: Cipher::default(),
            admin_key_file: None,
            rate_limit: 1_000,
            rate_burst: 2_000,
            key_lookup_rate: LookupLimits::default().per_address_rate,
            key_lookup_burst: LookupLimits::default().per_address_burst,
            audit: true,
            audit_retention: Duration::from_secs(400 * 24 * 3_600),
            sensitive_read_limit: engram_actors::breaker::Policy::default().threshold,
            anchor_match_limit: engram_actors::breaker::Policy::default().match_threshold,
            sensitive_read_window: Duration::from_millis(
                u64::try_from(engram_actors::breaker::Policy::default().window_ms).unwrap_or(0),
            ),
            audit_reads: AuditReads::Batched,
        }
    }
}

/// Environment variable holding the root admin key (wins over `security.admin-key-file`).
pub const ADMIN_KEY_ENV: &str = "ENGRAM_ADMIN_KEY";

/// Negative answers of key lookups remembered by default.
pub const NEGATIVE_ENTRIES: usize = 10_000;

/// Bounds of API key lookups (`key-lookup-rate`, `key-lookup-burst`), which the
/// authenticator ([`crate::auth`]) applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupLimits {
    /// Negative answers remembered.
    pub negative_entries: usize,
    /// Storage reads of key rows a client address may cause a second (0: unlimited).
    pub per_address_rate: u32,
    /// Such reads in a burst above the rate.
    pub per_address_burst: u32,
}

impl Default for LookupLimits {
    fn default() -> Self {
        LookupLimits {
            negative_entries: NEGATIVE_ENTRIES,
            per_address_rate: 20,
            per_address_burst: 100,
        }
    }
}

impl SecurityConfig {
    /// The bounds of API key lookups.
    pub fn key_lookups(&self) -> LookupLimits {
        LookupLimits {
            per_address_rate: self.key_lookup_rate,
            per_address_burst: self.key_lookup_burst,
            ..LookupLimits::default()
        }
    }

    /// The circuit breaker of sensitive reads.
    pub fn breaker(&self) -> engram_actors::breaker::Policy {
        engram_actors::breaker::Policy {
            threshold: self.sensitive_read_limit,
            match_threshold: self.anchor_match_limit,
            window_ms: i64::try_from(self.sensitive_read_window.as_millis()).unwrap_or(i64::MAX),
        }
    }
}
