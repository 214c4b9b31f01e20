//! The per-node directory of user actors (not ractor's process-global registry): it finds a
//! user's actor, asking the user's shard supervisor to start it on first use, and delivers
//! requests to it. A request whose actor stopped while it was queued (passivation, failure)
//! is delivered again to a fresh actor; writes are idempotent by request id, so this is safe.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::RwLock;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorId, ActorRef, RpcReplyPort};
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::placement::UserKey;
use crate::services::Services;
use crate::supervisor::{ShardSupervisor, SupervisorArgs, SupervisorMsg};
use crate::user::UserMsg;

/// Delivery attempts of one request before it fails as unavailable.
const DELIVERY_ATTEMPTS: u32 = 4;

/// The directory of one node's user actors.
pub struct Directory {
    services: Services,
    actors: RwLock<HashMap<UserKey, ActorRef<UserMsg>>>,
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

    /// Sends a message without waiting (fault injection, fire-and-forget).
    pub async fn tell(&self, key: &UserKey, msg: UserMsg) -> Result<()> {
        let actor = self.get_or_start(key).await?;
        actor
            .send_message(msg)
            .map_err(|_| Error::Unavailable("user actor stopped".into()))
    }

    /// The running actor of a user, if any (no start).
    pub fn running(&self, key: &UserKey) -> Option<ActorRef<UserMsg>> {
        self.actors.read().get(key).cloned()
    }

    /// Number of user actors running on this node.
    pub fn alive(&self) -> usize {
        self.actors.read().len()
    }

    /// Forgets the entry of `key` if it still names actor `id`.
    pub fn remove(&self, key: &UserKey, id: ActorId) {
        let mut actors = self.actors.write();
        if actors.get(key).is_some_and(|a| a.get_id() == id) {
            actors.remove(key);
        }
    }

    /// Records a (re)started actor.
    pub(crate) fn register(&self, key: UserKey, actor: ActorRef<UserMsg>) {
        self.actors.write().insert(key, actor);
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
        if let Some(actor) = self.running(key) {
            return Ok(actor);
        }
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
            directory,
        };
        let (supervisor, _) = Actor::spawn(None, ShardSupervisor, args)
            .await
            .map_err(|e| Error::Unavailable(format!("cannot start shard supervisor: {e}")))?;
        supervisors.insert(shard, supervisor.clone());
        Ok(supervisor)
    }
}
