//! The search reranker through the user actors, with the real cross-encoder
//! (ms-marco-MiniLM-L-12-v2 from the pinned wheel, installed by `.ci/models`) on a plain node
//! (words and priors; no embedding pool): what a reranked search returns, and every reason it
//! may return the hybrid order instead, said in the answer and counted; and that a rerank
//! does not hold the user's actor.

mod plain;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use engram_actors::model::retrieve::SearchMode;
use engram_actors::request::user::{Forget, SearchQuery, SearchResult, StatusChange};
use engram_actors::rerank::{RerankFallback, RerankService, RerankSettings, fuse};
use engram_actors::services::Settings;
use engram_actors::user::ops::turn_text;
use engram_inference::{Reranker, RerankerConfig};
use engram_storage::types::{MemoryKind, MemoryStatus};
use plain::{Node, alice, node_with_reranker, write_episode};
use tempfile::TempDir;

/// Turns that all mention Max, so that every one is a word-search candidate.
const TURNS: [&str; 6] = [
    "Max loves the park near our place, we walk there every evening.",
    "We adopted Max, a beagle puppy, from the shelter in June.",
    "My brother Max is visiting next week, he wants to see the museum.",
    "Max chewed through another charging cable, unbelievable.",
    "The vet said Max needs his second vaccination before the end of July.",
    "I was thinking of calling the new puppy Max or maybe Charlie.",
];

const QUESTION: &str = "When did Max get adopted from the shelter, and what breed is Max?";

fn reranker() -> Reranker {
    Reranker::load(&RerankerConfig::default()).expect("the reranker (run .ci/models)")
}

fn service(settings: RerankSettings) -> RerankService {
    RerankService::start(|| Reranker::load(&RerankerConfig::default()), settings)
        .expect("the reranker thread")
}

/// A plain node with `reranker`, Alice's turns written; the indexed text of each memory.
async fn written(
    dir: &TempDir,
    reranker: Option<RerankService>,
) -> (Node, HashMap<String, String>) {
    let node = node_with_reranker(dir, Settings::default(), reranker);
    let mut texts = HashMap::new();
    for (i, text) in TURNS.iter().enumerate() {
        let id = write_episode(&node, &format!("t{i}"), "s1", text).await;
        // `write_episode` has the assistant say "Noted.".
        texts.insert(id, turn_text(text, "Noted."));
        node.clock.advance(1_000);
    }
    (node, texts)
}

fn episodes(query: &str, k: usize, rerank: bool) -> SearchQuery {
    SearchQuery {
        query: query.into(),
        k,
        kinds: vec![MemoryKind::Episodic],
        mode: SearchMode::Hybrid,
        active_only: false,
        rerank,
    }
}

async fn search(node: &Node, query: &str, k: usize, rerank: bool) -> SearchResult {
    let q = episodes(query, k, rerank);
    node.directory.ask_admin(&alice(), q).await.unwrap()
}

fn ids(result: &SearchResult) -> Vec<String> {
    result
        .hits
        .iter()
        .map(|h| h.memory.memory_id.clone())
        .collect()
}

/// `hybrid`'s hits (ids and scores) in the order of the fusion of theirs and the
/// cross-encoder's scores of their texts for [`QUESTION`], with the fused scores.
fn fused(hybrid: &SearchResult, texts: &HashMap<String, String>) -> Vec<(String, f32)> {
    let passages: Vec<&str> = hybrid
        .hits
        .iter()
        .map(|h| texts[&h.memory.memory_id].as_str())
        .collect();
    let scores = reranker().score(QUESTION, &passages).unwrap();
    fuse(
        hybrid
            .hits
            .iter()
            .map(|h| (h.memory.memory_id.clone(), h.score))
            .collect(),
        &scores,
    )
}

/// A reranked search returns the hybrid candidates in the order of the fusion of the hybrid
/// order and the cross-encoder's scores of each candidate's turn text, with the fused
/// scores, cut to `k` after the rerank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reranked_search_is_the_fusion_of_both_orders() {
    let dir = TempDir::new().unwrap();
    let (node, texts) = written(&dir, Some(service(RerankSettings::default()))).await;
    let hybrid = search(&node, QUESTION, 10, false).await;
    assert_eq!(hybrid.hits.len(), TURNS.len(), "every turn is a candidate");
    assert!(!hybrid.reranked && hybrid.rerank_fallback.is_none());

    let expected = fused(&hybrid, &texts);

    let reranked = search(&node, QUESTION, 10, true).await;
    assert!(reranked.reranked, "{:?}", reranked.rerank_fallback);
    assert_eq!(reranked.rerank_fallback, None);
    let expected_ids: Vec<String> = expected.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids(&reranked), expected_ids);
    for (hit, (_, fused)) in reranked.hits.iter().zip(&expected) {
        assert!((hit.score - fused).abs() < 1e-6);
    }
    assert_ne!(ids(&reranked), ids(&hybrid), "the rerank changed the order");
    // The cross-encoder reads the adoption turn as the answer, and the fusion puts it first.
    assert!(
        texts[&expected_ids[0]].contains("adopted Max"),
        "{:?}",
        texts[&expected_ids[0]]
    );

    let top = search(&node, QUESTION, 2, true).await;
    assert!(top.reranked);
    assert_eq!(
        ids(&top),
        expected_ids[..2].to_vec(),
        "k cuts after the rerank"
    );
}

/// A question that is not English keeps the hybrid order and says why; so does a search on
/// a node without a reranker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_the_reranker_cannot_read_keep_the_hybrid_order() {
    let dir = TempDir::new().unwrap();
    let reranker = service(RerankSettings::default());
    let (node, _) = written(&dir, Some(reranker.clone())).await;
    let question = "Max 是什么时候从收容所领养的？";
    let hybrid = search(&node, question, 10, false).await;
    let asked = search(&node, question, 10, true).await;
    assert!(!asked.reranked);
    assert_eq!(asked.rerank_fallback, Some(RerankFallback::NotEnglish));
    assert_eq!(ids(&asked), ids(&hybrid));
    assert_eq!(
        reranker
            .metrics()
            .fallback_not_english
            .load(Ordering::Relaxed),
        1
    );
    assert_eq!(reranker.metrics().reranked.load(Ordering::Relaxed), 0);

    let dir = TempDir::new().unwrap();
    let (bare, _) = written(&dir, None).await;
    let asked = search(&bare, QUESTION, 10, true).await;
    assert!(!asked.reranked);
    assert_eq!(asked.rerank_fallback, Some(RerankFallback::Unavailable));
    assert_eq!(ids(&asked), ids(&search(&bare, QUESTION, 10, false).await));
}

/// Past its deadline a search returns the hybrid order, saying so, and the worker skips
/// the job nobody waits for (a zero deadline has always passed when the worker looks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_deadline_keeps_the_hybrid_order() {
    let dir = TempDir::new().unwrap();
    let reranker = service(RerankSettings {
        deadline: Some(Duration::ZERO),
        ..RerankSettings::default()
    });
    let (node, _) = written(&dir, Some(reranker.clone())).await;
    let hybrid = search(&node, QUESTION, 10, false).await;
    let asked = search(&node, QUESTION, 10, true).await;
    assert_eq!(asked.rerank_fallback, Some(RerankFallback::Deadline));
    assert_eq!(ids(&asked), ids(&hybrid));
    assert_eq!(
        reranker.metrics().fallback_deadline.load(Ordering::Relaxed),
        1
    );
    assert_eq!(
        reranker.metrics().pool.pairs.load(Ordering::Relaxed),
        0,
        "the job was skipped"
    );
}

/// With the worker busy and its queue full, a rerank is answered at once with the order it
/// came in, saying `busy`; the others are scored once the worker is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_busy() {
    // The model loads at the first job: the load waits at a gate, holding the worker.
    let (reranker, loading, release) = gated(RerankSettings {
        queue: 1,
        deadline: None,
        ..RerankSettings::default()
    });
    let hits = || vec![("a", 1.0_f32), ("b", 0.5)];
    let text = |h: &&str| format!("{h} Max was adopted in June.");
    let first = tokio::spawn({
        let reranker = reranker.clone();
        async move { reranker.rerank(QUESTION, hits(), text).await }
    });
    tokio::task::spawn_blocking(move || loading.recv().unwrap())
        .await
        .unwrap();
    // The worker holds the first job: of the next two, one fills the queue and the other
    // finds it full.
    let next = || {
        let reranker = reranker.clone();
        tokio::spawn(async move { reranker.rerank(QUESTION, hits(), text).await })
    };
    let (second, third) = (next(), next());
    while reranker.metrics().fallback_busy.load(Ordering::Relaxed) == 0 {
        // A condition, polled: one of the two has been refused.
        tokio::task::yield_now().await;
    }
    release.send(()).unwrap();
    let mut answers = Vec::new();
    for job in [first, second, third] {
        answers.push(job.await.unwrap());
    }
    let busy: Vec<_> = answers
        .iter()
        .filter(|(_, why)| *why == Some(RerankFallback::Busy))
        .collect();
    assert_eq!(busy.len(), 1, "{answers:?}");
    assert_eq!(
        busy[0].0,
        hits(),
        "a busy answer keeps the order it came in"
    );
    assert_eq!(answers.iter().filter(|(_, why)| why.is_none()).count(), 2);
    assert_eq!(reranker.metrics().reranked.load(Ordering::Relaxed), 2);
}

/// A reranker whose model load, at its first job, signals `loading` and then waits at the
/// gate: the worker holds that job until the gate opens.
fn gated(settings: RerankSettings) -> (RerankService, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (loading_tx, loading) = mpsc::channel::<()>();
    let (release, gate) = mpsc::channel::<()>();
    let reranker = RerankService::start(
        move || {
            loading_tx.send(()).unwrap();
            gate.recv().unwrap();
            Reranker::load(&RerankerConfig::default())
        },
        settings,
    )
    .unwrap();
    (reranker, loading, release)
}

/// Alice's search, reranked by a [`gated`] reranker that holds it.
struct HeldSearch {
    node: Node,
    /// Each memory's indexed text.
    texts: HashMap<String, String>,
    /// The same search unreranked, asked before.
    hybrid: SearchResult,
    asked: tokio::task::JoinHandle<engram_actors::Result<SearchResult>>,
    release: mpsc::Sender<()>,
}

impl HeldSearch {
    /// Opens the gate and returns the search's answer.
    async fn release(self) -> SearchResult {
        self.release.send(()).unwrap();
        self.asked.await.unwrap().unwrap()
    }
}

/// Alice's turns written on a node whose reranker holds her reranked search of [`QUESTION`]
/// (asked in a task of its own) until released.
async fn held_search(dir: &TempDir) -> HeldSearch {
    let (reranker, loading, release) = gated(RerankSettings {
        deadline: None,
        ..RerankSettings::default()
    });
    let (node, texts) = written(dir, Some(reranker)).await;
    let hybrid = search(&node, QUESTION, 10, false).await;
    let directory = node.directory.clone();
    let asked = tokio::spawn(async move {
        directory
            .ask_admin(&alice(), episodes(QUESTION, 10, true))
            .await
    });
    tokio::task::spawn_blocking(move || loading.recv().unwrap())
        .await
        .unwrap();
    HeldSearch {
        node,
        texts,
        hybrid,
        asked,
        release,
    }
}

/// Bounds a step that must not wait for the held rerank: on the code before, where the actor
/// awaited the scores, it never ended.
async fn while_reranked<T>(step: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(600), step)
        .await
        .expect("the user's actor served nothing while its search was reranked")
}

/// A rerank runs off the user's actor: while the reranker holds a search's candidates, the
/// same user's write is answered and one of the candidates is deleted; the reranked answer
/// then gives the other candidates (not the deleted one, nor the turn written after the
/// candidates were found) in the fused order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerank_does_not_hold_the_users_actor() {
    let dir = TempDir::new().unwrap();
    let held = held_search(&dir).await;
    let (node, texts, hybrid) = (&held.node, &held.texts, &held.hybrid);

    let deleted = hybrid.hits[0].memory.memory_id.clone();
    let written_meanwhile = while_reranked(async {
        let id = write_episode(node, "t-meanwhile", "s1", "Max was adopted, a beagle.").await;
        let change = StatusChange {
            request_id: "delete-first".into(),
            memory_id: deleted.clone(),
            status: MemoryStatus::Deleted,
        };
        node.directory.ask_admin(&alice(), change).await.unwrap();
        id
    })
    .await;
    let (texts, hybrid) = (texts.clone(), hybrid.clone());
    let reranked = held.release().await;
    assert!(reranked.reranked, "{:?}", reranked.rerank_fallback);

    let expected: Vec<String> = fused(&hybrid, &texts)
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| *id != deleted)
        .collect();
    assert_eq!(ids(&reranked), expected);
    assert!(!ids(&reranked).contains(&written_meanwhile));
    assert!(
        reranked
            .hits
            .iter()
            .all(|h| h.memory.status != MemoryStatus::Deleted)
    );
}

/// A user forgotten while their search is reranked: the actor that found the candidates has
/// stopped, so the search is asked again of a fresh actor, which finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_forgotten_during_a_rerank_gets_no_hits() {
    let dir = TempDir::new().unwrap();
    let held = held_search(&dir).await;
    while_reranked(held.node.directory.ask_admin(&alice(), Forget))
        .await
        .unwrap();
    let answer = held.release().await;
    assert!(answer.hits.is_empty(), "{:?}", ids(&answer));
    assert_eq!(answer.rerank_fallback, None);
}
