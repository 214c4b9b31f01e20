//! Where a fresh question's embedding time goes (a program that prints markdown tables, not a
//! CI gate).
//!
//! Part 1, one question at a time on a direct [`Encoder`]: tokenising, and the forward pass
//! in float32 and int8-rows (int8 codes with a scale per channel and per token), on 1 and 2
//! libtorch threads, taking turns question by question so drift in the shared machine's load
//! hits all alike; and how far int8-rows' query vectors are from float32's.
//! Part 2, through the [`EmbeddingPool`] as a read sends its question (the interactive class,
//! one question per call, every call a question the pool has not seen in the run) at 1, 8 and
//! 32 concurrent callers, quiet and with the pipeline's background batches of conversation
//! turns running beside them: p50/p99 and the share answered within 20 ms and 200 ms, for
//! float32 with questions waiting 5 ms for batch-mates in an idle pool and a libtorch thread
//! per core in each lane (the pool as it was), then float32 and int8-rows as the pool runs
//! now (two pairs of workers on one copy of the weights), and int8-rows with one pair.
//!
//! Questions are LoCoMo's (`locomo-dev.json` in the evaluation data directory,
//! `ENGRAM_EVAL_DATA`, default `../shared/data`), asked as queries ("query: " prefix).
//!
//! Run: `source ~/.cache/engram/env && cargo bench -p engram-inference --bench query`
//! (`ENGRAM_BENCH_SECS` sets each pool measurement's length, default 5).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use engram_inference::{
    EmbeddingPool, Encoder, EncoderConfig, PoolConfig, Precision, Priority, TextRole,
};

mod common;

const COMMAND: &str = "source ~/.cache/engram/env && cargo bench -p engram-inference --bench query";
/// Query deadlines the shares are counted against.
const DEADLINES: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(200)];
const PRECISIONS: [(&str, Precision); 2] = [
    ("float32", Precision::Float32),
    ("int8-rows", Precision::Int8Rows),
];

fn main() -> Result<()> {
    let questions = Arc::new(common::locomo_questions()?);
    let turns = Arc::new(common::locomo_turns()?);
    let span = common::measurement();
    println!("# query bench\n\ncommand: `{COMMAND}`\n");
    direct(&questions)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(pooled(questions, turns, span))
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let index = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(index).copied().unwrap_or(f64::NAN)
}

/// Part 1: one question at a time, every precision and thread count taking turns.
fn direct(questions: &[String]) -> Result<()> {
    let encoders: Vec<(&str, Encoder)> = PRECISIONS
        .iter()
        .map(|&(label, precision)| {
            let config = EncoderConfig {
                precision,
                ..EncoderConfig::default()
            };
            Ok((label, Encoder::load(&config)?))
        })
        .collect::<Result<_>>()?;
    let threads = [1, 2];
    let sample = &questions[..questions.len().min(300)];
    let tokens: usize = encoders[0]
        .1
        .tokenize(sample, TextRole::Query)?
        .iter()
        .map(Vec::len)
        .sum();
    println!(
        "## one question at a time, direct\n\n{} LoCoMo questions, {:.1} tokens a question \
         (prefix and special tokens included)\n",
        sample.len(),
        tokens as f64 / sample.len() as f64
    );
    let default_threads = tch::get_num_threads();
    // Warm-up at every shape the questions take.
    for (_, encoder) in &encoders {
        for &n in &threads {
            tch::set_num_threads(n);
            for question in sample.iter().take(50) {
                encoder.embed(&[question], TextRole::Query)?;
            }
        }
    }
    let mut tokenise = Vec::new();
    let mut forward = vec![vec![Vec::new(); threads.len()]; encoders.len()];
    for question in sample {
        let t0 = Instant::now();
        encoders[0].1.tokenize(&[question], TextRole::Query)?;
        tokenise.push(t0.elapsed().as_secs_f64() * 1e6);
        for (e, (_, encoder)) in encoders.iter().enumerate() {
            for (t, &n) in threads.iter().enumerate() {
                tch::set_num_threads(n);
                let t0 = Instant::now();
                encoder.embed(&[question], TextRole::Query)?;
                forward[e][t].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    tch::set_num_threads(default_threads);
    println!(
        "tokenising: p50 {:.0} µs, p99 {:.0} µs\n",
        quantile(&mut tokenise.clone(), 0.5),
        quantile(&mut tokenise, 0.99)
    );
    println!("| precision | threads | tokens and forward pass p50 ms | p99 ms | / float32 p50 |");
    println!("|---|---:|---:|---:|---:|");
    let base: Vec<f64> = forward[0]
        .iter()
        .map(|v| quantile(&mut v.clone(), 0.5))
        .collect();
    for (e, (label, _)) in encoders.iter().enumerate() {
        for (t, &n) in threads.iter().enumerate() {
            let p50 = quantile(&mut forward[e][t], 0.5);
            let p99 = quantile(&mut forward[e][t], 0.99);
            println!(
                "| {label} | {n} | {p50:.2} | {p99:.2} | {:.2} |",
                p50 / base[t]
            );
        }
    }
    let reference = encoders[0].1.embed(sample, TextRole::Query)?;
    for (label, encoder) in &encoders[1..] {
        let cosines: Vec<f64> = reference
            .iter()
            .zip(encoder.embed(sample, TextRole::Query)?)
            .map(|(a, b)| a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum())
            .collect();
        println!(
            "\n{label} against float32 on {} questions: cosine mean {:.5}, min {:.5}",
            cosines.len(),
            cosines.iter().sum::<f64>() / cosines.len() as f64,
            cosines.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }
    Ok(())
}

/// The pools of part 2: label, precision, how long a question waits for batch-mates in an
/// idle pool, libtorch's threads a lane (0: one per core), pairs of workers. The first is the
/// pool as it was before questions left at once on one thread a lane.
const POOLS: [(&str, Precision, Duration, usize, usize); 4] = [
    (
        "float32, waits 5 ms for batch-mates, a thread per core a lane",
        Precision::Float32,
        Duration::from_millis(5),
        0,
        1,
    ),
    ("float32", Precision::Float32, Duration::ZERO, 1, 2),
    (
        "int8-rows, one pair of workers",
        Precision::Int8Rows,
        Duration::ZERO,
        1,
        1,
    ),
    ("int8-rows", Precision::Int8Rows, Duration::ZERO, 1, 2),
];

/// Part 2: the pool, as reads use it.
async fn pooled(
    questions: Arc<Vec<String>>,
    turns: Arc<Vec<String>>,
    span: Duration,
) -> Result<()> {
    println!(
        "\n## through the pool, one question a call\n\n{} s a measurement; busy: the \
         pipeline's background batches of 32 conversation turns run meanwhile\n",
        span.as_secs()
    );
    println!(
        "| pool | callers | load | questions/s | p50 ms | p99 ms | within {} ms | within {} ms |",
        DEADLINES[0].as_millis(),
        DEADLINES[1].as_millis()
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    let next = Arc::new(AtomicUsize::new(0));
    for (label, precision, interactive_max_wait, intra_op_threads, workers) in POOLS {
        let pool = EmbeddingPool::start(PoolConfig {
            encoder: EncoderConfig {
                precision,
                ..EncoderConfig::default()
            },
            interactive_max_wait,
            intra_op_threads,
            workers,
            ..PoolConfig::default()
        })
        .await?;
        // Warm-up.
        for question in questions.iter().take(30) {
            pool.embed(vec![question.clone()], TextRole::Query).await?;
        }
        for callers in [1, 8, 32] {
            for busy in [false, true] {
                let stop = Arc::new(AtomicBool::new(false));
                let background = busy.then(|| {
                    let (pool, turns, stop) = (pool.clone(), Arc::clone(&turns), Arc::clone(&stop));
                    tokio::spawn(async move {
                        let mut at = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let batch: Vec<String> = (0..32)
                                .map(|i| turns[(at + i) % turns.len()].clone())
                                .collect();
                            at += 32;
                            let _ = pool
                                .embed_with(
                                    "pipeline",
                                    batch,
                                    TextRole::Passage,
                                    Priority::Background,
                                )
                                .await;
                        }
                    })
                });
                let started = Instant::now();
                let tasks: Vec<_> = (0..callers)
                    .map(|_| {
                        let (pool, questions, next) =
                            (pool.clone(), Arc::clone(&questions), Arc::clone(&next));
                        tokio::spawn(async move {
                            let mut latencies = Vec::new();
                            while started.elapsed() < span {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                let question = questions[i % questions.len()].clone();
                                let t0 = Instant::now();
                                pool.embed_with(
                                    "reads",
                                    vec![question],
                                    TextRole::Query,
                                    Priority::Interactive,
                                )
                                .await?;
                                latencies.push(t0.elapsed().as_secs_f64() * 1e3);
                            }
                            anyhow::Ok(latencies)
                        })
                    })
                    .collect();
                let mut latencies = Vec::new();
                for task in tasks {
                    latencies.extend(task.await??);
                }
                let elapsed = started.elapsed();
                stop.store(true, Ordering::Relaxed);
                if let Some(task) = background {
                    task.await?;
                }
                let within = |deadline: Duration| {
                    let n = latencies
                        .iter()
                        .filter(|&&ms| ms <= deadline.as_secs_f64() * 1e3)
                        .count();
                    100.0 * n as f64 / latencies.len().max(1) as f64
                };
                let shares = (within(DEADLINES[0]), within(DEADLINES[1]));
                println!(
                    "| {label} | {callers} | {} | {:.0} | {:.2} | {:.2} | {:.1}% | {:.1}% |",
                    if busy { "busy" } else { "quiet" },
                    latencies.len() as f64 / elapsed.as_secs_f64(),
                    quantile(&mut latencies, 0.5),
                    quantile(&mut latencies, 0.99),
                    shares.0,
                    shares.1
                );
            }
        }
        pool.clone().shutdown().await;
        pool.join().await;
    }
    Ok(())
}
