//! The inference dispatcher: one actor per node and queue that runs the pipeline's rounds
//! ([`crate::pipeline`] holds the handle the writes notify).
//!
//! It runs rounds ([`embedding`]): take up to `round-texts` users (one of each tenant in
//! turn), read their entries, embed them in the pool's background class (one call per
//! tenant, so the pool's shares and rotation apply), and store the round's vectors in one
//! transaction that fences each user's shard on its own, only for entries that still hold the
//! embedded text; then each user's actor, if it runs, indexes them. On the distillation queue
//! ([`WorkQueue::Distillation`]) a round ([`generation`]) runs the generative model on
//! queued messages and writes its results through the intent gate.
//!
//! The dispatcher scans the work index when it starts, when this node gains shards (a
//! take-over, a hand-off, a restart), when users were not held, and every `scan-interval` in
//! any case, so entries of a node that died, or notifications lost with a stopped actor, are
//! resumed by whoever serves the shard next.
//!
//! It sits above the directory and the user actors (it delivers vectors to them); nothing
//! below imports it. It logs counts, never texts or vectors.

mod embedding;
mod generation;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_storage::WorkQueue;
use engram_storage::data::UserData;
use engram_storage::data::pending::pending_users;
use engram_storage::types::Timestamp;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use self::embedding::RoundOutcome;
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::pipeline::{Pending, Pipeline, Running, Shared};
use crate::placement::UserKey;
use crate::services::Services;

/// How often the dispatcher looks at its shards, its gauges and its backoff.
const TICK: Duration = Duration::from_millis(100);
/// How long the dispatcher waits after the pool refused a round.
const BACKOFF: Duration = Duration::from_millis(50);
/// Work-index entries read per page of a scan.
const SCAN_PAGE: usize = 512;

impl Pipeline {
    /// Starts the dispatcher for the users of `directory` (whose services hold this handle).
    /// Starting twice is an error.
    pub async fn start(&self, directory: Arc<Directory>) -> Result<()> {
        let services = directory.services();
        let ready = match self.shared.queue {
            WorkQueue::Embedding => services.embedder.is_some(),
            WorkQueue::Distillation => services
                .distillation
                .as_ref()
                .is_some_and(|d| d.generator.is_some()),
        };
        if !ready {
            return Err(Error::Internal(format!(
                "the {:?} pipeline has no pool to run",
                self.shared.queue
            )));
        }
        let args = DispatcherArgs {
            shared: Arc::clone(&self.shared),
            directory,
        };
        let (actor, _handle) = Actor::spawn(None, Dispatcher, args)
            .await
            .map_err(|e| Error::Internal(format!("the inference dispatcher did not start: {e}")))?;
        let running = Running {
            cell: actor.get_cell(),
            wake: Box::new(move || {
                let _ = actor.cast(PipelineMsg::Wake);
            }),
        };
        if self.shared.dispatcher.set(running).is_err() {
            return Err(Error::Internal(
                "the inference dispatcher was started twice".into(),
            ));
        }
        self.wake();
        Ok(())
    }

    /// What is pending for the shards this node serves, counted in storage.
    pub async fn pending(&self, services: &Services) -> Result<Pending> {
        let scan = scan(services, self.shared.queue, 0, true).await?;
        Ok(Pending {
            users: scan.pending_users,
            entries: scan.entries as usize,
            oldest: scan.oldest,
        })
    }
}

/// Which users this node serves: those of the shards it holds (all, without leases).
#[derive(Clone)]
struct Owned {
    shards: u32,
    held: Option<HashSet<u32>>,
}

impl Owned {
    fn of(services: &Services) -> Owned {
        Owned {
            shards: services.settings.shards,
            held: services
                .ownership
                .as_ref()
                .map(|o| o.snapshot().into_keys().collect()),
        }
    }

    fn serves(&self, tenant: &str, user: &str) -> bool {
        match &self.held {
            Some(held) => held.contains(&UserKey::new(tenant, user).shard(self.shards)),
            None => true,
        }
    }
}

/// The dispatcher's messages.
pub(crate) enum PipelineMsg {
    /// Work may be waiting.
    Wake,
    /// The periodic look at shards, gauges and backoff.
    Tick,
    /// A round ended.
    RoundDone(RoundOutcome),
    /// A scan of the work index ended.
    ScanDone(Result<Scan>),
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for PipelineMsg {}

/// What a scan found: users of this node's shards with pending entries.
pub(crate) struct Scan {
    users: Vec<(UserKey, Timestamp)>,
    /// Whether users were left out for want of room.
    more: bool,
    /// Users with pending entries (stale marks left out when entries are counted).
    pending_users: usize,
    entries: u64,
    oldest: Option<Timestamp>,
}

struct Dispatcher;

struct DispatcherArgs {
    shared: Arc<Shared>,
    directory: Arc<Directory>,
}

struct DispatcherState {
    shared: Arc<Shared>,
    directory: Arc<Directory>,
    rounds: usize,
    scanning: bool,
    /// When the last scan started (`None`: scan now).
    scanned_at: Option<Instant>,
    /// The shards held at the last tick (to scan when new ones come).
    held: HashSet<u32>,
    backoff_until: Option<Instant>,
    /// The oldest pending entry the last scan saw.
    scan_oldest: Option<Timestamp>,
    ticker: Option<ractor::concurrency::JoinHandle<()>>,
}

impl Actor for Dispatcher {
    type Msg = PipelineMsg;
    type State = DispatcherState;
    type Arguments = DispatcherArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PipelineMsg>,
        args: DispatcherArgs,
    ) -> std::result::Result<DispatcherState, ActorProcessingErr> {
        let ticker = myself.send_interval(TICK, || PipelineMsg::Tick);
        Ok(DispatcherState {
            shared: args.shared,
            directory: args.directory,
            rounds: 0,
            scanning: false,
            scanned_at: None,
            held: HashSet::new(),
            backoff_until: None,
            scan_oldest: None,
            ticker: Some(ticker),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<PipelineMsg>,
        state: &mut DispatcherState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<PipelineMsg>,
        msg: PipelineMsg,
        state: &mut DispatcherState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            PipelineMsg::Wake => state.shared.woken.store(false, Ordering::Release),
            PipelineMsg::Tick => state.tick(&myself),
            PipelineMsg::RoundDone(outcome) => state.round_done(outcome),
            PipelineMsg::ScanDone(scan) => state.scan_done(scan),
        }
        state.pump(&myself);
        Ok(())
    }
}

impl DispatcherState {
    fn services(&self) -> &Services {
        self.directory.services()
    }

    /// Starts rounds while there is room and work.
    fn pump(&mut self, myself: &ActorRef<PipelineMsg>) {
        if self
            .backoff_until
            .is_some_and(|until| Instant::now() < until)
        {
            return;
        }
        self.backoff_until = None;
        let config = &self.shared.config;
        while self.rounds < config.rounds_in_flight.max(1) {
            let users = self.shared.work.lock().take(config.round_texts.max(1));
            if users.is_empty() {
                break;
            }
            self.rounds += 1;
            let (directory, config, me) =
                (Arc::clone(&self.directory), config.clone(), myself.clone());
            let shared = Arc::clone(&self.shared);
            let taken = users.clone();
            let round = tokio::spawn(async move {
                match shared.queue {
                    WorkQueue::Embedding => {
                        embedding::run(&directory, &config, &shared.metrics, users).await
                    }
                    WorkQueue::Distillation => {
                        generation::run(&directory, &config, &shared.metrics, users).await
                    }
                }
            });
            tokio::spawn(async move {
                // A round that panicked did nothing durable: its users wait again.
                let outcome = round.await.unwrap_or_else(|_| {
                    tracing::error!(users = taken.len(), "a pipeline round panicked");
                    RoundOutcome {
                        finished: taken.into_iter().map(|(k, at)| (k, Some(at))).collect(),
                        not_served: Vec::new(),
                        refused: true,
                    }
                });
                let _ = me.cast(PipelineMsg::RoundDone(outcome));
            });
        }
    }

    fn round_done(&mut self, outcome: RoundOutcome) {
        self.rounds = self.rounds.saturating_sub(1);
        if outcome.refused {
            self.backoff_until = Some(Instant::now() + BACKOFF);
        }
        let mut work = self.shared.work.lock();
        for (key, left) in outcome.finished {
            work.finish(&key, left);
        }
        for key in outcome.not_served {
            work.finish(&key, None);
            work.remove(&key);
        }
    }

    /// Scans when shards were gained, users were not held, or the interval passed.
    fn tick(&mut self, myself: &ActorRef<PipelineMsg>) {
        let held: HashSet<u32> = match &self.services().ownership {
            Some(ownership) => ownership.snapshot().into_keys().collect(),
            None => HashSet::new(),
        };
        let gained = held.difference(&self.held).next().is_some();
        self.held = held;
        let (overflowed, room) = {
            let work = self.shared.work.lock();
            (work.overflowed(), work.room())
        };
        let due = self
            .scanned_at
            .is_none_or(|at| at.elapsed() >= self.shared.config.scan_interval);
        if !self.scanning && (gained || due || (overflowed && room > 0)) {
            self.scan(myself, room);
        }
        self.gauges();
    }

    fn scan(&mut self, myself: &ActorRef<PipelineMsg>, room: usize) {
        self.scanning = true;
        self.scanned_at = Some(Instant::now());
        self.shared.work.lock().clear_overflow();
        self.shared.metrics.scans.fetch_add(1, Ordering::Relaxed);
        let services = self.services().clone();
        let me = myself.clone();
        let queue = self.shared.queue;
        let scanned = tokio::spawn(async move { scan(&services, queue, room, false).await });
        tokio::spawn(async move {
            let scan = scanned
                .await
                .unwrap_or_else(|_| Err(Error::Internal("the scan panicked".into())));
            let _ = me.cast(PipelineMsg::ScanDone(scan));
        });
    }

    fn scan_done(&mut self, scan: Result<Scan>) {
        self.scanning = false;
        let scan = match scan {
            Ok(scan) => scan,
            Err(err) => {
                tracing::warn!(error = %err, "scan of pending inference failed; retried");
                self.scanned_at = None;
                return;
            }
        };
        let metrics = &self.shared.metrics;
        metrics
            .pending_users
            .store(scan.pending_users as u64, Ordering::Relaxed);
        // The queue knows every user's age when the scan found room for all of them; only
        // users left in storage need the scan's view (which ages until the next scan).
        self.scan_oldest = scan.oldest.filter(|_| scan.more);
        let mut work = self.shared.work.lock();
        for (key, since) in scan.users {
            if !work.knows(&key) && !work.push(key, since) {
                break;
            }
        }
        if scan.more {
            // Users were left in storage: scan again once there is room.
            work.mark_overflow();
        }
    }

    fn gauges(&self) {
        let metrics = &self.shared.metrics;
        let work = self.shared.work.lock();
        metrics
            .queued_users
            .store(work.queued() as u64, Ordering::Relaxed);
        metrics
            .users_in_rounds
            .store(work.in_round() as u64, Ordering::Relaxed);
        let oldest = match (work.oldest(), self.scan_oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let oldest = if work.queued() + work.in_round() == 0
            && metrics.pending_users.load(Ordering::Relaxed) == 0
        {
            None
        } else {
            oldest
        };
        metrics
            .oldest_queued_at
            .store(oldest.map_or(0, |t| t.0), Ordering::Relaxed);
    }
}

/// Users of this node's shards in the work index of `queue`, at most `room` of them, with the count of
/// all of them, and, when `count_entries` (a read of every pending entry: for operators, not
/// for the dispatcher's periodic scans), of their pending entries.
async fn scan(
    services: &Services,
    queue: WorkQueue,
    room: usize,
    count_entries: bool,
) -> Result<Scan> {
    let (store, ks) = (services.store.clone(), services.keyspace.clone());
    let owned = Owned::of(services);
    Ok(store
        .read(move |txn| {
            let mut scan = Scan {
                users: Vec::new(),
                more: false,
                pending_users: 0,
                entries: 0,
                oldest: None,
            };
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = pending_users(txn, &ks, queue, after.as_deref(), SCAN_PAGE)?;
                let Some(last) = page.last() else { break };
                after = Some(last.key.clone());
                for marked in page {
                    if !owned.serves(&marked.tenant, &marked.user) {
                        continue;
                    }
                    // A stale mark (no entries left) is queued too: the user's round clears
                    // it; counted, it is left out.
                    let n = if count_entries {
                        UserData::new(txn, &ks, &marked.tenant, &marked.user).count_queued(queue)?
                    } else {
                        1
                    };
                    if n > 0 {
                        scan.entries += n as u64;
                        scan.pending_users += 1;
                        scan.oldest =
                            Some(scan.oldest.map_or(marked.since, |o| o.min(marked.since)));
                    }
                    if scan.users.len() < room {
                        scan.users
                            .push((UserKey::new(marked.tenant, marked.user), marked.since));
                    } else {
                        scan.more = true;
                    }
                }
            }
            Ok(scan)
        })
        .await?)
}
