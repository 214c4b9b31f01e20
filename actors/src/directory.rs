//! The per-node directory of user actors (not ractor's process-global registry): it finds a
//! user's actor, asking the user's shard supervisor to start it on first use, and delivers
//! requests to it. A request whose actor stopped while it was queued (passivation, failure)
//! is delivered again to a fresh actor; writes are idempotent by request id, so this is safe.
//!
//! The node holds at most `max_actors` live user actors and `max_cached_records` cached
//! records: starting one more first asks the least recently used actor (idle for at least
//! [`EVICTABLE_AFTER`]) to stop, and refuses with `Overloaded` (503, Retry-After) when every
//! actor is that busy. An actor started for reads of a user with no data stops once it has
//! answered ([`crate::user`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::RwLock;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorId, ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::placement::UserKey;
use crate::request::{Ask, Reader, UserReply, UserRequest};
use crate::roster::Roster;
use crate::services::Services;
use crate::supervisor::{ShardSupervisor, SupervisorArgs, SupervisorMsg};
use crate::user::{EVICTABLE_AFTER, UserMsg};

/// Delivery attempts of one request before it fails as unavailable.
const DELIVERY_ATTEMPTS: u32 = 4;

/// A live user actor and when it was last asked something.
struct Entry {
    actor: ActorRef<UserMsg>,
    /// When, by the services' clock (Unix ms).
    last_used: AtomicI64,
    /// Sent [`UserMsg::Evict`] and not spared since: not chosen again.
    evicting: AtomicBool,
}

/// The directory of one node's user actors.
pub struct Directory {
    services: Services,
    actors: RwLock<HashMap<UserKey, Entry>>,
    supervisors: tokio::sync::Mutex<HashMap<u32, ActorRef<SupervisorMsg>>>,
    this: Weak<Directory>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("alive", &self.alive())
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// An empty directory over `services`.
    pub fn new(services: Services) -> Arc<Self> {
        Arc::new_cyclic(|this| Directory {
            services,
            actors: RwLock::new(HashMap::new()),
            supervisors: tokio::sync::Mutex::new(HashMap::new()),
            this: this.clone(),
        })
    }

    /// The shared services.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Sends a request to the user's actor and waits for its reply, starting the actor if
    /// needed and redelivering if it stopped before replying.
    pub async fn call<T, F>(&self, key: &UserKey, make: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(RpcReplyPort<Result<T>>) -> UserMsg,
    {
        let shard = key.shard(self.services.settings.shards);
        if let Some(ownership) = &self.services.ownership {
            ownership.lease(shard)?;
        }
        let span = tracing::debug_span!("user", tenant = %key.tenant, user = %self.services.log_id(key), shard);
        self.deliver(key, make).instrument(span).await
    }

    async fn deliver<T, F>(&self, key: &UserKey, make: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(RpcReplyPort<Result<T>>) -> UserMsg,
    {
        for attempt in 0..DELIVERY_ATTEMPTS {
            let actor = self.get_or_start(key).await?;
            match actor.call(&make, None).await {
                Ok(CallResult::Success(result)) => return result,
                Ok(CallResult::Timeout) => {
                    return Err(Error::Unavailable("user actor timed out".into()));
                }
                Ok(CallResult::SenderError) | Err(_) => {
                    self.remove(key, actor.get_id());
                    self.services
                        .metrics
                        .redeliveries
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(user = %self.services.log_id(key), attempt, "redelivering to a fresh user actor");
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt) * 5)).await;
                }
            }
        }
        Err(Error::Unavailable(
            "the user's actor could not be reached".into(),
        ))
    }

    /// Serves a front-door request on this node ([`crate::front::Users`] decides where).
    pub async fn serve(
        &self,
        reader: &Reader,
        key: &UserKey,
        request: UserRequest,
    ) -> Result<UserReply> {
        if request.writes() && self.services.store.disk_full() {
            return Err(Error::Storage(engram_storage::Error::Full(
                "the store's filesystem has too little room; writes resume once it has".into(),
            )));
        }
        self.call(key, |reply| UserMsg::Call {
            reader: reader.clone(),
            request: Box::new(request.clone()),
            reply,
        })
        .await
    }

    /// Asks `request` of `key`'s actor on this node as an admin of the user's tenant, with
    /// its typed reply: for in-process tools (benchmarks, tests) that hold the directory and
    /// so every user's data already. Gateways go through [`crate::front::Users`].
    pub async fn ask_admin<R: Ask>(&self, key: &UserKey, request: R) -> Result<R::Reply> {
        let reader = Reader {
            principal: "in-process".to_owned(),
            scope: engram_storage::access::Scope::Admin,
            tenant: key.tenant.clone(),
        };
        self.ask_as(&reader, key, request).await
    }

    /// Asks `request` of `key`'s actor on this node as `reader`, with its typed reply: for
    /// in-process tools that act as a given key (tests of what differs by key).
    pub async fn ask_as<R: Ask>(
        &self,
        reader: &Reader,
        key: &UserKey,
        request: R,
    ) -> Result<R::Reply> {
        crate::request::typed::<R>(self.serve(reader, key, request.into()).await?)
    }

    /// Sends a message without waiting (fault injection, fire-and-forget).
    pub async fn tell(&self, key: &UserKey, msg: UserMsg) -> Result<()> {
        let actor = self.get_or_start(key).await?;
        actor
            .send_message(msg)
            .map_err(|_| Error::Unavailable("user actor stopped".into()))
    }

    /// The running actor of a user, if any (no start).
    pub fn running(&self, key: &UserKey) -> Option<ActorRef<UserMsg>> {
        self.actors.read().get(key).map(|e| e.actor.clone())
    }

    fn now_ms(&self) -> i64 {
        self.services.clock.now().0
    }

    /// The running actor of a user, marked as used now.
    fn used(&self, key: &UserKey) -> Option<ActorRef<UserMsg>> {
        let actors = self.actors.read();
        let entry = actors.get(key)?;
        entry.last_used.store(self.now_ms(), Ordering::Relaxed);
        Some(entry.actor.clone())
    }

    /// Whether `key`'s actor, sent [`UserMsg::Evict`], may stop: it was not used within
    /// [`EVICTABLE_AFTER`] since it was chosen. If it was, it stays and may be chosen again.
    fn evictable(&self, key: &UserKey) -> bool {
        let actors = self.actors.read();
        let Some(entry) = actors.get(key) else {
            return true;
        };
        let idle = entry.last_used.load(Ordering::Relaxed) <= self.idle_before();
        if !idle {
            entry.evicting.store(false, Ordering::Relaxed);
        }
        idle
    }

    /// Actors last used at or before this may be evicted.
    fn idle_before(&self) -> i64 {
        self.now_ms()
            .saturating_sub(i64::try_from(EVICTABLE_AFTER.as_millis()).unwrap_or(i64::MAX))
    }

    /// Makes room for one more user actor when the node holds `max_actors` actors or
    /// `max_cached_records` records: asks the least recently used actor not used within
    /// [`EVICTABLE_AFTER`] to stop. `Overloaded` when every actor was used that recently.
    fn admit(&self) -> Result<()> {
        let settings = &self.services.settings;
        let metrics = &self.services.metrics;
        let full = self.alive() >= settings.max_actors
            || metrics.cached_records.load(Ordering::Relaxed) >= settings.max_cached_records;
        if !full {
            return Ok(());
        }
        let idle_before = self.idle_before();
        let victim = {
            let actors = self.actors.read();
            actors
                .values()
                .filter(|e| !e.evicting.load(Ordering::Relaxed))
                .map(|e| (e.last_used.load(Ordering::Relaxed), e))
                .filter(|(used, _)| *used <= idle_before)
                .min_by_key(|(used, _)| *used)
                .map(|(_, e)| {
                    e.evicting.store(true, Ordering::Relaxed);
                    e.actor.clone()
                })
        };
        match victim {
            Some(actor) => {
                let _ = actor.send_message(UserMsg::Evict);
                Ok(())
            }
            None => {
                metrics.admissions_refused.fetch_add(1, Ordering::Relaxed);
                Err(Error::Overloaded(
                    "this node holds as many users as it may and all were used within the \
                     last second; retry shortly"
                        .into(),
                ))
            }
        }
    }

    /// Number of user actors running on this node.
    pub fn alive(&self) -> usize {
        self.actors.read().len()
    }

    /// Forgets the entry of `key` if it still names actor `id`.
    pub fn remove(&self, key: &UserKey, id: ActorId) {
        let mut actors = self.actors.write();
        if actors.get(key).is_some_and(|e| e.actor.get_id() == id) {
            actors.remove(key);
        }
    }

    /// Records a (re)started actor.
    pub(crate) fn register(&self, key: UserKey, actor: ActorRef<UserMsg>) {
        let entry = Entry {
            actor,
            last_used: AtomicI64::new(self.now_ms()),
            evicting: AtomicBool::new(false),
        };
        self.actors.write().insert(key, entry);
    }

    /// Stops the user actors of one shard after they finished the requests already queued
    /// (a hand-off, or a shard lost to another node), then the shard's supervisor.
    pub async fn stop_shard(&self, shard: u32) {
        const GRACE: Duration = Duration::from_secs(10);
        let supervisor = self.supervisors.lock().await.remove(&shard);
        if let Some(supervisor) = supervisor {
            supervisor
                .get_cell()
                .drain_children_and_wait(Some(GRACE))
                .await;
            let _ = supervisor.stop_and_wait(None, Some(GRACE)).await;
        }
        let shards = self.services.settings.shards;
        self.actors
            .write()
            .retain(|key, _| key.shard(shards) != shard);
    }

    /// Stops every user actor after it finished the requests already queued, then the
    /// supervisors. Used at shutdown.
    pub async fn shutdown(&self, timeout: Duration) {
        let supervisors: Vec<_> = self
            .supervisors
            .lock()
            .await
            .drain()
            .map(|(_, s)| s)
            .collect();
        for supervisor in &supervisors {
            supervisor
                .get_cell()
                .drain_children_and_wait(Some(timeout))
                .await;
        }
        for supervisor in supervisors {
            let _ = supervisor.stop_and_wait(None, Some(timeout)).await;
        }
        self.actors.write().clear();
    }

    async fn get_or_start(&self, key: &UserKey) -> Result<ActorRef<UserMsg>> {
        if let Some(actor) = self.used(key) {
            return Ok(actor);
        }
        self.admit()?;
        let supervisor = self
            .supervisor(key.shard(self.services.settings.shards))
            .await?;
        let key_owned = key.clone();
        let actor = match supervisor
            .call(|reply| SupervisorMsg::Start(key_owned, reply), None)
            .await
        {
            Ok(CallResult::Success(result)) => result?,
            Ok(CallResult::Timeout | CallResult::SenderError) | Err(_) => {
                return Err(Error::Unavailable("shard supervisor stopped".into()));
            }
        };
        self.register(key.clone(), actor.clone());
        Ok(actor)
    }

    async fn supervisor(&self, shard: u32) -> Result<ActorRef<SupervisorMsg>> {
        let mut supervisors = self.supervisors.lock().await;
        if let Some(s) = supervisors.get(&shard)
            && s.get_status() == ractor::ActorStatus::Running
        {
            return Ok(s.clone());
        }
        let directory = self
            .this
            .upgrade()
            .ok_or_else(|| Error::Unavailable("node shutting down".into()))?;
        let args = SupervisorArgs {
            shard,
            services: self.services.clone(),
            roster: directory,
        };
        let (supervisor, _) = Actor::spawn(None, ShardSupervisor, args)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot start shard supervisor: {e}")))?;
        supervisors.insert(shard, supervisor.clone());
        Ok(supervisor)
    }
}

impl Roster for Directory {
    fn evictable(&self, key: &UserKey) -> bool {
        Directory::evictable(self, key)
    }

    fn left(&self, key: &UserKey, id: ActorId) {
        self.remove(key, id);
    }

    fn restarted(&self, key: UserKey, actor: ractor::ActorCell) {
        self.register(key, actor.into());
    }
}
