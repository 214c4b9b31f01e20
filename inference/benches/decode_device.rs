//! Inference speed on one device (a program that prints figures, not a CI gate), with no model
//! file for the decoder: a Qwen2 decoder of the real shapes (Qwen2.5-0.5B and -1.5B) with
//! seeded random weights built on the device (`Qwen2::random`), its prefill and decoding
//! tokens/s at batch 1, 8 and 32 (medians of rounds); the agreement of CPU and CUDA logits on
//! the same random weights of a small shape (float32 both; bound: cosine >= 0.99999 and max
//! abs diff <= 1e-3, TF32 kept off as libtorch's default has it), and of int8 rows against
//! float32 on the CPU; then the installed encoder's embeddings/s and the reranker's pairs/s on
//! the device.
//!
//! ```text
//! source ~/.cache/engram/env
//! cargo bench -p engram-inference --bench decode_device -- --device cuda
//! cargo bench -p engram-inference --bench decode_device -- --device cpu --shapes small
//! ```
//!
//! Options: `--device cpu|cuda` (default cuda where libtorch sees one), `--shapes` (comma
//! separated, of `small`, `0.5b`, `1.5b`; default both real shapes on CUDA, `small` on the
//! CPU), `--batches` (default `1,8,32`), `--prompt` tokens a sequence (default 128), `--new`
//! decoded tokens a sequence (default 32), `--precision` of the decoder's layers (default
//! `float32`; on a GPU the layers stay float32 whatever it says), `--no-encoders` to skip the
//! encoder and the reranker (they need the installed models). `ENGRAM_BENCH_SECS` bounds each
//! figure's rounds (default 5; at least 3 rounds).

use std::time::Instant;

use anyhow::{Context, Result, bail};
use engram_inference::qwen2::{KvCache, Qwen2, Qwen2Config};
use engram_inference::{
    DeviceChoice, Encoder, EncoderConfig, Precision, Reranker, RerankerConfig, TextRole,
};
use tch::{Device, Kind, Tensor};

mod common;

/// The seed of every random decoder here.
const SEED: u64 = 20;
/// CPU-vs-CUDA bounds on the small shape's logits.
const MIN_COSINE: f64 = 0.99999;
const MAX_ABS_DIFF: f64 = 1e-3;

struct Options {
    device: Device,
    shapes: Vec<String>,
    batches: Vec<i64>,
    prompt: i64,
    new: usize,
    precision: Precision,
    encoders: bool,
}

fn options() -> Result<Options> {
    let mut args = std::env::args().skip(1);
    let mut device = Device::cuda_if_available();
    let (mut shapes, mut batches) = (None, vec![1, 8, 32]);
    let (mut prompt, mut new, mut precision, mut encoders) = (128, 32, Precision::Float32, true);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} takes a value"));
        match arg.as_str() {
            "--device" => {
                device = match value()?.as_str() {
                    "cpu" => Device::Cpu,
                    "cuda" if tch::Cuda::is_available() => Device::Cuda(0),
                    "cuda" => bail!("--device cuda: libtorch sees no CUDA device here"),
                    other => bail!("--device {other}: cpu or cuda"),
                }
            }
            "--shapes" => shapes = Some(value()?.split(',').map(str::to_owned).collect()),
            "--batches" => {
                batches = value()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--prompt" => prompt = value()?.parse()?,
            "--new" => new = value()?.parse()?,
            "--precision" => {
                precision = serde_json::from_value(serde_json::Value::String(value()?))
                    .context("--precision: float32, float16, int8 or int8rows")?
            }
            "--no-encoders" => encoders = false,
            // What `cargo bench` passes to every bench program.
            "--bench" => {}
            other => bail!("unknown option {other}"),
        }
    }
    let shapes = shapes.unwrap_or_else(|| {
        if device == Device::Cpu {
            vec!["small".into()]
        } else {
            vec!["0.5b".into(), "1.5b".into()]
        }
    });
    Ok(Options {
        device,
        shapes,
        batches,
        prompt,
        new,
        precision,
        encoders,
    })
}

fn shape(name: &str) -> Result<Qwen2Config> {
    Ok(match name {
        "small" => Qwen2Config::small(),
        "0.5b" => Qwen2Config::qwen2_5_0_5b(),
        "1.5b" => Qwen2Config::qwen2_5_1_5b(),
        other => bail!("unknown shape {other}: small, 0.5b or 1.5b"),
    })
}

/// Waits for the device's queued work (CUDA runs asynchronously).
fn sync(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Runs `f` (which returns the work it did, in tokens) in rounds for the measurement's span
/// (at least 3 rounds after one warm-up); the median tokens/s.
fn rate(device: Device, mut f: impl FnMut() -> f64) -> f64 {
    f();
    sync(device);
    let span = common::measurement();
    let started = Instant::now();
    let mut rates = Vec::new();
    while rates.len() < 3 || started.elapsed() < span {
        let t = Instant::now();
        let work = f();
        sync(device);
        rates.push(work / t.elapsed().as_secs_f64());
    }
    median(rates)
}

/// Deterministic token ids below `vocab`, `[batch, len]`.
fn tokens(batch: i64, len: i64, vocab: i64, salt: i64) -> Tensor {
    (Tensor::arange(batch * len, (Kind::Int64, Device::Cpu)) * 7919 + salt * 104_729)
        .remainder(vocab)
        .view([batch, len])
}

fn decoder_speed(options: &Options, name: &str) -> Result<()> {
    let config = shape(name)?;
    let started = Instant::now();
    let model = Qwen2::random(config.clone(), SEED, options.device, options.precision)?;
    sync(options.device);
    println!(
        "\n## {name} ({} layers, width {}), random weights, built in {:.1} s\n",
        config.layers,
        config.width,
        started.elapsed().as_secs_f64()
    );
    println!("| batch | prefill tokens/s | decoding tokens/s |");
    println!("|---|---|---|");
    let device = options.device;
    for &batch in &options.batches {
        let prompt = tokens(batch, options.prompt, config.vocab, batch).to_device(device);
        let prefill = rate(device, || {
            let logits = model.next_logits(&prompt, &mut KvCache::default());
            let _ = logits.sum(Kind::Float).double_value(&[]);
            (batch * options.prompt) as f64
        });
        // Each sequence's prompt fed alone, then decoding steps of the whole batch at once
        // (continuous batching, as the generation pool decodes).
        let mut caches: Vec<KvCache> = (0..batch)
            .map(|b| {
                let mut cache = KvCache::default();
                let _ = model.next_logits(&prompt.narrow(0, b, 1), &mut cache);
                cache
            })
            .collect();
        let mut next: Vec<i64> = (0..batch).map(|b| b % config.vocab).collect();
        let decoding = rate(device, || {
            let mut fed = caches.iter().map(KvCache::fork).collect::<Vec<_>>();
            for _ in 0..options.new {
                let logits = model.step(&next, &mut fed);
                next = Vec::try_from(logits.argmax(-1, false).to_device(Device::Cpu))
                    .unwrap_or_else(|_| next.clone());
            }
            (batch as usize * options.new) as f64
        });
        caches.clear();
        println!("| {batch} | {prefill:.0} | {decoding:.0} |");
    }
    Ok(())
}

/// Max abs diff and cosine of two logits tensors.
fn compare(a: &Tensor, b: &Tensor) -> (f64, f64) {
    let (a, b) = (
        a.to_device(Device::Cpu)
            .to_kind(Kind::Double)
            .flatten(0, -1),
        b.to_device(Device::Cpu)
            .to_kind(Kind::Double)
            .flatten(0, -1),
    );
    let diff = (&a - &b).abs().max().double_value(&[]);
    let cosine = (a.dot(&b) / (a.norm() * b.norm())).double_value(&[]);
    (diff, cosine)
}

/// The small shape's logits for a fixed prompt (prefill, then four decoding steps), on
/// `device` in `precision`.
fn small_logits(device: Device, precision: Precision) -> Result<Tensor> {
    let config = Qwen2Config::small();
    let model = Qwen2::random(config.clone(), SEED, device, precision)?;
    let prompt = tokens(2, 24, config.vocab, 3).to_device(device);
    let mut cache = KvCache::default();
    let mut all = vec![model.forward(&prompt, &mut cache)];
    for step in 0..4 {
        let next = tokens(2, 1, config.vocab, 11 + step).to_device(device);
        all.push(model.forward(&next, &mut cache));
    }
    Ok(Tensor::cat(&all, 1).to_device(Device::Cpu))
}

fn agreement() -> Result<()> {
    println!("\n## Logits on the same random weights (small shape, 2 sequences, 28 positions)\n");
    let cpu = small_logits(Device::Cpu, Precision::Float32)?;
    let (diff, cosine) = compare(&cpu, &small_logits(Device::Cpu, Precision::Int8Rows)?);
    println!("- CPU int8 rows against CPU float32: max abs diff {diff:.5}, cosine {cosine:.6}");
    if !tch::Cuda::is_available() {
        println!("- CPU against CUDA: not measured: libtorch sees no CUDA device here");
        return Ok(());
    }
    let (diff, cosine) = compare(&cpu, &small_logits(Device::Cuda(0), Precision::Float32)?);
    let within = cosine >= MIN_COSINE && diff <= MAX_ABS_DIFF;
    println!(
        "- CPU float32 against CUDA float32: max abs diff {diff:.2e}, cosine {cosine:.8} \
         ({} the bound: cosine >= {MIN_COSINE}, max abs diff <= {MAX_ABS_DIFF})",
        if within { "within" } else { "OUTSIDE" }
    );
    Ok(())
}

/// Sentences of ordinary length for the encoder and the reranker.
fn texts(count: usize) -> Vec<String> {
    const WORDS: &[&str] = &[
        "the", "meeting", "moved", "to", "friday", "because", "my", "sister", "is", "visiting",
        "and", "we", "planned", "a", "trip", "to", "the", "coast", "with", "her", "kids", "after",
        "lunch", "I", "prefer", "line", "charts", "over", "pie", "charts",
    ];
    (0..count)
        .map(|i| {
            (0..24)
                .map(|j| WORDS[(i * 7 + j * 13) % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn encoders(device: Device) -> Result<()> {
    let choice = if let Device::Cuda(index) = device {
        DeviceChoice::Cuda(index)
    } else {
        DeviceChoice::Cpu
    };
    let encoder = Encoder::load(&EncoderConfig {
        device: choice,
        ..EncoderConfig::default()
    })
    .context("the encoder (run .ci/models)")?;
    let batch = texts(32);
    let embeddings = rate(device, || {
        let _ = encoder.embed(&batch, TextRole::Passage);
        batch.len() as f64
    });
    println!(
        "\n- encoder ({:?}) embeddings/s, batches of 32 texts of 24 words: {embeddings:.0}",
        encoder.model()
    );
    let reranker = Reranker::load(&RerankerConfig {
        device: choice,
        ..RerankerConfig::default()
    })
    .context("the reranker (run .ci/models)")?;
    let passages = texts(30);
    let passages: Vec<&str> = passages.iter().map(String::as_str).collect();
    let pairs = rate(device, || {
        let _ = reranker.score("when is the trip to the coast", &passages);
        passages.len() as f64
    });
    println!("- reranker pairs/s, one question against 30 passages: {pairs:.0}");
    Ok(())
}

fn main() -> Result<()> {
    let options = options()?;
    let _guard = tch::no_grad_guard();
    println!(
        "# Inference on {:?} ({} CPU threads), decoder layers in {:?}",
        options.device,
        tch::get_num_threads(),
        options.precision
    );
    for name in &options.shapes {
        decoder_speed(&options, name)?;
    }
    agreement()?;
    if options.encoders {
        encoders(options.device)?;
    }
    Ok(())
}
