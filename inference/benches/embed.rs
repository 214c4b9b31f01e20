//! Embedding throughput bench (a program that prints a markdown table, not a CI gate).
//!
//! Part 1: a direct [`Encoder`] at batch sizes 1, 8, 32 and 128, in embeddings per second,
//! with the mean tokens per text, float32, float16, int8 and int8-rows linear layers (`precision`) taking
//! turns in the same rounds, and how far the packed precisions' vectors are from float32's.
//! Part 2: the [`EmbeddingPool`] under 1, 8 and 32 concurrent
//! callers each sending one text per call, against the same callers taking turns on one
//! direct encoder (unbatched calls), measured in the same run: throughput, p50/p99 latency
//! and the throughput ratio. Texts are the conversation turns of `locomo-dev.json` in the
//! evaluation data directory (`ENGRAM_EVAL_DATA`, default `../shared/data` beside the
//! repository, where the public sets stay: `common::eval_data`).
//!
//! Run: `source ~/.cache/engram/env && cargo bench -p engram-inference --bench embed`
//! (`ENGRAM_BENCH_SECS` sets each measurement's length, default 5; `ENGRAM_BENCH_DEVICE=cuda`
//! runs it on the GPU, where float32 is measured with and without libtorch's autocast;
//! `ENGRAM_BENCH_MODEL` names another encoder than the default, as in `cluster.toml`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use engram_inference::{
    DeviceChoice, EmbeddingPool, Encoder, EncoderConfig, ModelKind, PoolConfig, PoolStats,
    Precision, TextRole,
};
use hdrhistogram::Histogram;

mod common;
use common::locomo_turns;

/// Rounds per concurrency level, alternating pool and direct.
const ROUNDS: u32 = 3;

const COMMAND: &str = "source ~/.cache/engram/env && cargo bench -p engram-inference --bench embed";

fn main() -> Result<()> {
    let span = common::measurement();
    let secs = span.as_secs();
    let texts = Arc::new(locomo_turns()?);
    let device = bench_device()?;
    let config = EncoderConfig {
        device,
        model: bench_model()?,
        ..EncoderConfig::default()
    };
    let encoder = Encoder::load(&config)?;
    // The packed precisions are the CPU's (elsewhere the layers stay float32); on a GPU the
    // float32 encoder under libtorch's autocast (half-precision matrix products) is measured
    // beside it instead, when it runs there (no encoder of its own: the float32 one).
    let mut packed: Vec<(&str, Option<Encoder>)> = Vec::new();
    if encoder.on_cpu() {
        for (label, precision) in [
            ("float16", Precision::Float16),
            ("int8", Precision::Int8),
            ("int8-rows", Precision::Int8Rows),
        ] {
            if precision.is_int8() && !config.model.takes_int8() {
                continue;
            }
            let config = EncoderConfig {
                precision,
                ..config.clone()
            };
            packed.push((label, Some(Encoder::load(&config)?)));
        }
    } else {
        match embed(&encoder, &texts[..8], true) {
            Ok(_) => packed.push(("autocast", None)),
            Err(err) => println!("autocast is not measured: {err:#}\n"),
        }
    }
    let tokens: usize = encoder
        .tokenize(&texts, TextRole::Passage)?
        .iter()
        .map(Vec::len)
        .sum();
    println!("# embed bench\n");
    println!("command: `{COMMAND}`\n");
    println!(
        "model {} on {}, libtorch threads {}, {} locomo turns, {:.1} tokens/text (prefix and \
         special tokens included), {secs} s per measurement in {ROUNDS} alternating rounds\n",
        encoder.model().name(),
        encoder.device_name(),
        tch::get_num_threads(),
        texts.len(),
        tokens as f64 / texts.len() as f64
    );

    println!("## direct encoder\n");
    let mut header = "| batch size | float32 embeddings/s | ms/batch |".to_owned();
    let mut rule = "|---:|---:|---:|".to_owned();
    for (label, ..) in &packed {
        header.push_str(&format!(" {label} embeddings/s | ms/batch |"));
        rule.push_str("---:|---:|");
    }
    for (label, ..) in &packed {
        header.push_str(&format!(" {label} / float32 |"));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    let encoders: Vec<(&Encoder, bool)> = std::iter::once((&encoder, false))
        .chain(
            packed
                .iter()
                .map(|(_, own)| (own.as_ref().unwrap_or(&encoder), own.is_none())),
        )
        .collect();
    // Warm-up: libtorch's first passes at new shapes are several times slower.
    let sizes = [1, 8, 32, 128];
    for batch in sizes {
        for &(encoder, autocast) in &encoders {
            direct_batches(encoder, autocast, &texts, batch, Duration::from_millis(500))?;
        }
    }
    // The sizes and precisions take turns in short rounds, so drift in the shared machine's
    // load hits all.
    let mut totals = vec![vec![(0, Duration::ZERO); encoders.len()]; sizes.len()];
    for _ in 0..ROUNDS {
        for (batch, total) in sizes.iter().zip(&mut totals) {
            for (&(encoder, autocast), total) in encoders.iter().zip(total.iter_mut()) {
                let (done, elapsed) =
                    direct_batches(encoder, autocast, &texts, *batch, span / ROUNDS)?;
                total.0 += done;
                total.1 += elapsed;
            }
        }
    }
    for (batch, totals) in sizes.into_iter().zip(totals) {
        let per_sec: Vec<f64> = totals
            .iter()
            .map(|(done, elapsed)| *done as f64 / elapsed.as_secs_f64())
            .collect();
        let mut row = format!("| {batch} |");
        for rate in &per_sec {
            row.push_str(&format!(
                " {rate:.1} | {:.1} |",
                1000.0 * batch as f64 / rate
            ));
        }
        for rate in &per_sec[1..] {
            row.push_str(&format!(" {:.2} |", rate / per_sec[0]));
        }
        println!("{row}");
    }
    let sample = &texts[..256.min(texts.len())];
    let reference = encoder.embed(sample, TextRole::Passage)?;
    for (label, own) in &packed {
        let other = own.as_ref().unwrap_or(&encoder);
        let cosines: Vec<f64> = reference
            .iter()
            .zip(embed(other, sample, own.is_none())?)
            .map(|(a, b)| a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum())
            .collect();
        println!(
            "\n{label} against float32 on the first {} turns (one call): cosine mean {:.5}, min {:.5}",
            cosines.len(),
            cosines.iter().sum::<f64>() / cosines.len() as f64,
            cosines.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }
    drop(packed);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(concurrent(encoder, config, texts, span))
}

/// `ENGRAM_BENCH_DEVICE`: `cpu` (the default), `auto` (CUDA where libtorch sees it) or
/// `cuda`.
fn bench_device() -> Result<DeviceChoice> {
    match std::env::var("ENGRAM_BENCH_DEVICE").as_deref() {
        Err(_) | Ok("cpu") => Ok(DeviceChoice::Cpu),
        Ok("auto") => Ok(DeviceChoice::Auto),
        Ok("cuda") => Ok(DeviceChoice::Cuda(0)),
        Ok(other) => anyhow::bail!("ENGRAM_BENCH_DEVICE is cpu, auto or cuda, not {other:?}"),
    }
}

/// `ENGRAM_BENCH_MODEL`: the encoder, by its configuration name (default: the node's).
fn bench_model() -> Result<ModelKind> {
    let Ok(name) = std::env::var("ENGRAM_BENCH_MODEL") else {
        return Ok(ModelKind::default());
    };
    ModelKind::ALL
        .into_iter()
        .find(|model| model.name() == name)
        .ok_or_else(|| anyhow::anyhow!("ENGRAM_BENCH_MODEL names no encoder: {name:?}"))
}

/// Runs batches of `batch` consecutive turns for about `span`; returns texts done and time.
fn direct_batches(
    encoder: &Encoder,
    autocast: bool,
    texts: &[String],
    batch: usize,
    span: Duration,
) -> Result<(usize, Duration)> {
    embed(encoder, &texts[..batch], autocast)?; // warm-up
    let started = Instant::now();
    let mut done = 0;
    while started.elapsed() < span {
        let start = done % (texts.len() - batch);
        embed(encoder, &texts[start..start + batch], autocast)?;
        done += batch;
    }
    Ok((done, started.elapsed()))
}

/// Embeds `texts` as passages, under libtorch's autocast where `autocast` says (CUDA only).
fn embed(encoder: &Encoder, texts: &[String], autocast: bool) -> Result<Vec<Vec<f32>>> {
    if !autocast {
        return Ok(encoder.embed(texts, TextRole::Passage)?);
    }
    let call = std::panic::AssertUnwindSafe(|| {
        tch::autocast(true, || encoder.embed(texts, TextRole::Passage))
    });
    match std::panic::catch_unwind(call) {
        Ok(embedded) => Ok(embedded?),
        Err(_) => anyhow::bail!("the forward pass panicked under autocast"),
    }
}

/// One measurement: calls answered, time taken, latencies in microseconds.
struct Run {
    calls: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Run {
    fn empty() -> Result<Run> {
        Ok(Run {
            calls: 0,
            elapsed: Duration::ZERO,
            latency: Histogram::new(3)?,
        })
    }

    fn merge(&mut self, other: Run) -> Result<()> {
        self.calls += other.calls;
        self.elapsed += other.elapsed;
        self.latency.add(other.latency)?;
        Ok(())
    }

    fn per_sec(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    fn ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }
}

async fn concurrent(
    encoder: Encoder,
    config: EncoderConfig,
    texts: Arc<Vec<String>>,
    span: Duration,
) -> Result<()> {
    let pool_config = PoolConfig {
        encoder: config,
        workers: 1,
        max_batch: 32,
        max_wait: Duration::from_millis(5),
        queue_capacity: 4096,
        tenant_share_percent: 100,
        ..PoolConfig::default()
    };
    println!(
        "\n## pool vs direct unbatched calls (one text per call)\n\npool: {} worker, max_batch \
         {}, max_wait {:?}; direct: the callers take turns on one encoder; {ROUNDS} alternating \
         rounds each\n",
        pool_config.workers, pool_config.max_batch, pool_config.max_wait
    );
    let pool = EmbeddingPool::start(pool_config).await?;
    let direct = Arc::new(Mutex::new(encoder));
    println!(
        "| callers | pool emb/s | pool p50 ms | pool p99 ms | mean batch | direct emb/s | \
         direct p50 ms | direct p99 ms | pool/direct |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for callers in [1, 8, 32] {
        let before = pool.stats();
        // Pool and direct take turns in short rounds, so drift in the machine's load (it is
        // shared) hits both alike.
        let mut pooled = Run::empty()?;
        let mut unbatched = Run::empty()?;
        for _ in 0..ROUNDS {
            let round = load(callers, span / ROUNDS, &texts, {
                let pool = pool.clone();
                move |text| {
                    let pool = pool.clone();
                    async move {
                        pool.embed(vec![text], TextRole::Passage).await?;
                        anyhow::Ok(())
                    }
                }
            })
            .await?;
            pooled.merge(round)?;
            let round = load(callers, span / ROUNDS, &texts, {
                let direct = Arc::clone(&direct);
                move |text| {
                    let direct = Arc::clone(&direct);
                    async move {
                        tokio::task::spawn_blocking(move || {
                            let encoder = direct.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                            encoder.embed(&[text], TextRole::Passage)?;
                            anyhow::Ok(())
                        })
                        .await?
                    }
                }
            })
            .await?;
            unbatched.merge(round)?;
        }
        let after = pool.stats();
        println!(
            "| {callers} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
            pooled.per_sec(),
            pooled.ms(0.5),
            pooled.ms(0.99),
            mean_batch(&before, &after),
            unbatched.per_sec(),
            unbatched.ms(0.5),
            unbatched.ms(0.99),
            pooled.per_sec() / unbatched.per_sec()
        );
    }
    let stats = pool.stats();
    pool.shutdown().await;
    println!(
        "\npool totals: {} requests, {} batches, {} forward passes, {} rejected",
        stats.requests, stats.batches, stats.forward_passes, stats.rejected
    );
    Ok(())
}

fn mean_batch(before: &PoolStats, after: &PoolStats) -> f64 {
    let batches = after.batches - before.batches;
    (after.texts - before.texts) as f64 / batches.max(1) as f64
}

/// `callers` tasks each call `call` with the next turn in a loop for `span` (after one
/// warm-up call each); latencies of all calls go into one histogram.
async fn load<F, Fut>(
    callers: usize,
    span: Duration,
    texts: &Arc<Vec<String>>,
    call: F,
) -> Result<Run>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), anyhow::Error>> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let call = call.clone();
            let texts = Arc::clone(texts);
            tokio::spawn(async move {
                let mut latency = Histogram::<u64>::new(3)?;
                let mut calls = 0u64;
                let mut next = caller * 97;
                call(texts[next % texts.len()].clone()).await?;
                while started.elapsed() < span {
                    next += 1;
                    let text = texts[next % texts.len()].clone();
                    let t0 = Instant::now();
                    call(text).await?;
                    latency.record(u64::try_from(t0.elapsed().as_micros())?)?;
                    calls += 1;
                }
                anyhow::Ok((calls, latency))
            })
        })
        .collect();
    let mut run = Run::empty()?;
    for task in tasks {
        let (calls, latency) = task.await??;
        run.calls += calls;
        run.latency.add(latency)?;
    }
    run.elapsed = started.elapsed();
    Ok(run)
}
