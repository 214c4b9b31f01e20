//! The pool's router: one actor that owns the queue, forms batches and hands them to idle
//! workers, and supervises the workers.
//!
//! Batching rule: an interactive request (someone waits) leaves at once when an interactive
//! worker is idle (after `interactive_max_wait`, zero by default); otherwise a batch leaves when an idle worker exists and either `max_batch`
//! texts are waiting or the oldest request has waited `max_wait` (a self-addressed `Flush`
//! timer wakes the router for that deadline); while every worker is busy requests accumulate
//! and leave together as soon as one is idle. So a lone question costs its forward pass
//! only, and under load questions are batched with those that came while a pass ran. A batch takes whole requests in arrival order up to
//! `max_batch` texts (a single larger request goes alone; the encoder splits it into passes).
//! Admission and load shedding happen before a request reaches this actor (in the handle, on
//! an atomic counter), so the router's mailbox is bounded by the queue's capacity. The router
//! never runs a model and never blocks. The queue is one lane per caller key (the tenant),
//! served in turn, in two classes: interactive requests before background ones
//! ([`super::fair`]).
//!
//! Each model has an interactive and a background worker ([`Serves`]): a batch of interactive
//! requests goes to an idle interactive worker, a batch of background requests to an idle
//! background worker (or to an idle interactive one when the background class is normal). On
//! a GPU, background requests fill the room an interactive batch leaves; on the CPU they do
//! not, since a pass there costs what its texts cost: a query would wait for the passages
//! beside it, and they would run at normal priority, outside the background class and its
//! rests. Interactive requests that expired in the queue are skipped, and if none is left the
//! interactive worker takes nothing: the background requests behind them wait for their own
//! worker. A drain waits for the interactive workers only: a background batch has no caller
//! waiting, its texts stay pending in storage, and in the idle class a busy machine may not
//! let it finish for a long time.
//!
//! Supervision: workers are linked children. ractor stops a supervisor when a child dies
//! unless it overrides `handle_supervisor_evt`, which this one does: a dead worker is dropped
//! from the pool (its batch's callers were answered with `WorkerFailed`) and its siblings
//! carry on; when none is left the pool closes and queued callers get `WorkerFailed`.
//! Workers are not restarted (that would need a fresh encoder load).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use super::fair::{Queue, Shares};
use super::lanes::{BackgroundPriority, Threads};
use super::message::{Request, RouterMsg};
use super::stats::Metrics;
use super::worker::{EncoderWorker, Serves, WorkerArgs, WorkerMsg};
use crate::encoder::Encoder;
use crate::error::Error;

/// The router actor.
pub(crate) struct Router;

/// The router's start-up arguments.
pub(crate) struct RouterArgs {
    pub(crate) encoders: Vec<Encoder>,
    pub(crate) background: BackgroundPriority,
    /// [`super::PoolConfig::background_busy_share_percent`].
    pub(crate) busy_share_percent: u8,
    pub(crate) max_batch: usize,
    pub(crate) max_wait: Duration,
    /// [`super::PoolConfig::interactive_max_wait`].
    pub(crate) interactive_max_wait: Duration,
    /// [`super::PoolConfig::intra_op_threads`] (`None`: libtorch's default).
    pub(crate) intra_op_threads: Option<usize>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) shares: Arc<Shares>,
    pub(crate) closed: Arc<AtomicBool>,
    /// Where the workers register their threads.
    pub(crate) threads: Threads,
}

/// The router's state.
pub(crate) struct RouterState {
    /// Live workers and what each takes; `None` once dead.
    workers: Vec<Option<(ActorRef<WorkerMsg>, Serves)>>,
    idle: Vec<usize>,
    /// Whether interactive workers also take background-only batches (the background class
    /// is normal).
    background_anywhere: bool,
    /// Whether background requests fill the room an interactive batch leaves: only when an
    /// encoder runs on a GPU.
    fill_interactive: bool,
    queue: Queue,
    max_batch: usize,
    max_wait: Duration,
    interactive_max_wait: Duration,
    timer_armed: bool,
    /// Shutdown callers waiting for the drain; non-empty means draining.
    drain: Vec<RpcReplyPort<()>>,
    metrics: Arc<Metrics>,
    shares: Arc<Shares>,
    closed: Arc<AtomicBool>,
}

impl Actor for Router {
    type Msg = RouterMsg;
    type State = RouterState;
    type Arguments = RouterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RouterMsg>,
        args: RouterArgs,
    ) -> std::result::Result<RouterState, ActorProcessingErr> {
        let mut workers = Vec::with_capacity(2 * args.encoders.len());
        let fill_interactive = args.encoders.iter().any(|encoder| !encoder.on_cpu());
        for encoder in args.encoders {
            let shared = encoder.share();
            for (serves, encoder) in [(Serves::Interactive, shared), (Serves::Background, encoder)]
            {
                let worker_args = WorkerArgs {
                    index: workers.len(),
                    encoder,
                    serves,
                    background: args.background,
                    busy_share_percent: args.busy_share_percent,
                    router: myself.clone(),
                    metrics: Arc::clone(&args.metrics),
                    threads: args.threads.clone(),
                    closed: Arc::clone(&args.closed),
                    intra_op_threads: args.intra_op_threads,
                };
                let (worker, _) =
                    Actor::spawn_linked(None, EncoderWorker, worker_args, myself.get_cell())
                        .await?;
                workers.push(Some((worker, serves)));
            }
        }
        Ok(RouterState {
            idle: (0..workers.len()).rev().collect(),
            workers,
            background_anywhere: args.background == BackgroundPriority::Normal,
            fill_interactive,
            queue: Queue::default(),
            max_batch: args.max_batch.max(1),
            max_wait: args.max_wait,
            interactive_max_wait: args.interactive_max_wait,
            timer_armed: false,
            drain: Vec::new(),
            metrics: args.metrics,
            shares: args.shares,
            closed: args.closed,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<RouterMsg>,
        msg: RouterMsg,
        state: &mut RouterState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            RouterMsg::Embed(request) => state.queue.push(request),
            RouterMsg::Idle(index) => state.idle.push(index),
            RouterMsg::Flush => state.timer_armed = false,
            RouterMsg::Drain(reply) => {
                // Nobody waits for background work, and its callers keep it durably (the
                // pipeline's pending entries): a closing pool answers it without running it,
                // since in the idle class it might not get the CPU to finish for a long time.
                let background: Vec<Request> = state.queue.drain_background().collect();
                for request in background {
                    state.take_queued(&request);
                    request.answer(&state.metrics, Err(Error::PoolClosed));
                }
                state.drain.push(reply);
            }
        }
        state.pump(&myself);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RouterMsg>,
        event: SupervisionEvent,
        state: &mut RouterState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // `if let`, not `match`: the enum grows a variant under ractor's `cluster` feature.
        let (SupervisionEvent::ActorTerminated(cell, _, _)
        | SupervisionEvent::ActorFailed(cell, _)) = &event
        else {
            return Ok(());
        };
        let dead = cell.get_id();
        let Some(index) = state
            .workers
            .iter()
            .position(|w| w.as_ref().is_some_and(|(w, _)| w.get_id() == dead))
        else {
            return Ok(());
        };
        tracing::error!(
            worker = index,
            "embedding worker died; its siblings carry on"
        );
        let serves = state.workers[index].take().map(|(_, serves)| serves);
        state.idle.retain(|&i| i != index);
        if serves == Some(Serves::Background)
            && !state
                .workers
                .iter()
                .any(|w| matches!(w, Some((_, Serves::Background))))
        {
            // Background work must still run somewhere: on the interactive workers now.
            state.background_anywhere = true;
        }
        if state.workers.iter().all(Option::is_none) {
            state.closed.store(true, Ordering::Release);
            tracing::error!("no embedding worker left; the pool is closed");
            let waiting: Vec<Request> = state.queue.drain().collect();
            for request in waiting {
                state.take_queued(&request);
                request.answer(&state.metrics, Err(Error::WorkerFailed));
            }
        }
        state.pump(&myself);
        Ok(())
    }
}

impl RouterState {
    /// Hands out every batch that is due, arms the deadline timer for the rest, and finishes
    /// a drain once nothing is queued or running.
    fn pump(&mut self, myself: &ActorRef<RouterMsg>) {
        while !self.queue.is_empty() && self.batch_due() {
            let Some((index, batch)) = self.next_batch() else {
                break;
            };
            let Some((worker, _)) = self.workers[index].clone() else {
                continue;
            };
            // A failed send means the worker died meanwhile: its supervision event removes it.
            // (Other send errors carry no message back; their callers see `PoolClosed`.)
            if let Err(ractor::MessagingErr::SendErr(WorkerMsg::Run(batch))) =
                worker.cast(WorkerMsg::Run(batch))
            {
                self.fail_batch(batch);
            }
        }
        // Only when an idle worker takes what waits: otherwise the next `Idle` pumps again.
        if let Some(oldest) = self.queue.oldest()
            && !self.timer_armed
            && self.pick().is_some()
        {
            let limit = if self.queue.has_interactive() && self.interactive_worker_idle() {
                self.max_wait.min(self.interactive_max_wait)
            } else {
                self.max_wait
            };
            let wait = (oldest + limit).saturating_duration_since(Instant::now());
            self.timer_armed = true;
            myself.send_after(wait, || RouterMsg::Flush);
        }
        if !self.drain.is_empty() && self.queue.is_empty() && self.interactive_idle() {
            for (index, slot) in self.workers.iter().enumerate() {
                let Some((worker, _)) = slot else { continue };
                if self.idle.contains(&index) {
                    worker.stop(None);
                } else {
                    // A background batch nobody waits for: its thread stops it at the next
                    // pass (the pool is closed) and drops it.
                    worker.kill();
                }
            }
            for reply in self.drain.drain(..) {
                let _ = reply.send(());
            }
            myself.stop(None);
        }
    }

    /// An idle worker and the batch it takes now, interactive work first; `None` when no idle
    /// worker takes what is queued. A pick whose requests had all expired is dropped and the
    /// next one made (each such pick took at least one request out of the queue).
    fn next_batch(&mut self) -> Option<(usize, Vec<Request>)> {
        loop {
            let (position, class) = self.pick()?;
            let index = self.idle.remove(position);
            let batch = self.take_batch(class);
            if !batch.is_empty() {
                return Some((index, batch));
            }
            self.idle.push(index);
        }
    }

    /// Which idle worker (its place in `idle`) takes the next batch, and which class of
    /// requests the batch takes.
    fn pick(&self) -> Option<(usize, Serves)> {
        let idle_serving = |serves: Serves| {
            self.idle.iter().position(|&i| {
                self.workers[i]
                    .as_ref()
                    .is_some_and(|(_, kind)| *kind == serves)
            })
        };
        let interactive = self
            .queue
            .has_interactive()
            .then(|| idle_serving(Serves::Interactive))
            .flatten();
        let background = || {
            if !self.queue.has_background() {
                return None;
            }
            idle_serving(Serves::Background).or_else(|| {
                self.background_anywhere
                    .then(|| idle_serving(Serves::Interactive))
                    .flatten()
            })
        };
        match interactive {
            Some(p) => Some((p, Serves::Interactive)),
            None => background().map(|p| (p, Serves::Background)),
        }
    }

    /// Whether some live interactive worker is idle.
    fn interactive_worker_idle(&self) -> bool {
        self.idle
            .iter()
            .any(|&i| matches!(self.workers[i], Some((_, Serves::Interactive))))
    }

    /// Whether every live interactive worker is idle.
    fn interactive_idle(&self) -> bool {
        self.workers.iter().enumerate().all(|(i, slot)| {
            !matches!(slot, Some((_, Serves::Interactive))) || self.idle.contains(&i)
        })
    }

    /// Whether what waits leaves now. Someone waits for an interactive request, so it waits
    /// for batch-mates at most `interactive_max_wait` (by default not at all) while an
    /// interactive worker is idle: batching happens while the workers are busy (what arrives
    /// meanwhile leaves together with the next idle one). Background requests wait up to
    /// `max_wait` to fill a batch.
    fn batch_due(&self) -> bool {
        let waited = |wait: Duration| {
            self.queue
                .oldest()
                .is_some_and(|oldest| oldest.elapsed() >= wait)
        };
        !self.drain.is_empty()
            || self.queue.texts() >= self.max_batch
            || (self.queue.has_interactive()
                && self.interactive_worker_idle()
                && waited(self.interactive_max_wait))
            || self
                .queue
                .oldest()
                .is_some_and(|oldest| oldest.elapsed() >= self.max_wait)
    }

    /// Whole requests of `class` up to `max_batch` texts (at least one request unless every
    /// queued one had expired), one key at a time in turn; an interactive batch on a GPU is
    /// filled with background requests. Expired requests are answered [`Error::Expired`] and
    /// counted instead of embedded.
    fn take_batch(&mut self, class: Serves) -> Vec<Request> {
        let now = Instant::now();
        let mut batch = Vec::new();
        while batch.is_empty() {
            let taken = match class {
                Serves::Interactive => self.queue.take_interactive(self.max_batch),
                Serves::Background => self.queue.take_background(self.max_batch),
            };
            if taken.is_empty() {
                break;
            }
            self.keep_live(taken, now, &mut batch);
        }
        let texts = |batch: &[Request]| batch.iter().map(|r| r.texts.len()).sum::<usize>();
        if class == Serves::Interactive && self.fill_interactive && !batch.is_empty() {
            let fill = self
                .queue
                .fill(self.max_batch.saturating_sub(texts(&batch)));
            self.keep_live(fill, now, &mut batch);
        }
        let texts = texts(&batch);
        for request in &batch {
            self.take_queued(request);
        }
        self.metrics
            .in_flight_texts
            .fetch_add(texts as u64, Ordering::Relaxed);
        self.metrics.record_batch(texts);
        batch
    }

    /// Moves the requests of `taken` still wanted at `now` into `batch`; answers the expired
    /// ones [`Error::Expired`] and counts them.
    fn keep_live(&self, taken: Vec<Request>, now: Instant, batch: &mut Vec<Request>) {
        for request in taken {
            if request.expires.is_some_and(|at| at <= now) {
                self.take_queued(&request);
                self.metrics.expired.fetch_add(1, Ordering::Relaxed);
                let _ = request.reply.send(Err(Error::Expired));
            } else {
                batch.push(request);
            }
        }
    }

    /// Counts `request`'s texts out of the queue (they left it for a worker or an answer).
    fn take_queued(&self, request: &Request) {
        let n = request.texts.len() as u64;
        self.shares.release(&request.key, n);
        self.metrics.queued_texts.fetch_sub(n, Ordering::Relaxed);
    }

    fn fail_batch(&mut self, batch: Vec<Request>) {
        for request in batch {
            self.metrics
                .in_flight_texts
                .fetch_sub(request.texts.len() as u64, Ordering::Relaxed);
            request.answer(&self.metrics, Err(Error::WorkerFailed));
        }
    }
}
