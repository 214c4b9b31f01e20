//! A second core for the int8 products of a question someone waits for.
//!
//! A lone question's pass is mostly its int8 products, one thread each. A thread that asks
//! for help ([`help_this_thread`]: the embedding pool's interactive lanes) hands the second
//! half of each product's output columns to one helper thread of the process and computes
//! the first half itself. The helper helps only when it is free: if it has not taken the half
//! by the time the asking thread has finished its own, the asking thread takes it back and
//! computes it too, so a busy machine (or a second asking thread) costs no wait beyond a half
//! the helper already started. Products are exact int32 sums either way, so the split changes
//! no result.
//!
//! After each half the helper spins a little before sleeping: a pass's products come tens of
//! microseconds apart, and waking a sleeping thread costs about as much as a half.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tch::Tensor;

use crate::error::{Error, Result};

/// How long the helper spins for the next half before sleeping.
const SPIN: Duration = Duration::from_micros(200);

thread_local! {
    static HELPED: Cell<bool> = const { Cell::new(false) };
}

/// Lets the calling thread's int8 products use the helper, where the machine has more than
/// one core.
pub(crate) fn help_this_thread() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    HELPED.with(|helped| helped.set(cores > 1));
}

/// Whether the calling thread's products may use the helper.
pub(crate) fn helped() -> bool {
    HELPED.with(Cell::get)
}

/// A half of a product, computed where it is taken.
pub(crate) type Half = Box<dyn FnOnce() -> Result<Tensor> + Send>;

#[derive(Default)]
struct Slot {
    /// The half posted and not yet taken.
    posted: Option<Half>,
    /// Whether the helper is computing a half.
    running: bool,
    /// The helper's answer, for the poster.
    done: Option<Result<Tensor>>,
}

struct Helper {
    slot: Mutex<Slot>,
    /// Wakes the helper (a half posted) and the poster (a half done).
    wake: Condvar,
    /// Set while a half is posted, for the helper's spin.
    pending: AtomicBool,
    /// Set when the helper's answer is in `done`, for the poster's spin.
    finished: AtomicBool,
}

impl Helper {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        tch::set_num_threads(1);
        loop {
            let spun = Instant::now();
            while !self.pending.load(Ordering::Acquire) && spun.elapsed() < SPIN {
                std::hint::spin_loop();
            }
            let mut slot = self.lock();
            let Some(half) = slot.posted.take() else {
                // Nothing posted (or taken back): sleep until a post, then spin again.
                drop(self.wake.wait(slot).unwrap_or_else(PoisonError::into_inner));
                continue;
            };
            self.pending.store(false, Ordering::Release);
            slot.running = true;
            drop(slot);
            let _guard = tch::no_grad_guard();
            let answer = std::panic::catch_unwind(AssertUnwindSafe(half)).unwrap_or_else(|_| {
                Err(Error::Quantise(
                    "the int8 helper's half panicked".to_owned(),
                ))
            });
            HELPED_HALVES.fetch_add(1, Ordering::Relaxed);
            let mut slot = self.lock();
            slot.running = false;
            slot.done = Some(answer);
            self.finished.store(true, Ordering::Release);
            drop(slot);
            self.wake.notify_all();
        }
    }
}

/// Halves the helper has computed, for tests.
static HELPED_HALVES: AtomicU64 = AtomicU64::new(0);

/// How many halves the helper has computed since the process started.
#[cfg(test)]
pub(crate) fn helped_halves() -> u64 {
    HELPED_HALVES.load(Ordering::Relaxed)
}

/// The process's helper, started at the first use; `None` where its thread could not start.
fn helper() -> Option<&'static Helper> {
    static HELPER: OnceLock<Option<&'static Helper>> = OnceLock::new();
    *HELPER.get_or_init(|| {
        let helper: &'static Helper = Box::leak(Box::new(Helper {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
            pending: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        }));
        std::thread::Builder::new()
            .name("int8-helper".to_owned())
            .spawn(move || helper.run())
            .ok()
            .map(|_| helper)
    })
}

/// `(mine(), theirs())`: `theirs` on the helper where it is free to take it while `mine` runs
/// here, else both here.
pub(crate) fn split<T>(mine: impl FnOnce() -> T, theirs: Half) -> (T, Result<Tensor>) {
    let Some(helper) = helper() else {
        return (mine(), theirs());
    };
    {
        let mut slot = helper.lock();
        if slot.posted.is_some() || slot.running || slot.done.is_some() {
            // Another thread's half has the helper.
            drop(slot);
            return (mine(), theirs());
        }
        slot.posted = Some(theirs);
        helper.finished.store(false, Ordering::Release);
        helper.pending.store(true, Ordering::Release);
    }
    helper.wake.notify_all();
    let own = mine();
    let mut slot = helper.lock();
    if let Some(half) = slot.posted.take() {
        // Not taken: computed here.
        helper.pending.store(false, Ordering::Release);
        drop(slot);
        return (own, half());
    }
    drop(slot);
    let spun = Instant::now();
    while !helper.finished.load(Ordering::Acquire) && spun.elapsed() < SPIN {
        std::hint::spin_loop();
    }
    let mut slot = helper.lock();
    loop {
        if let Some(answer) = slot.done.take() {
            return (own, answer);
        }
        slot = helper
            .wake
            .wait(slot)
            .unwrap_or_else(PoisonError::into_inner);
    }
}
