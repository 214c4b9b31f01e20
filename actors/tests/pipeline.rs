//! The inference pipeline with the real embedding pool on a real SQLite file: a node that
//! stopped before embedding leaves entries its successor resumes, one noisy tenant does not
//! starve another, the dispatcher holds a bounded number of users and storage the rest, a
//! read past its query deadline falls back to words and says so, and reads of one user wait
//! for their questions' vectors side by side.
//! (SIGKILL mid-burst, restart and take-over by another node process are in the cluster
//! suite, `tests/tests/pipeline.rs`.)

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engram_actors::embed::Fallback;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::pipeline::PipelineConfig;
use engram_actors::placement::UserKey;
use engram_inference::PoolConfig;
use engram_storage::types::MemoryKind;
use support::{Mode, context, embedder, node_with, pool, pool_with, search, turn, turn_of};

fn not_started(config: PipelineConfig) -> Mode {
    Mode::Behind {
        config,
        started: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_left_by_a_node_that_never_embedded_them_are_resumed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    let first = node_with(
        &dir,
        embedder(&pool),
        not_started(PipelineConfig::default()),
    )
    .await;
    let users: Vec<UserKey> = (0..3)
        .map(|i| UserKey::new("acme", format!("u{i}")))
        .collect();
    for (u, key) in users.iter().enumerate() {
        for i in 0..4 {
            let text = format!("user {u} turn {i}: the weekly revenue report");
            turn_of(&first, key, &format!("r{u}-{i}"), "s1", &text).await;
        }
    }
    // Every write was acknowledged; nothing was embedded.
    assert_eq!(first.pending().await, 12);
    for key in &users {
        let (records, vectors) = first.stored(key, MemoryKind::Episodic).await;
        assert_eq!((records.len(), vectors.len()), (4, 0));
    }
    first.shutdown().await;

    let second = node_with(&dir, embedder(&pool), Mode::behind()).await;
    second.drained().await;
    for key in &users {
        let (records, vectors) = second.stored(key, MemoryKind::Episodic).await;
        assert_eq!(vectors.len(), records.len(), "every record has its vector");
    }
    let metrics = second.pipeline.as_ref().unwrap().metrics();
    assert_eq!(metrics.stored.load(Ordering::Relaxed), 12);
    assert_eq!(metrics.dropped.load(Ordering::Relaxed), 0);
    second.shutdown().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_tenant_with_a_backlog_does_not_starve_another_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    // Small rounds, one at a time, so the backlog takes many rounds.
    let config = PipelineConfig {
        round_texts: 4,
        entries_per_user: 2,
        rounds_in_flight: 1,
        ..PipelineConfig::default()
    };
    let node = node_with(&dir, embedder(&pool), not_started(config)).await;
    for u in 0..60 {
        let key = UserKey::new("noisy", format!("n{u}"));
        for i in 0..2 {
            let text = format!("noisy user {u} asks about order volume {i}");
            turn_of(&node, &key, &format!("n{u}-{i}"), "s", &text).await;
        }
    }
    // The quiet tenant writes last, behind the whole backlog.
    let quiet = UserKey::new("quiet", "q");
    turn_of(&node, &quiet, "q-0", "s", "which region grew fastest").await;
    node.start_pipeline().await;
    loop {
        let (_, vectors) = node.stored(&quiet, MemoryKind::Episodic).await;
        if !vectors.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Served in its turn (one user of each tenant per round): most of the noisy backlog
    // (120 texts, 4 a round) still waits.
    let pending = node.pending().await;
    assert!(
        pending >= 80,
        "the quiet tenant waited for {} noisy texts",
        120 - pending
    );
    node.drained().await;
    node.shutdown().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_holds_at_most_its_bound_of_users_and_storage_holds_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    let config = PipelineConfig {
        max_users_in_memory: 2,
        scan_interval: Duration::from_millis(200),
        ..PipelineConfig::default()
    };
    let node = node_with(&dir, embedder(&pool), not_started(config)).await;
    let users: Vec<UserKey> = (0..10)
        .map(|i| UserKey::new("acme", format!("u{i}")))
        .collect();
    for (u, key) in users.iter().enumerate() {
        turn_of(&node, key, &format!("r{u}"), "s", "the churn dashboard").await;
    }
    let metrics = node.pipeline.as_ref().unwrap().metrics();
    assert_eq!(
        metrics.not_held.load(Ordering::Relaxed),
        8,
        "two users held, eight left to storage"
    );
    node.start_pipeline().await;
    node.drained().await;
    for key in &users {
        let (_, vectors) = node.stored(key, MemoryKind::Episodic).await;
        assert_eq!(vectors.len(), 1, "found by a scan and embedded");
    }
    assert!(metrics.scans.load(Ordering::Relaxed) >= 1);
    node.shutdown().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_past_its_query_deadline_ranks_by_words_says_so_and_its_query_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    // A deadline no embedding can meet: the pool answers through two actors and a model.
    let deadline = embedder(&pool).with_query_deadline(Some(Duration::from_nanos(1)));
    let node = node_with(&dir, deadline, Mode::behind()).await;
    turn(
        &node,
        "r0",
        "s1",
        "We adopted a golden retriever puppy named Oscar",
    )
    .await;
    node.drained().await;
    let passes = pool.stats().forward_passes;

    let question = "golden retriever";
    let first = search(&node, question, SearchMode::Hybrid).await;
    assert!(!first.embedded);
    assert_eq!(first.fallback, Some(Fallback::Deadline));
    assert_eq!(first.hits.len(), 1, "found by its words");
    let ctx = context(&node, "later", question).await;
    assert_eq!(ctx.fallback, Some(Fallback::Deadline));
    assert!(!ctx.query_embedded);
    assert!(ctx.episodic[0].text.contains("puppy"));
    let embedder = node.directory.services().embedder.clone().unwrap();
    assert_eq!(
        embedder.metrics().fallback_deadline.load(Ordering::Relaxed),
        2
    );

    // Nobody waited for those queries any more: the pool skipped them rather than embed
    // them, so nothing ran and nothing was cached (the same query falls back again).
    while pool.stats().expired < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        pool.stats().forward_passes,
        passes,
        "a skipped query was embedded"
    );
    let again = search(&node, question, SearchMode::Dense).await;
    assert!(!again.embedded);
    assert_eq!(again.fallback, Some(Fallback::Deadline));
    node.shutdown().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_one_user_wait_for_their_questions_vectors_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool().await;
    let writer = node_with(&dir, embedder(&pool), Mode::behind()).await;
    turn(
        &writer,
        "r0",
        "s1",
        "We adopted a golden retriever puppy named Oscar",
    )
    .await;
    turn(&writer, "r1", "s1", "Oscar chewed through my running shoes").await;
    writer.drained().await;
    writer.shutdown().await;
    pool.shutdown().await;

    // A pool whose batches leave only when two questions wait: a read that held its actor
    // while it waited for its vector would keep the other read out of the pool until the
    // deadline, and both would rank without their vectors.
    let pairs = pool_with(PoolConfig {
        workers: 1,
        max_batch: 2,
        max_wait: Duration::from_secs(3600),
        interactive_max_wait: Duration::from_secs(3600),
        ..PoolConfig::default()
    })
    .await;
    let deadline = embedder(&pairs).with_query_deadline(Some(Duration::from_secs(120)));
    let reader = Arc::new(node_with(&dir, deadline, Mode::Synchronous).await);
    let searched = tokio::spawn({
        let reader = Arc::clone(&reader);
        async move { search(&reader, "what is the dog called", SearchMode::Hybrid).await }
    });
    let ctx = context(&reader, "later", "which shoes were ruined").await;
    let searched = searched.await.unwrap();
    assert!(
        searched.embedded,
        "the search's question embedded: {:?}",
        searched.fallback
    );
    assert!(
        ctx.query_embedded,
        "the context's question embedded: {:?}",
        ctx.fallback
    );
    assert_eq!(
        pairs.stats().forward_passes,
        1,
        "both questions in one pass"
    );
    reader.shutdown().await;
    pairs.shutdown().await;
}
