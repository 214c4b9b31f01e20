//! The user actors with the real embedding pool (multilingual-e5-small from the pinned wheel,
//! installed by `.ci/models`) on a real SQLite file: every written memory is stored with its
//! embedding (at once, or through the pipeline), searches and contexts rank by meaning, the
//! index is rebuilt from storage by a fresh node, and the conflict rule compares topics by
//! embedding in both write modes.

mod support;

use engram_actors::model::retrieve::SearchMode;
use engram_actors::request::user::ListMemories;
use engram_inference::ModelKind;
use engram_storage::types::{MemoryKind, MemoryStatus};
use support::{Mode, alice, context, embedder, node, node_with, pool, profile, search, turn};

const TURNS: [&str; 3] = [
    "We adopted a golden retriever puppy and named him Oscar",
    "The quarterly GMV report for East China is ready",
    "I went hiking in the mountains last weekend",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_are_stored_with_embeddings_and_found_by_meaning_after_a_restart() {
    let pool = pool().await;
    for mode in [Mode::Synchronous, Mode::behind()] {
        stored_found_and_rebuilt(&pool, mode).await;
    }
    pool.shutdown().await;
}

async fn stored_found_and_rebuilt(pool: &engram_inference::EmbeddingPool, mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let first = node_with(&dir, embedder(pool), mode.clone()).await;
    for (i, text) in TURNS.iter().enumerate() {
        turn(&first, &format!("r{i}"), "s1", text).await;
    }
    if first.pipeline.is_some() {
        first.drained().await;
    }

    // Every episodic memory has its turn's embedding in storage, of the node's model.
    let (records, embeddings) = first.stored(&alice(), MemoryKind::Episodic).await;
    assert_eq!(records.len(), 3);
    assert_eq!(embeddings.len(), 3);
    for (id, embedding) in &embeddings {
        assert!(records.iter().any(|r| &r.memory_id == id));
        assert_eq!(embedding.model, "multilingual-e5-small");
        assert_eq!(embedding.vector.len(), 384);
    }

    // No word of the question is in the turn: only the embedding can find it.
    let question = "what is my dog called?";
    let dense = search(&first, question, SearchMode::Dense).await;
    assert!(dense.embedded);
    assert_eq!(dense.hits[0].memory.turn_id, Some(0), "{:?}", dense.hits);
    let hybrid = search(&first, question, SearchMode::Hybrid).await;
    assert_eq!(hybrid.hits[0].memory.turn_id, Some(0));
    let bm25 = search(&first, question, SearchMode::Bm25).await;
    assert!(!bm25.embedded, "a BM25 search embeds nothing");
    first.shutdown().await;

    // A fresh node on the same file rebuilds the index from the stored embeddings.
    let second = node_with(&dir, embedder(pool), mode).await;
    let again = search(&second, question, SearchMode::Dense).await;
    assert_eq!(again.hits[0].memory.turn_id, Some(0));
    assert!(
        (again.hits[0].score - dense.hits[0].score).abs() < 1e-4,
        "the rebuilt index scores as the live one did"
    );
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_ranks_past_interactions_by_the_query_embedding() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    let node = node(&dir, &pool).await;
    for (i, text) in TURNS.iter().enumerate() {
        turn(&node, &format!("r{i}"), "yesterday", text).await;
    }
    let ctx = context(&node, "today", "any news about my pet?").await;
    assert_eq!(ctx.episodic.len(), 3, "all past turns fill the slot");
    assert!(
        ctx.episodic[0].text.contains("puppy"),
        "the pet turn ranks first: {:?}",
        ctx.episodic
    );
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_on_a_similar_topic_supersedes_and_an_unrelated_topic_does_not() {
    let pool = pool().await;
    for mode in [Mode::Synchronous, Mode::behind()] {
        // With the pipeline, the topic phrases are still embedded before the write (through
        // the node's cache): the rule decides inside the write's transaction either way.
        topics_by_meaning(&pool, mode).await;
    }
    pool.shutdown().await;
}

async fn topics_by_meaning(pool: &engram_inference::EmbeddingPool, mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(&dir, embedder(pool), mode).await;
    let line = profile(&node, "w1", "chart_type", "line", "prefers line charts").await;
    assert_eq!(line.action, "created");
    // "chart style" and "chart type" are one topic by their embeddings.
    let bar = profile(&node, "w2", "chart_style", "bar", "prefers bar charts").await;
    assert_eq!(bar.action, "superseded");
    let coffee = profile(&node, "w3", "coffee", "latte", "drinks lattes").await;
    assert_eq!(coffee.action, "created");
    // Coffee and tea are neighbours in meaning but not one topic.
    let tea = profile(&node, "w4", "tea", "green", "drinks green tea").await;
    assert_eq!(tea.action, "created");
    let records = node
        .directory
        .ask_admin(
            &alice(),
            ListMemories {
                kind: Some(MemoryKind::Profile),
            },
        )
        .await
        .unwrap();
    let status = |id: &str| {
        records
            .iter()
            .find(|r| r.memory_id == id)
            .map(|r| r.status)
            .unwrap()
    };
    assert_eq!(status(&line.memory.memory_id), MemoryStatus::Suppressed);
    assert_eq!(status(&bar.memory.memory_id), MemoryStatus::Active);
    assert_eq!(status(&coffee.memory.memory_id), MemoryStatus::Active);
    node.shutdown().await;
}

/// The calibrated threshold separates topic phrases that name one topic from those that do
/// not, with the real model (the pairs behind `ModelKind::same_topic_threshold`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_threshold_separates_paraphrases_from_other_topics() {
    let pool = pool().await;
    let (same, different) = (engram_inference::SAME_TOPIC, engram_inference::OTHER_TOPICS);
    let threshold = ModelKind::MultilingualE5Small.same_topic_threshold();
    let embedder = embedder(&pool);
    let cosine = async |a: &str, b: &str| {
        let v = embedder
            .passages("t", vec![a.to_owned(), b.to_owned()])
            .await
            .unwrap();
        v[0].iter().zip(&v[1]).map(|(x, y)| x * y).sum::<f32>()
    };
    for (a, b) in same {
        let c = cosine(a, b).await;
        assert!(c > threshold, "{a:?} / {b:?}: {c} <= {threshold}");
    }
    for (a, b) in different {
        let c = cosine(a, b).await;
        assert!(c <= threshold, "{a:?} / {b:?}: {c} > {threshold}");
    }
    pool.shutdown().await;
}
