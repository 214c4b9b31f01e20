//! A decoding worker that fails is restarted by its supervisor, and neither the requests it
//! was decoding nor those waiting are lost (the pinned 0.5B model, installed by `.ci/models`).

use super::*;
use crate::distil::{
    DEFAULT_INTENT_TYPES, MAX_ANSWER_TOKENS, intent_prompt, intent_schema, parse_answer,
};

const SMALL_MODEL: &str = "qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf";

fn generation(message: &str) -> Generation {
    let types: Vec<String> = DEFAULT_INTENT_TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    Generation {
        system: intent_prompt(&types),
        user: message.to_owned(),
        shots: Vec::new(),
        schema: Arc::new(intent_schema(&types)),
        max_tokens: MAX_ANSWER_TOKENS,
    }
}

/// Polls `condition` until it holds (bounded only so that a broken pool fails the test
/// instead of hanging it).
async fn until(what: &str, condition: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(600), async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never saw {what}");
}

/// Two requests decoding and two waiting when the only worker's decoding step panics: the
/// supervisor restarts the worker (which loads the model again), the two it was decoding go
/// back in the queue with the two waiting, and all four are answered, each valid under its
/// schema; the pool counts one restart and no failure, and closes cleanly afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_fails_mid_step_is_restarted_and_every_request_is_answered() {
    let pool = GenerationPool::start(GenerationConfig {
        model: PathBuf::from(SMALL_MODEL),
        device: DeviceChoice::Cpu,
        max_batch: 2,
        queue_capacity: 8,
        tenant_share_percent: 100,
        priority: BackgroundPriority::Normal,
        ..GenerationConfig::default()
    })
    .await
    .expect("the 0.5B generative model is installed (.ci/models)");

    let messages = [
        "Book me a haircut on Friday at 3pm",
        "I want to cancel my gym membership",
        "Please renew my streaming plan for another year",
        "My order arrived broken again",
    ];
    let calls: Vec<_> = messages
        .iter()
        .map(|message| {
            let pool = pool.clone();
            let generation = generation(message);
            tokio::spawn(async move { pool.generate("t", generation, None).await })
        })
        .collect();
    until("two decoding and two waiting", || {
        let stats = pool.stats();
        stats.running == 2 && stats.queued == 2
    })
    .await;

    pool.fail_worker(0).await.expect("the supervisor runs");

    for (call, message) in calls.into_iter().zip(messages) {
        let answer = call
            .await
            .expect("the caller's task")
            .unwrap_or_else(|err| panic!("{message:?} was not answered after the restart: {err}"));
        assert!(parse_answer(&answer).is_some(), "{message:?}: {answer}");
    }
    let stats = pool.stats();
    assert_eq!(stats.restarts, 1, "{stats:?}");
    assert_eq!((stats.answered, stats.failed), (4, 0), "{stats:?}");
    assert_eq!((stats.queued, stats.refused), (0, 0), "{stats:?}");
    pool.join().await;
    let closed = pool.generate("t", generation(messages[0]), None).await;
    assert!(matches!(closed, Err(Error::PoolClosed)), "{closed:?}");
}
