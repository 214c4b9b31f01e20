//! When the embedding pool lets a text leave: a question someone waits for leaves an idle pool
//! at once, without batch-mates, while background passages wait to fill their batch. On the
//! real multilingual-e5-small model and libtorch, on the CPU; the models must be installed
//! (`.ci/models`): this test fails, never skips, without them.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use engram_inference::{
    DeviceChoice, EmbeddingPool, EncoderConfig, Error, PoolConfig, Priority, TextRole,
};
use support::wait_for;

#[allow(
    dead_code,
    reason = "this test needs only the support module's wait_for"
)]
mod support;

const TEXTS: [&str; 3] = [
    "I prefer line charts for weekly revenue.",
    "请按华东区汇总上个月的订单量",
    "Which metric did we agree on for churn?",
];

fn owned(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

/// A question someone waits for does not wait for batch-mates in an idle pool: with batches
/// that would otherwise wait an hour for 64 texts, it is answered; background texts still
/// wait for theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_question_leaves_an_idle_pool_at_once_and_background_texts_wait() -> Result<()> {
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: EncoderConfig {
            device: DeviceChoice::Cpu,
            ..EncoderConfig::default()
        },
        workers: 1,
        max_batch: 64,
        max_wait: Duration::from_secs(3600),
        tenant_share_percent: 100,
        ..PoolConfig::default()
    })
    .await?;
    let background = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.embed_with(
                "t",
                owned(&TEXTS[..2]),
                TextRole::Passage,
                Priority::Background,
            )
            .await
        })
    };
    wait_for(
        Duration::from_secs(60),
        "the background texts to queue",
        || pool.stats().queued_texts == 2,
    )
    .await?;
    // Answered long before an hour: the bound only keeps a broken pool from hanging the
    // suite.
    let question = tokio::time::timeout(
        Duration::from_secs(600),
        pool.embed(owned(&TEXTS[2..3]), TextRole::Query),
    )
    .await
    .context("a lone question waited for batch-mates")??;
    ensure!(question.len() == 1 && question[0].len() == pool.dim());
    let stats = pool.stats();
    ensure!(
        stats.queued_texts == 2 && !background.is_finished(),
        "the background texts left without their batch: {stats:?}"
    );
    pool.shutdown().await;
    ensure!(
        matches!(background.await?, Err(Error::PoolClosed)),
        "queued background texts are answered closed at shutdown"
    );
    Ok(())
}
