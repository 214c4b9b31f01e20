//! Supervised worker threads, the shape of the generation pool and of the reranker's pool: a
//! supervisor actor with one worker actor per device, each worker owning one OS thread that
//! runs the model (a forward pass never runs on an async thread).
//!
//! The queue is not the supervisor's: it stays in the pool's shared state (its admission,
//! fair shares and deadlines), and a worker's thread takes work from it as fast as its model
//! allows (the generation pool's continuous batching takes requests between two decoding
//! steps, which a message per batch to an actor could not do without a step's delay). What
//! the actors add is supervision. A worker's thread tells its actor when it ends; if it
//! ended by a panic (a failed step, a failed load that panicked), the worker actor fails,
//! and the supervisor, whose `handle_supervisor_evt` catches it, first puts the failed
//! worker's unanswered requests back in the queue ([`Work::requeue`]: each pool keeps the
//! requests a worker holds outside that worker's thread, so a panic drops none) and then
//! starts a new worker for the same device, whose thread loads the model again (or shares the
//! weights already loaded) and answers them. A worker whose thread ended because the pool
//! closed stops, and the supervisor stops once none is left, which is what a pool's `join`
//! waits for.
//!
//! Why not `ractor::factory`: a factory hands a worker one job per call and counts it busy
//! until the call returns, so a worker could neither batch several jobs nor admit new ones
//! between two steps of a running batch (as [`crate::pool`] explains for the embedding pool).
//!
//! Fault injection, for the tests of restarts only (compiled under `cfg(test)` or the
//! `fault-injection` feature): [`Supervised::fail`] makes a worker's thread panic at its
//! next unit of work, the way a failed step would.

use std::marker::PhantomData;
use std::sync::Arc;

#[cfg(any(test, feature = "fault-injection"))]
use ractor::RpcReplyPort;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

/// How many times a request is put back in the queue after the worker running it failed;
/// past that it is answered [`Error::WorkerFailed`] (a request that fails every worker it
/// meets must not restart them forever).
pub(crate) const REQUEUES_PER_REQUEST: u32 = 2;

/// What a supervised pool's workers do.
pub(crate) trait Work: Send + Sync + 'static {
    /// The name of worker `index`'s thread.
    fn thread_name(&self, index: usize) -> String;

    /// Worker `index`'s loop, on its own thread; returns once the pool is closed. A panic
    /// ends the thread and fails the worker.
    fn run(self: Arc<Self>, index: usize);

    /// Whether the pool is closed (a failed worker is then not restarted).
    fn closed(&self) -> bool;

    /// Puts back in the queue the requests worker `index` held when it failed (or answers
    /// them, once the pool is closed or past [`REQUEUES_PER_REQUEST`]); how many went back.
    fn requeue(&self, index: usize) -> usize;

    /// Counts a restart.
    fn restarted(&self);

    /// Makes worker `index`'s thread panic at its next unit of work.
    #[cfg(any(test, feature = "fault-injection"))]
    fn inject_fault(&self, index: usize);
}

/// The supervisor's messages.
pub(crate) enum SupervisorMsg {
    /// Fault injection: worker `index` panics at its next unit of work; answered once that
    /// is set.
    #[cfg(any(test, feature = "fault-injection"))]
    Fail(usize, RpcReplyPort<()>),
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for SupervisorMsg {}

/// A worker's message from its own thread.
pub(crate) enum WorkerMsg {
    /// The thread ended, by a panic or because the pool closed.
    Ended { panicked: bool },
}

// Local only.
impl ractor::Message for WorkerMsg {}

/// A running supervisor and its workers.
pub(crate) struct Supervised {
    /// For fault injection only.
    #[cfg_attr(not(any(test, feature = "fault-injection")), allow(dead_code))]
    supervisor: ActorRef<SupervisorMsg>,
    handle: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Supervised {
    /// Starts the supervisor and one worker per entry of `workers` (a device each), inside
    /// the current tokio runtime.
    pub(crate) async fn start<W: Work>(work: Arc<W>, workers: usize) -> Result<Supervised> {
        let args = SupervisorArgs {
            work,
            workers: workers.max(1),
        };
        let (supervisor, handle) = Actor::spawn(None, Supervisor(PhantomData), args)
            .await
            .map_err(|err| Error::PoolStart {
                reason: format!("the pool's supervisor did not start: {err}"),
            })?;
        Ok(Supervised {
            supervisor,
            handle: tokio::sync::Mutex::new(Some(handle)),
        })
    }

    /// Waits until the supervisor has stopped: every worker's thread has ended (the pool was
    /// closed first).
    pub(crate) async fn join(&self) {
        if let Some(handle) = self.handle.lock().await.take() {
            let _ = handle.await;
        }
    }

    /// Fault injection: worker `index`'s thread panics at its next unit of work (set when
    /// this returns).
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) async fn fail(&self, index: usize) -> Result<()> {
        self.supervisor
            .call(|reply| SupervisorMsg::Fail(index, reply), None)
            .await
            .map_err(|_| Error::PoolClosed)?
            .success_or(Error::PoolClosed)
    }
}

struct Supervisor<W>(PhantomData<W>);

struct SupervisorArgs<W> {
    work: Arc<W>,
    workers: usize,
}

struct SupervisorState<W> {
    work: Arc<W>,
    /// Each device's worker; `None` once it has stopped for good.
    workers: Vec<Option<ActorRef<WorkerMsg>>>,
}

impl<W: Work> SupervisorState<W> {
    async fn spawn_worker(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        index: usize,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let args = WorkerArgs {
            work: Arc::clone(&self.work),
            index,
        };
        let (worker, _) =
            Actor::spawn_linked(None, ThreadWorker(PhantomData), args, myself.get_cell()).await?;
        self.workers[index] = Some(worker);
        Ok(())
    }
}

impl<W: Work> Actor for Supervisor<W> {
    type Msg = SupervisorMsg;
    type State = SupervisorState<W>;
    type Arguments = SupervisorArgs<W>;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs<W>,
    ) -> std::result::Result<SupervisorState<W>, ActorProcessingErr> {
        let mut state = SupervisorState {
            work: args.work,
            workers: vec![None; args.workers],
        };
        for index in 0..args.workers {
            state.spawn_worker(&myself, index).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState<W>,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let _ = &state;
        match msg {
            #[cfg(any(test, feature = "fault-injection"))]
            SupervisorMsg::Fail(index, reply) => {
                state.work.inject_fault(index);
                let _ = reply.send(());
                Ok(())
            }
        }
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState<W>,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // `if let`, not `match`: the enum grows a variant under ractor's `cluster` feature.
        let failed = matches!(event, SupervisionEvent::ActorFailed(..));
        let (SupervisionEvent::ActorTerminated(cell, _, _)
        | SupervisionEvent::ActorFailed(cell, _)) = &event
        else {
            return Ok(());
        };
        let dead = cell.get_id();
        let Some(index) = state
            .workers
            .iter()
            .position(|w| w.as_ref().is_some_and(|w| w.get_id() == dead))
        else {
            return Ok(());
        };
        state.workers[index] = None;
        if failed {
            let requeued = state.work.requeue(index);
            if state.work.closed() {
                tracing::warn!(
                    worker = index,
                    "a worker failed while the pool closed; not restarted"
                );
            } else {
                tracing::error!(
                    worker = index,
                    requeued,
                    "a worker failed; it is restarted and its requests queued again"
                );
                state.work.restarted();
                state.spawn_worker(&myself, index).await?;
            }
        }
        if state.workers.iter().all(Option::is_none) {
            myself.stop(None);
        }
        Ok(())
    }
}

struct ThreadWorker<W>(PhantomData<W>);

struct WorkerArgs<W> {
    work: Arc<W>,
    index: usize,
}

struct WorkerState {
    index: usize,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Tells the worker actor that its thread ended, and how, even when it unwinds.
struct EndGuard(ActorRef<WorkerMsg>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        let panicked = std::thread::panicking();
        let _ = self.0.cast(WorkerMsg::Ended { panicked });
    }
}

impl<W: Work> Actor for ThreadWorker<W> {
    type Msg = WorkerMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs<W>;

    async fn pre_start(
        &self,
        myself: ActorRef<WorkerMsg>,
        args: WorkerArgs<W>,
    ) -> std::result::Result<WorkerState, ActorProcessingErr> {
        let guard = EndGuard(myself);
        let (work, index) = (args.work, args.index);
        let thread = std::thread::Builder::new()
            .name(work.thread_name(index))
            .spawn(move || {
                let _guard = guard;
                work.run(index);
            })?;
        Ok(WorkerState {
            index,
            thread: Some(thread),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let WorkerMsg::Ended { panicked } = msg;
        // The thread is ending (its guard spoke last): wait for it, off the async threads.
        if let Some(thread) = state.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        if panicked {
            return Err(format!("worker {}'s thread panicked", state.index).into());
        }
        myself.stop(None);
        Ok(())
    }
}

/// The devices a pool puts one worker on: the CPU; the configured CUDA device; under `auto`,
/// every CUDA device there is (the CPU where there is none).
pub(crate) fn devices(choice: crate::config::DeviceChoice) -> Result<Vec<tch::Device>> {
    use crate::config::DeviceChoice;
    let available = crate::cuda_devices();
    match choice {
        DeviceChoice::Auto if available > 0 => Ok((0..available).map(tch::Device::Cuda).collect()),
        DeviceChoice::Auto | DeviceChoice::Cpu => Ok(vec![tch::Device::Cpu]),
        DeviceChoice::Cuda(index) if index < available => Ok(vec![tch::Device::Cuda(index)]),
        DeviceChoice::Cuda(index) => Err(Error::DeviceUnavailable { index, available }),
    }
}
