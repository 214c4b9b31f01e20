//! The reranker's pool on the real cross-encoder (installed by `.ci/models`): searches that
//! wait are scored together and each caller gets its own scores, and a worker that fails is
//! restarted without losing the searches it held or those waiting.

use std::sync::mpsc;

use super::*;
use crate::RerankerConfig;

const QUESTIONS: [&str; 5] = [
    "When did Max get adopted from the shelter?",
    "What breed is Max?",
    "Who is visiting next week?",
    "What did the vet say about the vaccination?",
    "Which name is the new puppy going to get?",
];

const PASSAGES: [&str; 6] = [
    "Max loves the park near our place, we walk there every evening.",
    "We adopted Max, a beagle puppy, from the shelter in June.",
    "My brother Max is visiting next week, he wants to see the museum.",
    "Max chewed through another charging cable, unbelievable.",
    "The vet said Max needs his second vaccination before the end of July.",
    "I was thinking of calling the new puppy Max or maybe Charlie.",
];

fn reranker() -> Reranker {
    Reranker::load(&RerankerConfig::default()).expect("the reranker (run .ci/models)")
}

/// The passages of question `i`, rotated so that searches differ in order too.
fn passages(i: usize) -> Vec<String> {
    let mut passages: Vec<String> = PASSAGES.iter().map(|p| (*p).to_owned()).collect();
    passages.rotate_left(i % PASSAGES.len());
    passages
}

/// A one-worker pool on `reranker`'s weights whose load, at its first batch, says so on the
/// first channel and waits for the second: the worker holds that batch until released.
fn gated(
    reranker: &Reranker,
    config: &RerankPoolConfig,
) -> (RerankPool, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (loading_tx, loading) = mpsc::channel::<()>();
    let (release, gate) = mpsc::channel::<()>();
    let weights = reranker.share();
    let load: RerankLoad = Box::new(move || {
        loading_tx.send(()).unwrap();
        gate.recv().unwrap();
        Ok(weights)
    });
    (RerankPool::new(vec![load], config), loading, release)
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-3, "{what}: {got:?} against {want:?}");
    }
}

/// Five searches from five callers, batching on the CPU: the first is held by the worker
/// while the other four wait; those four then go in one batch, and each caller gets the scores a direct
/// [`Reranker::score`] gives its own question and passages, in its own order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_that_wait_are_scored_together_and_each_caller_gets_its_own_scores() {
    let reranker = reranker();
    let config = RerankPoolConfig {
        queue_capacity: 8,
        batch_on_cpu: true,
        ..RerankPoolConfig::default()
    };
    let (pool, loading, release) = gated(&reranker, &config);
    let search = |i: usize| {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.score(&format!("caller-{i}"), QUESTIONS[i], passages(i), None)
                .await
        })
    };
    let first = search(0);
    tokio::task::spawn_blocking(move || loading.recv().unwrap())
        .await
        .unwrap();
    let rest: Vec<_> = (1..QUESTIONS.len()).map(search).collect();
    while pool.counters().queued.load(Ordering::Relaxed) < 4 {
        // A condition, polled: the four wait behind the held batch.
        tokio::task::yield_now().await;
    }
    release.send(()).unwrap();

    let mut answers = vec![first.await.unwrap().expect("scored")];
    for call in rest {
        answers.push(call.await.unwrap().expect("scored"));
    }
    for (i, got) in answers.iter().enumerate() {
        let texts = passages(i);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let want = reranker.score(QUESTIONS[i], &texts).unwrap();
        assert_close(got, &want, QUESTIONS[i]);
    }
    let counters = pool.counters();
    assert_eq!(counters.batches.load(Ordering::Relaxed), 2);
    assert_eq!(counters.batch_searches.load(Ordering::Relaxed), 5);
    assert_eq!(
        counters.pairs.load(Ordering::Relaxed),
        5 * PASSAGES.len() as u64
    );
    pool.join().await;
}

/// The worker holds one search while two wait; its batch then panics: the supervisor puts
/// the held search back in the queue with the two waiting and restarts the worker on the same
/// weights, which answers all three with their right scores, one search a batch (the CPU's
/// default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_fails_is_restarted_and_no_search_is_lost() {
    let reranker = reranker();
    let config = RerankPoolConfig {
        queue_capacity: 8,
        ..RerankPoolConfig::default()
    };
    let (pool, loading, release) = gated(&reranker, &config);
    let search = |i: usize| {
        let pool = pool.clone();
        tokio::spawn(async move { pool.score("t", QUESTIONS[i], passages(i), None).await })
    };
    let held = search(0);
    tokio::task::spawn_blocking(move || loading.recv().unwrap())
        .await
        .unwrap();
    let waiting = [search(1), search(2)];
    while pool.counters().queued.load(Ordering::Relaxed) < 2 {
        tokio::task::yield_now().await;
    }
    pool.fail_worker(0).await.expect("the supervisor runs");
    release.send(()).unwrap();

    let mut answers = vec![held.await.unwrap()];
    for call in waiting {
        answers.push(call.await.unwrap());
    }
    for (i, got) in answers.into_iter().enumerate() {
        let got = got.unwrap_or_else(|err| panic!("search {i} was lost: {err}"));
        let texts = passages(i);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let want = reranker.score(QUESTIONS[i], &texts).unwrap();
        assert_close(&got, &want, QUESTIONS[i]);
    }
    let counters = pool.counters();
    assert_eq!(counters.restarts.load(Ordering::Relaxed), 1);
    assert_eq!(counters.scored.load(Ordering::Relaxed), 3);
    assert_eq!(
        counters.batches.load(Ordering::Relaxed),
        3,
        "one search a batch"
    );
    pool.join().await;
}

/// Past its capacity the queue refuses a search at once, and closing answers what waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_and_closing_answers_the_waiting() {
    let reranker = reranker();
    let config = RerankPoolConfig {
        queue_capacity: 1,
        ..RerankPoolConfig::default()
    };
    let (pool, loading, release) = gated(&reranker, &config);
    let search = |i: usize| {
        let pool = pool.clone();
        tokio::spawn(async move { pool.score("t", QUESTIONS[i], passages(i), None).await })
    };
    let held = search(0);
    tokio::task::spawn_blocking(move || loading.recv().unwrap())
        .await
        .unwrap();
    let waiting = search(1);
    while pool.counters().queued.load(Ordering::Relaxed) < 1 {
        tokio::task::yield_now().await;
    }
    let refused = pool.score("t", QUESTIONS[2], passages(2), None).await;
    assert!(
        matches!(refused, Err(Error::Overloaded { .. })),
        "{refused:?}"
    );
    pool.close();
    let waited = waiting.await.unwrap();
    assert!(matches!(waited, Err(Error::PoolClosed)), "{waited:?}");
    release.send(()).unwrap();
    assert!(held.await.unwrap().is_ok(), "the held batch is answered");
    pool.join().await;
}
