//! Embedding pool tests on the real multilingual-e5-small model and libtorch, on the CPU:
//!
//! - callers get exactly what a direct encoder call gives, and concurrent calls are batched;
//! - a full queue sheds with `Overloaded` while the pool keeps serving, and shutdown drains;
//! - one tenant flooding the pool is shed at its share of the queue while another is still
//!   admitted;
//! - a request still queued at its expiry is skipped, not embedded, and background passages
//!   queued behind an expired query run on the background worker, not the interactive one;
//! - a background batch still running holds up neither an interactive request nor the
//!   shutdown, and one run while other threads kept every core busy makes its worker rest;
//! - a stopped node's idle-class threads can leave that class for the exit.
//!
//! The models must be installed (`.ci/models`); these tests fail, never skip, without them.
//! Each test starts one pool (a model load takes a couple of seconds) and checks several
//! things on it.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use engram_inference::{
    BackgroundPriority, DeviceChoice, EmbeddingPool, Encoder, EncoderConfig, Error, PoolConfig,
    Priority, TextRole, leave_idle_class,
};
use support::{BusyCores, SCHED_IDLE, threads_named, wait_for, wait_until_idle_class};

mod support;

const TEXTS: [&str; 12] = [
    "I prefer line charts for weekly revenue.",
    "请按华东区汇总上个月的订单量",
    "GMV excludes refunds: filter price > 0.",
    "What did I ask about the Shanghai warehouse last week?",
    "Remind me to renew the contract tomorrow morning.",
    "我的快递还没有送到，我要投诉",
    "Show the top ten customers by lifetime value, excluding test accounts and internal staff.",
    "ok",
    "Use the fiscal calendar, not the natural one, for quarter boundaries in every report.",
    "帮我取消明天下午三点的预约",
    "Which metric did we agree on for churn?",
    "Caroline went to the LGBTQ support group on 7 May and said it was powerful.",
];

fn encoder_config() -> EncoderConfig {
    EncoderConfig {
        device: DeviceChoice::Cpu,
        ..EncoderConfig::default()
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn owned(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_get_direct_vectors_and_are_batched() -> Result<()> {
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        workers: 1,
        max_batch: 64,
        max_wait: Duration::from_millis(100),
        queue_capacity: 256,
        tenant_share_percent: 100,
        ..PoolConfig::default()
    })
    .await?;
    let direct = Encoder::load(&encoder_config())?;

    // Every text alone, as a query and as a passage, plus a few multi-text requests: all at
    // once, from separate tasks.
    let mut requests: Vec<(Vec<String>, TextRole)> = Vec::new();
    for text in TEXTS {
        requests.push((vec![text.to_owned()], TextRole::Query));
        requests.push((vec![text.to_owned()], TextRole::Passage));
    }
    requests.push((owned(&TEXTS[..5]), TextRole::Passage));
    requests.push((owned(&TEXTS[5..]), TextRole::Query));
    let calls = requests.len() as u64;
    let tasks: Vec<_> = requests
        .iter()
        .map(|(texts, role)| {
            let pool = pool.clone();
            let (texts, role) = (texts.clone(), *role);
            tokio::spawn(async move { pool.embed(texts, role).await })
        })
        .collect();
    let mut min_cos = f64::INFINITY;
    for (task, (texts, role)) in tasks.into_iter().zip(&requests) {
        let got = task.await?.context("pooled embed")?;
        let want = direct.embed(texts, *role)?;
        ensure!(
            got.len() == texts.len(),
            "{} vectors for {} texts",
            got.len(),
            texts.len()
        );
        for (got, want) in got.iter().zip(&want) {
            ensure!(got.len() == pool.dim(), "dimension {}", got.len());
            min_cos = min_cos.min(cosine(got, want));
        }
    }
    ensure!(
        min_cos > 0.9999,
        "a pooled vector differs from the direct one: cosine {min_cos}"
    );

    let stats = pool.stats();
    println!("{stats:?}");
    ensure!(
        stats.requests == calls,
        "{} requests admitted of {calls}",
        stats.requests
    );
    ensure!(
        stats.answered == calls && stats.failed == 0,
        "answers: {stats:?}"
    );
    ensure!(
        stats.batches < calls && stats.forward_passes < calls,
        "{calls} concurrent calls took {} batches and {} forward passes",
        stats.batches,
        stats.forward_passes
    );
    ensure!(
        stats.queued_texts == 0 && stats.in_flight_texts == 0,
        "leftovers: {stats:?}"
    );
    ensure!(stats.tokens > 0 && stats.batch_sizes.iter().sum::<u64>() == stats.batches);

    // Empty input is answered without a batch.
    ensure!(pool.embed(Vec::new(), TextRole::Query).await?.is_empty());
    pool.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_sheds_keeps_serving_and_shutdown_drains() -> Result<()> {
    // Batches wait for 64 texts or 4 s, so queued requests stay queued while we look.
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        workers: 1,
        max_batch: 64,
        max_wait: Duration::from_secs(4),
        interactive_max_wait: Duration::from_secs(4),
        queue_capacity: 4,
        // One caller key: the queue-wide bound is what this test looks at.
        tenant_share_percent: 100,
        ..PoolConfig::default()
    })
    .await?;

    // Fill the queue with one 4-text request.
    let first = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.embed(owned(&TEXTS[..4]), TextRole::Passage).await })
    };
    wait_for(Duration::from_secs(1), "the queue to fill", || {
        pool.stats().queued_texts == 4
    })
    .await?;
    match pool.embed(owned(&TEXTS[4..5]), TextRole::Query).await {
        Err(Error::Overloaded {
            queued: 4,
            capacity: 4,
        }) => {}
        other => bail!("expected overloaded, got {other:?}"),
    }
    ensure!(pool.stats().rejected == 1);
    // The queued request is still served, and so are later ones.
    ensure!(first.await??.len() == 4);
    ensure!(
        pool.embed(owned(&TEXTS[4..6]), TextRole::Query)
            .await?
            .len()
            == 2
    );
    // A request larger than the whole queue is admitted into an empty queue.
    ensure!(pool.embed(owned(&TEXTS[..6]), TextRole::Query).await?.len() == 6);

    // Shutdown answers what is queued at once (not after max_wait) and then refuses.
    let queued: Vec<_> = TEXTS[6..9]
        .iter()
        .map(|text| {
            let pool = pool.clone();
            let text = (*text).to_owned();
            tokio::spawn(async move { pool.embed(vec![text], TextRole::Query).await })
        })
        .collect();
    wait_for(Duration::from_secs(1), "three queued requests", || {
        pool.stats().queued_texts == 3
    })
    .await?;
    let handle = pool.clone();
    let started = Instant::now();
    pool.shutdown().await;
    let took = started.elapsed();
    for task in queued {
        ensure!(task.await??.len() == 1, "a queued request was not answered");
    }
    ensure!(
        took < Duration::from_secs(4),
        "shutdown waited for max_wait: {took:?}"
    );
    match handle.embed(owned(&TEXTS[..1]), TextRole::Query).await {
        Err(Error::PoolClosed) => {}
        other => bail!("expected closed, got {other:?}"),
    }
    let stats = handle.stats();
    ensure!(stats.failed == 0 && stats.answered == 6, "{stats:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_batch_still_running_holds_up_neither_an_interactive_request_nor_the_shutdown()
-> Result<()> {
    // The default pool: one model, its background batches in the idle class, which a busy
    // machine may starve for as long as it stays busy.
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        ..PoolConfig::default()
    })
    .await?;
    let direct = Encoder::load(&encoder_config())?.embed(&owned(&TEXTS[..1]), TextRole::Query)?;
    // One request of 512 long texts goes alone, as one batch of seconds of CPU time.
    let long = TEXTS.join(" ");
    let background = {
        let pool = pool.clone();
        let texts = vec![long; 512];
        tokio::spawn(async move {
            pool.embed_with("", texts, TextRole::Passage, Priority::Background)
                .await
        })
    };
    wait_for(
        Duration::from_secs(60),
        "the background batch to run",
        || pool.stats().in_flight_texts == 512,
    )
    .await?;
    // An interactive request is embedded beside it, not after it.
    let vectors = pool.embed(owned(&TEXTS[..1]), TextRole::Query).await?;
    ensure!(cosine(&vectors[0], &direct[0]) > 0.9999);
    ensure!(
        !background.is_finished(),
        "the background batch finished before the interactive request: nothing was shown"
    );
    // The shutdown does not wait for it: its caller is told the pool closed (its texts stay
    // pending with whoever queued them).
    pool.clone().shutdown().await;
    match background.await? {
        Err(Error::PoolClosed) => {}
        other => bail!("the shutdown waited for the background batch: {other:?}"),
    }
    // Before the process may exit, the batch stops at its next pass and every thread of the
    // pool ends (an exit under a forward pass is a segmentation fault in libtorch's
    // destructors): the join returns once each thread's handle has joined. Out of the idle
    // class first, as a node does, so a busy machine does not starve that last pass.
    let _ = engram_inference::leave_idle_class();
    pool.join().await;
    Ok(())
}

/// A pool with the default settings, once its background lane's thread has put itself in the
/// idle class (as it does when it starts).
async fn idle_class_pool() -> Result<EmbeddingPool> {
    // One pair of workers, so the one background lane is `embed-1-bg`.
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        workers: 1,
        ..PoolConfig::default()
    })
    .await?;
    wait_until_idle_class("embed-1-bg").await?;
    Ok(pool)
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_pools_idle_class_threads_leave_that_class_for_the_exit() -> Result<()> {
    let pool = idle_class_pool().await?;
    let idle: Vec<String> = threads_named("embed-1-bg")
        .into_iter()
        .filter(|(_, policy)| *policy == SCHED_IDLE)
        .map(|(tid, _)| tid)
        .collect();
    // As a node does at its exit; here while the threads still exist, to look at them.
    match leave_idle_class() {
        Ok(moved) => {
            ensure!(
                moved >= idle.len(),
                "moved {moved} of {} threads",
                idle.len()
            );
            let still: Vec<_> = threads_named("embed-1-bg")
                .into_iter()
                .filter(|(tid, policy)| idle.contains(tid) && *policy == SCHED_IDLE)
                .collect();
            ensure!(still.is_empty(), "still in the idle class: {still:?}");
        }
        // Without CAP_SYS_NICE the kernel refuses, and says so (CI runs with it).
        Err(err) => ensure!(
            err.kind() == std::io::ErrorKind::PermissionDenied,
            "unexpected error: {err}"
        ),
    }
    pool.shutdown().await;
    Ok(())
}

/// A background batch run while other threads kept every core busy (normal-priority work; the
/// idle-class lane waited half a second for a CPU) makes its worker rest before the next batch,
/// and the rest is counted; the batch's caller still gets its vectors.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_batch_that_waited_for_a_busy_cpu_makes_its_worker_rest() -> Result<()> {
    let pool = idle_class_pool().await?;
    // Normal-priority work on every core, until the lane has waited half a second for one.
    let cores = BusyCores::start("embed-1-bg");
    let batch = tokio::spawn({
        let pool = pool.clone();
        async move {
            pool.embed_with(
                "",
                owned(&TEXTS[7..8]),
                TextRole::Passage,
                Priority::Background,
            )
            .await
        }
    });
    cores.until_waited(Duration::from_millis(500)).await?;
    let vectors = batch.await??;
    ensure!(vectors.len() == 1, "{} vectors for one text", vectors.len());
    wait_for(
        Duration::from_secs(60),
        "the worker's rest to be counted",
        || pool.stats().background_rest > Duration::ZERO,
    )
    .await?;
    pool.shutdown().await;
    Ok(())
}

/// A pool of one model whose batches leave only when 3 texts wait: what is queued stays
/// queued until then.
async fn three_text_batches(background_priority: BackgroundPriority) -> Result<EmbeddingPool> {
    Ok(EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        workers: 1,
        max_batch: 3,
        max_wait: Duration::from_secs(3600),
        interactive_max_wait: Duration::from_secs(3600),
        background_priority,
        ..PoolConfig::default()
    })
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_still_queued_at_its_expiry_is_skipped_and_its_batch_serves_the_rest()
-> Result<()> {
    let pool = three_text_batches(BackgroundPriority::Idle).await?;
    let far = Instant::now() + Duration::from_secs(3600);
    let submit = |texts: &[&str], expires: Instant| {
        let (pool, texts) = (pool.clone(), owned(texts));
        tokio::spawn(async move {
            pool.embed_before("t", texts, TextRole::Query, Priority::Interactive, expires)
                .await
        })
    };
    // Expired by the time a batch is formed: skipped, answered `Expired`, counted, and out
    // of the queue; the live request in the same batch is embedded.
    let gone = submit(&TEXTS[..2], Instant::now());
    wait_for(
        Duration::from_secs(10),
        "the expired request queued",
        || pool.stats().queued_texts == 2,
    )
    .await?;
    let live = submit(&TEXTS[2..3], far);
    match gone.await? {
        Err(Error::Expired) => {}
        other => bail!("expected expired, got {other:?}"),
    }
    let live = live.await??;
    let direct = Encoder::load(&encoder_config())?.embed(&owned(&TEXTS[2..3]), TextRole::Query)?;
    ensure!(
        cosine(&live[0], &direct[0]) > 0.9999,
        "the live request's vector"
    );
    let stats = pool.stats();
    ensure!(
        stats.expired == 1 && stats.failed == 0 && stats.queued_texts == 0,
        "{stats:?}"
    );
    ensure!(stats.tokens > 0 && stats.batches == 1, "{stats:?}");
    // A batch of expired requests only: nothing runs, and the pool serves on.
    let before = pool.stats().forward_passes;
    match submit(&TEXTS[3..6], Instant::now()).await? {
        Err(Error::Expired) => {}
        other => bail!("expected expired, got {other:?}"),
    }
    ensure!(pool.stats().forward_passes == before && pool.stats().expired == 2);
    ensure!(submit(&TEXTS[6..9], far).await??.len() == 3);
    pool.shutdown().await;
    Ok(())
}

/// The interactive worker runs what someone waits for and nothing else: when the interactive
/// requests of a batch had all expired in the queue, the background passages queued behind
/// them go to the background worker, not to the interactive one (whose thread runs at normal
/// priority, outside the background class and its rests). On the CPU, as here, background
/// requests never fill an interactive batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_passages_behind_an_expired_query_go_to_the_background_worker() -> Result<()> {
    // Background batches at normal priority, so a busy machine does not starve them here (the
    // interactive worker could take them too, but only when the background one is busy).
    let pool = three_text_batches(BackgroundPriority::Normal).await?;
    let query = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.embed_before(
                "t",
                owned(&TEXTS[..1]),
                TextRole::Query,
                Priority::Interactive,
                Instant::now(),
            )
            .await
        })
    };
    wait_for(Duration::from_secs(10), "the query queued", || {
        pool.stats().queued_texts == 1
    })
    .await?;
    let passages = pool
        .embed_with(
            "t",
            owned(&TEXTS[1..3]),
            TextRole::Passage,
            Priority::Background,
        )
        .await?;
    ensure!(
        passages.len() == 2,
        "{} vectors for two texts",
        passages.len()
    );
    match query.await? {
        Err(Error::Expired) => {}
        other => bail!("expected expired, got {other:?}"),
    }
    let stats = pool.stats();
    ensure!(
        stats.interactive_lane_texts == 0 && stats.background_lane_texts == 2,
        "the passages ran on the wrong worker: {stats:?}"
    );
    ensure!(stats.expired == 1 && stats.failed == 0, "{stats:?}");
    // A live query is still served, by the interactive worker.
    let far = Instant::now() + Duration::from_secs(3600);
    let texts = owned(&TEXTS[3..6]);
    let vectors = pool
        .embed_before("t", texts, TextRole::Query, Priority::Interactive, far)
        .await?;
    ensure!(vectors.len() == 3 && pool.stats().interactive_lane_texts == 3);
    pool.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_flooding_the_pool_is_shed_at_its_share_and_another_tenant_is_still_served()
-> Result<()> {
    // Batches wait for 64 texts or 4 s, so what is admitted stays queued while we look.
    let pool = EmbeddingPool::start(PoolConfig {
        encoder: encoder_config(),
        workers: 1,
        max_batch: 64,
        max_wait: Duration::from_secs(4),
        interactive_max_wait: Duration::from_secs(4),
        queue_capacity: 8,
        tenant_share_percent: 50,
        ..PoolConfig::default()
    })
    .await?;
    // The noisy tenant sends six single texts at once: four fit its share, two are shed.
    let noisy: Vec<_> = TEXTS[..6]
        .iter()
        .map(|text| {
            let pool = pool.clone();
            let text = (*text).to_owned();
            tokio::spawn(
                async move { pool.embed_for("noisy", vec![text], TextRole::Passage).await },
            )
        })
        .collect();
    wait_for(
        Duration::from_secs(5),
        "the noisy tenant's share to fill",
        || {
            let stats = pool.stats();
            stats.queued_texts == 4 && stats.rejected == 2
        },
    )
    .await?;
    ensure!(pool.stats().rejected_by_share == 2);
    // The queue still has room for the quiet tenant: all three of its texts are admitted
    // (one request of two texts and one of one), although the noisy tenant keeps trying.
    let quiet = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let two = pool.embed_for("quiet", owned(&TEXTS[6..8]), TextRole::Passage);
            let one = pool.embed_for("quiet", owned(&TEXTS[8..9]), TextRole::Query);
            let (two, one) = tokio::join!(two, one);
            Ok::<_, Error>((two?, one?))
        })
    };
    match pool
        .embed_for("noisy", owned(&TEXTS[9..10]), TextRole::Passage)
        .await
    {
        Err(Error::Overloaded {
            queued: 4,
            capacity: 4,
        }) => {}
        other => bail!("expected the noisy tenant shed at its share, got {other:?}"),
    }
    wait_for(
        Duration::from_secs(5),
        "the quiet tenant's texts to queue",
        || pool.stats().queued_texts == 7,
    )
    .await?;
    ensure!(pool.keys_waiting() == 2);
    let handle = pool.clone();
    pool.shutdown().await;
    let (two, one) = quiet.await??;
    ensure!(
        two.len() == 2 && one.len() == 1,
        "the quiet tenant was not served"
    );
    let mut served = 0;
    for task in noisy {
        match task.await? {
            Ok(vectors) if vectors.len() == 1 => served += 1,
            Ok(vectors) => bail!("{} vectors for one text", vectors.len()),
            Err(Error::Overloaded { .. }) => {}
            Err(other) => bail!("unexpected error {other:?}"),
        }
    }
    ensure!(
        served == 4,
        "{served} of the noisy tenant's texts were served"
    );
    let stats = handle.stats();
    ensure!(
        stats.rejected == 3 && stats.rejected_by_share == 3,
        "{stats:?}"
    );
    ensure!(handle.keys_waiting() == 0);
    Ok(())
}

#[test]
fn pool_config_reads_kebab_case_and_human_durations() -> Result<()> {
    let config: PoolConfig =
        serde_json::from_str(r#"{"workers": 2, "max-wait": "3ms", "queue-capacity": 10}"#)?;
    ensure!(config.workers == 2 && config.queue_capacity == 10);
    ensure!(config.max_wait == Duration::from_millis(3));
    ensure!(config.max_batch == PoolConfig::default().max_batch);
    ensure!(serde_json::from_str::<PoolConfig>(r#"{"max-batches": 3}"#).is_err());
    Ok(())
}
