//! One supervisor per shard: it starts the shard's user actors, restarts one that fails (the
//! new actor reloads its state from storage) and leaves its siblings alone, and forgets one
//! that stopped normally (passivation, forgetting). A user whose actor keeps failing is left
//! stopped after `max_restarts` within `restart_window`; its next request starts it afresh.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ractor::{
    Actor, ActorId, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SupervisionEvent,
};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::placement::UserKey;
use crate::roster::Roster;
use crate::services::Services;
use crate::tenant::TenantActor;
use crate::user::{UserActor, UserArgs, UserMsg};

/// Messages of a shard supervisor.
#[derive(Debug)]
pub enum SupervisorMsg {
    /// The running actor of a user, started if needed.
    Start(UserKey, RpcReplyPort<Result<ActorRef<UserMsg>>>),
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for SupervisorMsg {}

/// The shard supervisor.
#[derive(Debug)]
pub struct ShardSupervisor;

/// What a shard supervisor starts with.
#[derive(Debug, Clone)]
pub struct SupervisorArgs {
    /// Its shard.
    pub shard: u32,
    /// Shared handles.
    pub services: Services,
    /// The node's table of live actors.
    pub roster: Arc<dyn Roster>,
}

/// The supervisor's state: its children by user and by actor id, and recent restarts.
pub struct SupervisorState {
    args: SupervisorArgs,
    children: HashMap<UserKey, ActorRef<UserMsg>>,
    by_id: HashMap<ActorId, UserKey>,
    restarts: HashMap<UserKey, VecDeque<Instant>>,
}

impl SupervisorState {
    async fn start(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        key: UserKey,
    ) -> Result<ActorRef<UserMsg>> {
        let args = UserArgs {
            key: key.clone(),
            services: self.args.services.clone(),
            roster: Arc::clone(&self.args.roster),
        };
        let spawned = if key.is_shared() {
            Actor::spawn_linked(None, TenantActor, args, myself.get_cell()).await
        } else {
            Actor::spawn_linked(None, UserActor, args, myself.get_cell()).await
        };
        let (actor, _) =
            spawned.map_err(|e| Error::Unavailable(format!("cannot start user actor: {e}")))?;
        self.by_id.insert(actor.get_id(), key.clone());
        self.children.insert(key, actor.clone());
        Ok(actor)
    }

    fn forget_child(&mut self, id: ActorId) -> Option<UserKey> {
        let key = self.by_id.remove(&id)?;
        if self.children.get(&key).is_some_and(|a| a.get_id() == id) {
            self.children.remove(&key);
        }
        self.args.roster.left(&key, id);
        Some(key)
    }

    fn may_restart(&mut self, key: &UserKey) -> bool {
        let settings = &self.args.services.settings;
        let now = Instant::now();
        let recent = self.restarts.entry(key.clone()).or_default();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > settings.restart_window)
        {
            recent.pop_front();
        }
        if recent.len() as u32 >= settings.max_restarts {
            return false;
        }
        recent.push_back(now);
        true
    }
}

impl Actor for ShardSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState {
            args,
            children: HashMap::new(),
            by_id: HashMap::new(),
            restarts: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Start(key, reply) => {
                let running = state
                    .children
                    .get(&key)
                    .filter(|a| {
                        matches!(a.get_status(), ActorStatus::Starting | ActorStatus::Running)
                    })
                    .cloned();
                let result = match running {
                    Some(actor) => Ok(actor),
                    None => state.start(&myself, key).await,
                };
                let _ = reply.send(result);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.forget_child(cell.get_id());
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let metrics = state.args.services.metrics.clone();
                metrics.failures.fetch_add(1, Ordering::Relaxed);
                let Some(key) = state.forget_child(cell.get_id()) else {
                    return Ok(());
                };
                let shard = state.args.shard;
                if !state.may_restart(&key) {
                    tracing::warn!(shard, user = %state.args.services.log_id(&key), %error, "user actor keeps failing; left stopped");
                    return Ok(());
                }
                tracing::warn!(shard, user = %state.args.services.log_id(&key), %error, "user actor failed; restarting from storage");
                match state.start(&myself, key.clone()).await {
                    Ok(actor) => {
                        metrics.restarts.fetch_add(1, Ordering::Relaxed);
                        state.args.roster.restarted(key, actor.get_cell());
                    }
                    Err(err) => {
                        tracing::warn!(shard, user = %state.args.services.log_id(&key), %err, "restart failed")
                    }
                }
            }
            SupervisionEvent::ActorStarted(_)
            | SupervisionEvent::ProcessGroupChanged(_)
            | SupervisionEvent::PidLifecycleEvent(_) => {}
        }
        Ok(())
    }
}
