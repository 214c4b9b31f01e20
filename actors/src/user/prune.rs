//! Pruning a user's idempotency entries: a live actor removes those older than the retention
//! (`memory.idempotency-retention`) at most once an hour, and every sweep of the user does.

use engram_storage::data::UserData;
use tokio::time::Instant;

use super::UserArgs;
use super::txn::{lease_of, run_fenced};
use crate::error::Result;

/// Idempotency entries one pruning transaction reads at most.
const PRUNE_PAGE: usize = 256;
/// Pages one pruning reads at most; what is left waits for the next.
const PRUNE_PAGES: usize = 64;
/// How often a live actor prunes its user's entries.
pub(super) const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// When a live actor last pruned its user's idempotency entries.
#[derive(Debug)]
pub(super) struct Pruning {
    last: Option<Instant>,
}

impl Pruning {
    /// Pruning as of an actor that starts now: the first is due an hour later.
    pub(super) fn started() -> Self {
        Pruning {
            last: Some(Instant::now()),
        }
    }

    /// Whether the hourly pruning is due.
    pub(super) fn due(&self) -> bool {
        self.last.is_none_or(|at| at.elapsed() >= PRUNE_EVERY)
    }

    /// Removes `args`' user's idempotency entries older than the retention
    /// (`memory.idempotency-retention`), a page a transaction. Run by a live actor at most
    /// once every [`PRUNE_EVERY`] (the first an hour after it started), and by every sweep
    /// of the user.
    pub(super) async fn prune(&mut self, args: &UserArgs) -> Result<usize> {
        self.last = Some(Instant::now());
        let (services, key) = (&args.services, &args.key);
        let before = services
            .clock
            .now()
            .plus_millis(-services.settings.idempotency_retention_ms);
        let mut after: Option<Vec<u8>> = None;
        let mut removed = 0;
        for _ in 0..PRUNE_PAGES {
            let (ks, user, from) = (services.keyspace.clone(), key.clone(), after.clone());
            let (n, next) = run_fenced(services, key, lease_of(args)?, move |txn| {
                UserData::new(txn, &ks, &user.tenant, &user.user).prune_idempotency_page(
                    from.as_deref(),
                    PRUNE_PAGE,
                    before,
                )
            })
            .await?;
            removed += n;
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(removed)
    }
}
