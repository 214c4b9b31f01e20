//! Questions someone waits for against background decoding on the CPU: while questions are
//! being embedded ([`Question::begin`], from a pass's start until [`QUIET`] after the last
//! one ended), a decoder waits between its layers ([`wait_for_questions`]), at most
//! [`MAX_WAIT`] at a time, so a stream of questions has the cores, the caches and the memory
//! bandwidth to itself: a prefill or a decoding step streams the decoder's weights through
//! memory and slowed the questions beside it by about a third, though the decoder is in the
//! idle class. Writes' passages and topic phrases do not count: they never hold decoding back.
//!
//! The state is the process's: every pool's questions count, and every decoder waits.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Question passes running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// When the last question pass ended, in microseconds after [`epoch`] (0: none yet).
static LAST_END: AtomicU64 = AtomicU64::new(0);

/// Microseconds decoders have waited so far, all together.
static WAITED: AtomicU64 = AtomicU64::new(0);

/// How long after a question's pass the decoder still waits: a client asking one question
/// after another leaves a millisecond or two between passes (its round trip, the node's
/// ranking), and decoding in those gaps evicts what the next pass needs.
pub const QUIET: Duration = Duration::from_millis(10);

/// The longest a decoder waits at one layer boundary: under a steady stream of questions it
/// still runs a layer at least this often.
pub const MAX_WAIT: Duration = Duration::from_millis(200);

/// How often a waiting decoder looks again.
const POLL: Duration = Duration::from_micros(500);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_micros() -> u64 {
    // At least 1, so 0 keeps meaning "no question yet".
    u64::try_from(epoch().elapsed().as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A question's pass in progress, from `begin` until dropped.
#[must_use = "the pass counts only while this value lives"]
pub(crate) struct Question(());

impl Question {
    pub(crate) fn begin() -> Question {
        epoch();
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Question(())
    }
}

impl Drop for Question {
    fn drop(&mut self) {
        LAST_END.store(now_micros(), Ordering::SeqCst);
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether questions are being embedded: one running, or one ended less than [`QUIET`] ago.
fn questions_flow() -> bool {
    if RUNNING.load(Ordering::SeqCst) > 0 {
        return true;
    }
    let last = LAST_END.load(Ordering::SeqCst);
    last != 0 && now_micros().saturating_sub(last) < QUIET.as_micros() as u64
}

/// Waits while questions are being embedded, at most [`MAX_WAIT`]; returns how long it waited.
pub(crate) fn wait_for_questions() -> Duration {
    if !questions_flow() {
        return Duration::ZERO;
    }
    let start = Instant::now();
    while questions_flow() && start.elapsed() < MAX_WAIT {
        std::thread::sleep(POLL);
    }
    let waited = start.elapsed();
    WAITED.fetch_add(
        u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    waited
}

/// How long decoders have waited for questions so far, all together: a decoder's rest is
/// measured against its work, not its waits.
pub(crate) fn waited() -> Duration {
    Duration::from_micros(WAITED.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::qwen2::{KvCache, Qwen2, Qwen2Config};
    use tch::{Device, Tensor};

    /// A decoder on the CPU holds each layer back while a question's pass runs: a prompt
    /// through the small decoder's two layers takes at least two bounded waits, and gives the
    /// same logits as without the question.
    #[test]
    fn a_decoder_waits_at_each_layer_while_a_question_is_embedded() {
        let model = Qwen2::random(Qwen2Config::small(), 7, Device::Cpu, Precision::Float32)
            .expect("a random decoder");
        let prompt = Tensor::from_slice(&[1_i64, 5, 9, 2]).unsqueeze(0);
        let alone = model.next_logits(&prompt, &mut KvCache::default());
        let pass = Question::begin();
        let started = Instant::now();
        let beside = model.next_logits(&prompt, &mut KvCache::default());
        let took = started.elapsed();
        drop(pass);
        assert!(
            took >= MAX_WAIT * 2,
            "two layers took {took:?} beside a question"
        );
        assert!(
            beside.allclose(&alone, 0.0, 0.0, false),
            "the wait changed the logits"
        );
    }

    /// While a question's pass runs the decoder waits at least the bound (and returns: a wait
    /// without end would hang the test); after the pass it still waits out the quiet time.
    /// (Other tests of the crate may embed questions at the same time, so only lower bounds
    /// are asserted.)
    #[test]
    fn the_decoder_waits_while_questions_flow_and_gives_up_at_the_bound() {
        let pass = Question::begin();
        let waited = wait_for_questions();
        assert!(waited >= MAX_WAIT, "gave up after {waited:?}");
        drop(pass);
        let after = Instant::now();
        let waited = wait_for_questions();
        assert!(
            waited >= QUIET.saturating_sub(after.elapsed()),
            "waited {waited:?} after the pass"
        );
    }
}
