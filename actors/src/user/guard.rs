//! The sensitive-read breaker as a user's actor applies it ([`crate::breaker`] holds the
//! rule): a non-admin read that shows high-level personal data, and every identifier a
//! non-admin query holds, is counted per (principal, user) in a fenced transaction of the
//! user's actor, and refused past the limit until an admin approves further reads.

use engram_storage::data::UserData;

use super::UserArgs;
use super::txn::{lease_of, run_fenced};
use crate::breaker::{Counter, Counts, Verdict};
use crate::error::{Error, Result};
use crate::model::pii;
use crate::request::Reader;
use crate::request::user::ApprovalAck;

/// The breaker of one user, as its actor sees it: the user, and whether anything of theirs
/// is stored (a user with no data has nothing to protect, and a read must not give them
/// data).
pub(super) struct Breaker<'a> {
    args: &'a UserArgs,
    has_data: bool,
}

impl<'a> Breaker<'a> {
    /// The breaker of `args`' user.
    pub(super) fn new(args: &'a UserArgs, has_data: bool) -> Self {
        Breaker { args, has_data }
    }

    /// Runs a fenced write of the breaker's counts.
    async fn run<T, F>(&self, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut engram_storage::Txn) -> engram_storage::Result<T> + Send + 'static,
    {
        let lease = lease_of(self.args)?;
        run_fenced(&self.args.services, &self.args.key, lease, body).await
    }

    /// Counts a sensitive read by a non-admin `reader`, or refuses it.
    pub(super) async fn guard(&self, reader: &Reader, sensitive: bool) -> Result<()> {
        self.guard_counter(reader, sensitive, Counter::Read).await
    }

    /// Counts the identifiers in a non-admin `reader`'s query as anchor matches, or refuses
    /// the query.
    pub(super) async fn guard_guesses(&self, reader: &Reader, query: &str) -> Result<()> {
        match self.count_guesses(reader, query).await? {
            Verdict::Allowed => Ok(()),
            Verdict::Refused { reads } => Err(Error::ApprovalRequired { reads }),
        }
    }

    /// The breaker's verdict on the identifiers in a non-admin `reader`'s query, each counted
    /// as an anchor match (when allowed): a guess of a masked number, found or not.
    pub(super) async fn count_guesses(&self, reader: &Reader, query: &str) -> Result<Verdict> {
        if reader.is_admin() {
            return Ok(Verdict::Allowed);
        }
        let guesses = u32::try_from(pii::identifiers_in(query)).unwrap_or(u32::MAX);
        self.count_events(reader, guesses, Counter::Match).await
    }

    /// Counts an event of `counter` by a non-admin `reader`, or refuses it.
    pub(super) async fn guard_counter(
        &self,
        reader: &Reader,
        sensitive: bool,
        counter: Counter,
    ) -> Result<()> {
        match self.count(reader, sensitive, counter).await? {
            Verdict::Allowed => Ok(()),
            Verdict::Refused { reads } => Err(Error::ApprovalRequired { reads }),
        }
    }

    /// The breaker's verdict on one more sensitive read by `reader` (counted when allowed).
    pub(super) async fn count_sensitive(
        &self,
        reader: &Reader,
        sensitive: bool,
    ) -> Result<Verdict> {
        self.count(reader, sensitive, Counter::Read).await
    }

    /// The breaker's verdict on one more event of `counter` by `reader` (counted when
    /// allowed); reads that show nothing sensitive, and admins' reads, are neither counted
    /// nor refused.
    async fn count(&self, reader: &Reader, sensitive: bool, counter: Counter) -> Result<Verdict> {
        self.count_events(reader, u32::from(sensitive), counter)
            .await
    }

    /// The breaker's verdict on `events` more events of `counter` by `reader` (all counted
    /// when allowed, none when refused).
    async fn count_events(
        &self,
        reader: &Reader,
        events: u32,
        counter: Counter,
    ) -> Result<Verdict> {
        let policy = self.args.services.settings.breaker;
        // A user with no data has nothing to protect, and a read must not give them data.
        if events == 0 || !self.has_data || reader.is_admin() || counter.threshold(policy) == 0 {
            return Ok(Verdict::Allowed);
        }
        let (services, key) = (self.args.services.clone(), self.args.key.clone());
        let ks = services.keyspace.clone();
        let now = services.clock.now();
        let principal = reader.principal.clone();
        let verdict = self
            .run(move |txn| {
                let mut user = UserData::new(txn, &ks, &key.tenant, &key.user);
                let mut counts: Counts = user.sensitive_reads()?.unwrap_or_default();
                let verdict = counts.count_many(&principal, counter, policy, now, events);
                if verdict == Verdict::Allowed {
                    user.put_sensitive_reads(&counts)?;
                }
                Ok(verdict)
            })
            .await?;
        if verdict != Verdict::Allowed {
            services
                .metrics
                .sensitive_refusals
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(verdict)
    }

    /// An admin's approval: clears every principal's count of this user.
    pub(super) async fn approve_reads(&self) -> Result<ApprovalAck> {
        let (services, key) = (&self.args.services, self.args.key.clone());
        let ks = services.keyspace.clone();
        let cleared = self
            .run(move |txn| {
                let mut user = UserData::new(txn, &ks, &key.tenant, &key.user);
                let counts: Counts = user.sensitive_reads()?.unwrap_or_default();
                user.clear_sensitive_reads()?;
                Ok(counts.total())
            })
            .await?;
        Ok(ApprovalAck { cleared })
    }
}
