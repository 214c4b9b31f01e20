//! Work someone waits for against background decoding on the CPU: while a question's forward
//! pass runs ([`Foreground::begin`]), the decoder waits between its layers
//! ([`yield_to_foreground`]), so the question has the cores, the caches and the memory
//! bandwidth to itself (a decoding step streams the whole decoder's weights through memory;
//! with the waits, 8 and 32 clients' searches beside the distiller were answered a quarter
//! and a third sooner).
//!
//! The count is the process's: every pool's questions count, and every decoder yields.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Forward passes someone waits for, running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// The longest the decoder waits at one layer boundary: under a steady stream of questions
/// it still decodes a layer at least this often.
pub const MAX_YIELD: Duration = Duration::from_millis(20);

/// How often a waiting decoder looks again.
const POLL: Duration = Duration::from_micros(200);

/// A question's pass in progress, from `begin` until dropped.
#[must_use = "the pass counts only while this value lives"]
pub(crate) struct Foreground(());

impl Foreground {
    pub(crate) fn begin() -> Foreground {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Foreground(())
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits while a question's pass runs, at most [`MAX_YIELD`]; returns how long it waited.
pub(crate) fn yield_to_foreground() -> Duration {
    if RUNNING.load(Ordering::SeqCst) == 0 {
        return Duration::ZERO;
    }
    let start = Instant::now();
    while RUNNING.load(Ordering::SeqCst) > 0 && start.elapsed() < MAX_YIELD {
        std::thread::sleep(POLL);
    }
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While a question's pass runs the decoder waits, and gives up at the bound instead of
    /// waiting for ever. (Other tests of the crate may run passes at the same time, so only
    /// the lower bound is certain.)
    #[test]
    fn the_decoder_waits_while_a_question_runs_and_gives_up_at_the_bound() {
        let pass = Foreground::begin();
        let waited = yield_to_foreground();
        drop(pass);
        assert!(waited >= MAX_YIELD, "gave up after {waited:?}");
    }
}
