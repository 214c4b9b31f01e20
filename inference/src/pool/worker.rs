//! A pool worker: one actor owning one [`Encoder`], running one batch at a time on its
//! own thread ([`super::lanes`]).
//!
//! Each loaded model serves two workers, on the same weights ([`Encoder::share`]): an
//! interactive one, whose thread runs at the process's normal priority and takes every
//! batch with a request someone waits for, and a background one, whose thread is in the
//! idle class when [`BackgroundPriority::Idle`] and takes the pipeline's background-only
//! batches. A background batch starved by a busy machine therefore never holds up a write
//! or a query waiting for its embedding. The encoder is `Send` but not `Sync`, so it lives
//! in the actor's state and is moved onto the thread for each batch and back again; the
//! forward pass never runs on an async thread, and the actor's mailbox waits meanwhile. The
//! worker tokenizes every request of the batch with its own role, runs them together (the
//! encoder sorts them by length and pads each forward pass to its longest text), answers
//! each caller, and tells the router it is idle. It does not queue, batch or shed: that is
//! the router's job. A background worker's batch stops between forward passes once the pool
//! closes (nobody waits for it; its texts stay pending in storage), so a stopping pool's
//! threads end within one pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::Priority;
use super::lanes::{BackgroundPriority, Lane, Threads};
use super::message::{Request, RouterMsg};
use super::rest::{Load, Rest, busy_pause};
use super::stats::Metrics;
use crate::config::TextRole;
use crate::encoder::Encoder;
use crate::error::{Error, Result};

/// What a worker is asked to do.
pub(crate) enum WorkerMsg {
    /// Embed these requests in one go and answer each.
    Run(Vec<Request>),
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for WorkerMsg {}

/// The worker actor.
pub(crate) struct EncoderWorker;

/// Which batches a worker takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Serves {
    /// Batches with an interactive request (and background requests in the room they
    /// leave); background-only batches too when the background class is normal.
    Interactive,
    /// Background-only batches, on a thread of the background class.
    Background,
}

impl Serves {
    /// Whether a worker of this kind rests after its batches while the machine is busy
    /// ([`super::rest::busy_pause`]): the background one, where background work rests
    /// ([`super::rest::rests`]).
    pub(crate) fn rests(self, background: BackgroundPriority, on_cpu: bool) -> bool {
        self == Serves::Background && super::rest::rests(background, on_cpu)
    }
}

/// A worker's start-up arguments.
pub(crate) struct WorkerArgs {
    pub(crate) index: usize,
    pub(crate) encoder: Encoder,
    pub(crate) serves: Serves,
    pub(crate) background: BackgroundPriority,
    /// [`super::PoolConfig::background_busy_share_percent`].
    pub(crate) busy_share_percent: u8,
    pub(crate) router: ActorRef<RouterMsg>,
    pub(crate) metrics: Arc<Metrics>,
    /// Where the lane's thread is registered.
    pub(crate) threads: Threads,
    /// Set when the pool closes.
    pub(crate) closed: Arc<AtomicBool>,
    /// [`super::PoolConfig::intra_op_threads`] (`None`: libtorch's default).
    pub(crate) intra_op_threads: Option<usize>,
}

/// A worker's state: the encoder sits here between batches.
pub(crate) struct WorkerState {
    index: usize,
    serves: Serves,
    encoder: Option<Encoder>,
    /// The thread batches run on.
    lane: Lane,
    /// The pool's closed flag, for a background worker: its batch stops between passes once
    /// the pool closes. `None` for an interactive worker, whose callers wait.
    cancel: Option<Arc<AtomicBool>>,
    /// The share of a busy machine's time an idle-class background worker's batches may
    /// take ([`busy_pause`]); `None` for every other worker.
    busy_share_percent: Option<u8>,
    router: ActorRef<RouterMsg>,
    metrics: Arc<Metrics>,
}

impl Actor for EncoderWorker {
    type Msg = WorkerMsg;
    type State = WorkerState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> std::result::Result<WorkerState, ActorProcessingErr> {
        let idle = args.background == BackgroundPriority::Idle;
        let busy_share_percent = args
            .serves
            .rests(args.background, args.encoder.on_cpu())
            .then_some(args.busy_share_percent);
        let (lane, cancel) = match args.serves {
            Serves::Interactive => (
                Lane::start(
                    format!("embed-{}", args.index),
                    false,
                    args.intra_op_threads,
                    &args.threads,
                )?,
                None,
            ),
            Serves::Background => (
                Lane::start(
                    format!("embed-{}-bg", args.index),
                    idle,
                    args.intra_op_threads,
                    &args.threads,
                )?,
                Some(args.closed),
            ),
        };
        if args.serves == Serves::Interactive && args.encoder.on_cpu() {
            // What someone waits for may take a second core's help with its int8 products.
            lane.run(crate::linear::help_this_thread).await;
        }
        Ok(WorkerState {
            index: args.index,
            serves: args.serves,
            encoder: Some(args.encoder),
            lane,
            cancel,
            busy_share_percent,
            router: args.router,
            metrics: args.metrics,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        state: &mut WorkerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Run(requests) => state.run(requests).await,
        }
    }
}

/// What the blocking thread hands back: the encoder, the vectors or the error, and what the
/// machine and the lane's threads did meanwhile.
type Outcome = (Encoder, Result<(Vec<Vec<f32>>, usize, usize)>, Option<Load>);

impl WorkerState {
    async fn run(
        &mut self,
        mut requests: Vec<Request>,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let counts: Vec<usize> = requests.iter().map(|r| r.texts.len()).collect();
        let texts: usize = counts.iter().sum();
        let lane_texts = match self.serves {
            Serves::Interactive => &self.metrics.interactive_lane_texts,
            Serves::Background => &self.metrics.background_lane_texts,
        };
        lane_texts.fetch_add(texts as u64, Ordering::Relaxed);
        let Some(encoder) = self.encoder.take() else {
            // Unreachable: the encoder is only missing after a panic, which stops the actor.
            return Err("worker has no encoder".into());
        };
        // The texts travel to the blocking thread; the reply ports stay here, so every
        // caller is answered even if the forward pass panics.
        let inputs: Vec<_> = requests
            .iter_mut()
            .map(|r| (std::mem::take(&mut r.texts), r.role))
            .collect();
        let cancel = self.cancel.clone();
        // Only a worker that may rest reads the machine's and its threads' CPU times.
        let measure = self.busy_share_percent.is_some();
        // A question someone waits for, embedded on the CPU, holds background decoding back
        // ([`crate::foreground`]); writes' passages and topic phrases do not.
        let question = encoder.on_cpu()
            && requests
                .iter()
                .any(|r| r.priority == Priority::Interactive && r.role == TextRole::Query);
        let started = Instant::now();
        let joined = self
            .lane
            .run(move || -> Outcome {
                let before = measure.then(Load::now).flatten();
                let pass = question.then(crate::foreground::Question::begin);
                let result = embed_all(&encoder, &inputs, cancel.as_deref());
                drop(pass);
                let load = before
                    .zip(Load::now())
                    .map(|(before, after)| after.since(before));
                (encoder, result, load)
            })
            .await;
        let wall = started.elapsed();
        self.metrics
            .in_flight_texts
            .fetch_sub(texts as u64, Ordering::Relaxed);
        let Some((encoder, result, load)) = joined else {
            tracing::error!(worker = self.index, texts, "forward pass panicked");
            for request in requests {
                request.answer(&self.metrics, Err(Error::WorkerFailed));
            }
            return Err("forward pass panicked".into());
        };
        self.encoder = Some(encoder);
        match result {
            Ok((vectors, passes, tokens)) => {
                self.metrics
                    .forward_passes
                    .fetch_add(passes as u64, Ordering::Relaxed);
                self.metrics
                    .tokens
                    .fetch_add(tokens as u64, Ordering::Relaxed);
                let mut vectors = vectors.into_iter();
                for (request, count) in requests.into_iter().zip(counts) {
                    let mine: Vec<Vec<f32>> = vectors.by_ref().take(count).collect();
                    request.answer(&self.metrics, Ok(mine));
                }
            }
            Err(Error::PoolClosed) => {
                for request in requests {
                    request.answer(&self.metrics, Err(Error::PoolClosed));
                }
            }
            Err(err) => {
                tracing::warn!(worker = self.index, texts, error = %err, "batch failed");
                let shared = Arc::new(err);
                for request in requests {
                    request.answer(&self.metrics, Err(Error::BatchFailed(Arc::clone(&shared))));
                }
            }
        }
        if let Some(share) = self.busy_share_percent {
            let pause = busy_pause(wall, load, share);
            rest(pause, self.cancel.clone(), Arc::clone(&self.metrics)).await;
        }
        // If the router is gone the pool is stopping and this worker with it.
        let _ = self.router.cast(RouterMsg::Idle(self.index));
        Ok(())
    }
}

/// Rests `pause` before a background worker takes its next batch (the router sends none until
/// the worker says it is idle), or less once the pool closes (`closed`) or the machine is
/// quiet ([`Rest`]); counts what it rested.
async fn rest(pause: Duration, closed: Option<Arc<AtomicBool>>, metrics: Arc<Metrics>) {
    if pause.is_zero() {
        return;
    }
    let mut rest = Rest::new(pause);
    while let Some(slice) = rest.next_slice(
        closed
            .as_ref()
            .is_some_and(|closed| closed.load(Ordering::Relaxed)),
    ) {
        tokio::time::sleep(slice).await;
    }
    metrics
        .background_rest_us
        .fetch_add(rest.rested().as_micros() as u64, Ordering::Relaxed);
}

/// Tokenizes each request with its role and embeds all of them together; returns the vectors
/// in request order, the number of forward passes and the number of tokens, or
/// [`Error::PoolClosed`] when `cancel` was set before a pass.
fn embed_all(
    encoder: &Encoder,
    inputs: &[(Vec<String>, crate::TextRole)],
    cancel: Option<&AtomicBool>,
) -> Result<(Vec<Vec<f32>>, usize, usize)> {
    let mut ids = Vec::new();
    for (texts, role) in inputs {
        ids.extend(encoder.tokenize(texts, *role)?);
    }
    let tokens = ids.iter().map(Vec::len).sum();
    let (vectors, passes) = encoder.embed_ids(&ids, cancel)?;
    Ok((vectors, passes, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the idle-class background worker rests, and only with its encoder on the CPU.
    #[test]
    fn only_a_background_worker_on_the_cpu_rests() {
        let (idle, normal) = (BackgroundPriority::Idle, BackgroundPriority::Normal);
        assert!(Serves::Background.rests(idle, true));
        assert!(!Serves::Background.rests(idle, false), "a GPU batch rested");
        assert!(!Serves::Background.rests(normal, true));
        assert!(!Serves::Interactive.rests(idle, true));
        assert!(!Serves::Interactive.rests(idle, false));
    }
}
