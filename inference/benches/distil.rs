//! Intent distillation on the labelled tuning set `inference/data/intents.jsonl` (186 messages,
//! Chinese and English: appointments, complaints, renewals, cancellations, plain questions,
//! questions about past intents, small talk, messages carrying personal data): intent-type
//! accuracy per type for the rules only, the model only, and rules + model + gate; target
//! accuracy (the extracted target names the labelled thing); and the model's speed: latency
//! p50/p99 of one message alone, and the throughput of all messages through the generation
//! pool (continuous batching, `max-batch` 8), with tokens/s and the mean batch.
//!
//! ```text
//! cargo bench -p engram-inference --bench distil
//! ENGRAM_BENCH_ALONE=10 cargo test --release -p engram-inference --bench distil
//! ```
//!
//! `ENGRAM_BENCH_SET=check-N` (1 to 22) runs a held-out set instead,
//! `inference/data/intents_check_N.jsonl` (84 messages each, written from the label
//! definitions alone); `ENGRAM_BENCH_ALONE` (default 20) is how many messages are
//! timed one at a time; `ENGRAM_BENCH_RULES_ONLY=1` skips the model;
//! `ENGRAM_BENCH_ANSWERS=<file>` saves the model's answers there (or reuses them when the
//! file exists); `ENGRAM_BENCH_DETAIL=1` prints each message's stage results (ids and
//! types); `ENGRAM_BENCH_MODEL=<file>` runs another GGUF file under the model directory
//! (default: the node's default model);
//! `ENGRAM_BENCH_PRECISION=float32`, `float16`, `int8` or `int8-rows` packs the decoder's linear layers
//! (default: the node's default, float16); `ENGRAM_BENCH_SHOTS=N` shows the model the N
//! likest labelled messages of the built-in library first (default: the node's, 2; the set
//! measured is left out of the library).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use engram_inference::distil::shots::{DEFAULT_SHOTS, Labelled, ShotLibrary};
use engram_inference::distil::{
    DEFAULT_INTENT_TYPES, Distilled, MAX_ANSWER_TOKENS, NO_INTENT, combine, intent_prompt,
    intent_schema, needs_target, parse_answer, rules,
};
use engram_inference::{
    BackgroundPriority, Generation, GenerationConfig, GenerationPool, GenerationStats, Precision,
};

/// The labelled sets, in `inference/data`: `intents.jsonl`, the set the rules and the prompt
/// were shaped on (their errors were read), and `intents_check_N.jsonl`, held-out sets, each
/// written from the label definitions alone by someone who had read neither the rules, the
/// prompt nor the other sets (docs/benchmarks.md says which of them have since had their
/// errors read).
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data");

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() as f64 - 1.0) * p).round() as usize]
}

/// The type a stage decided (`none` without a result).
fn type_of(d: Option<&Distilled>) -> &str {
    d.map_or(NO_INTENT, |d| d.intent_type.as_str())
}

/// Rules + model + gate: the combined result, dropped when it lacks a required field (the
/// gate's retry runs the same greedy model on the same message: the same answer).
fn gated(message: &str, rule: Option<&Distilled>, model: Option<&Distilled>) -> Option<Distilled> {
    combine(message, rule, model)
        .filter(|d| !(needs_target(&d.intent_type) && d.target.trim().is_empty()))
}

/// Whether the target names the labelled thing (any target is right for a message that
/// names none, such as "我不需要续订了").
fn target_ok(d: Option<&Distilled>, want: &Labelled) -> bool {
    let target = d.map(|d| d.target.to_lowercase()).unwrap_or_default();
    want.target_any.is_empty()
        || want
            .target_any
            .iter()
            .any(|k| target.contains(&k.to_lowercase()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let (set_name, set_file) = match std::env::var("ENGRAM_BENCH_SET").as_deref() {
        Err(_) | Ok("tuning") => ("tuning".to_owned(), "intents.jsonl".to_owned()),
        Ok(set) => match set.strip_prefix("check-") {
            Some(n) => (format!("checking {n}"), format!("intents_check_{n}.jsonl")),
            None => anyhow::bail!("ENGRAM_BENCH_SET={set}: tuning or check-N"),
        },
    };
    let set_text = std::fs::read_to_string(format!("{DATA}/{set_file}"))
        .with_context(|| format!("ENGRAM_BENCH_SET: inference/data/{set_file}"))?;
    let set: Vec<Labelled> = set_text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("inference/data/{set_file}"))?;
    let types: Vec<String> = DEFAULT_INTENT_TYPES
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    // `ENGRAM_BENCH_SHOTS=N`: each message is shown the N likest labelled messages of the
    // built-in library (the tuning set and sets 1 to 18, less the set measured) first;
    // default the node's, 0 for none.
    let shots: usize = std::env::var("ENGRAM_BENCH_SHOTS")
        .ok()
        .map(|n| n.parse())
        .transpose()
        .context("ENGRAM_BENCH_SHOTS")?
        .unwrap_or(DEFAULT_SHOTS);
    let library = ShotLibrary::builtin(Some(&set_file));
    if shots > 0 {
        println!(
            "examples: the {shots} likest of {} labelled messages",
            library.len()
        );
    }
    let generation = |message: &str| Generation {
        system: intent_prompt(&types),
        user: message.to_owned(),
        shots: library.nearest(message, shots, &types),
        schema: Arc::new(intent_schema(&types)),
        max_tokens: MAX_ANSWER_TOKENS,
    };

    // The rules, once to compile their patterns, then timed over the whole set: the median
    // of seven passes.
    let ruled: Vec<Option<Distilled>> = set.iter().map(|l| rules::apply(&l.message)).collect();
    let mut passes: Vec<f64> = (0..7)
        .map(|_| {
            let started = Instant::now();
            for l in &set {
                std::hint::black_box(rules::apply(&l.message));
            }
            started.elapsed().as_secs_f64() * 1e6 / set.len() as f64
        })
        .collect();
    passes.sort_by(f64::total_cmp);
    let rules_us = passes[passes.len() / 2];

    // `ENGRAM_BENCH_RULES_ONLY=1`: the rules' figures alone, without loading the model.
    let rules_only = std::env::var_os("ENGRAM_BENCH_RULES_ONLY").is_some();
    // `ENGRAM_BENCH_ANSWERS=<file>`: the model's answers are written there, or read from it
    // when it exists (to change the rules or the gate without running the model again).
    let answers = std::env::var_os("ENGRAM_BENCH_ANSWERS").map(std::path::PathBuf::from);
    let saved: Option<Vec<Option<Distilled>>> = answers
        .as_ref()
        .filter(|p| p.exists())
        .map(|p| -> Result<_> {
            let text = std::fs::read_to_string(p)?;
            Ok(text.lines().map(|l| serde_json::from_str(l).ok()).collect())
        })
        .transpose()?;
    let (modelled, speed) = match saved {
        _ if rules_only => (vec![None; set.len()], None),
        Some(saved) if saved.len() == set.len() => (saved, None),
        Some(_) | None => {
            let (modelled, speed) = run_model(&set, &generation).await?;
            if let Some(path) = &answers {
                let lines: Vec<String> = modelled
                    .iter()
                    .map(|d| serde_json::to_string(d).unwrap_or_else(|_| "null".into()))
                    .collect();
                std::fs::write(path, lines.join("\n") + "\n")?;
            }
            (modelled, Some(speed))
        }
    };

    // Accuracy.
    let combined: Vec<Option<Distilled>> = set
        .iter()
        .zip(ruled.iter().zip(&modelled))
        .map(|(l, (r, m))| gated(&l.message, r.as_ref(), m.as_ref()))
        .collect();
    let stages: [(&str, &Vec<Option<Distilled>>); 3] = [
        ("rules only", &ruled),
        ("model only", &modelled),
        ("rules + model + gate", &combined),
    ];
    let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, l) in set.iter().enumerate() {
        by_type.entry(l.intent_type.as_str()).or_default().push(i);
    }
    println!(
        "## Intent distillation on the {set_name} set, {} labelled messages ({} Chinese, {} English)\n",
        set.len(),
        set.iter().filter(|l| l.lang == "zh").count(),
        set.iter().filter(|l| l.lang == "en").count()
    );
    println!("| expected type | messages | rules only | model only | rules + model + gate |");
    println!("|---|---|---|---|---|");
    let accuracy = |results: &Vec<Option<Distilled>>, idx: &[usize]| {
        let right = idx
            .iter()
            .filter(|&&i| type_of(results[i].as_ref()) == set[i].intent_type)
            .count();
        right as f64 / idx.len().max(1) as f64
    };
    let all: Vec<usize> = (0..set.len()).collect();
    for (t, idx) in by_type.iter().chain(std::iter::once((&"all", &all))) {
        let cells: Vec<String> = stages
            .iter()
            .map(|(_, r)| format!("{:.1}%", 100.0 * accuracy(r, idx)))
            .collect();
        println!("| {t} | {} | {} |", idx.len(), cells.join(" | "));
    }
    let mut by_category: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, l) in set.iter().enumerate() {
        by_category.entry(l.category.as_str()).or_default().push(i);
    }
    println!("\n| category | messages | rules only | model only | rules + model + gate |");
    println!("|---|---|---|---|---|");
    for (c, idx) in &by_category {
        let cells: Vec<String> = stages
            .iter()
            .map(|(_, r)| format!("{:.1}%", 100.0 * accuracy(r, idx)))
            .collect();
        println!("| {c} | {} | {} |", idx.len(), cells.join(" | "));
    }
    println!(
        "\nTarget accuracy (of the messages with an intent whose type was found, the target names the labelled thing):"
    );
    for (name, results) in stages {
        let found: Vec<usize> = (0..set.len())
            .filter(|&i| {
                set[i].intent_type != NO_INTENT
                    && type_of(results[i].as_ref()) == set[i].intent_type
            })
            .collect();
        let right = found
            .iter()
            .filter(|&&i| target_ok(results[i].as_ref(), &set[i]))
            .count();
        println!(
            "- {name}: {right} of {} ({:.1}%)",
            found.len(),
            100.0 * right as f64 / found.len().max(1) as f64
        );
    }
    // `ENGRAM_BENCH_DETAIL=1`: every message's stages, one line each (ids and types only).
    if std::env::var_os("ENGRAM_BENCH_DETAIL").is_some() {
        println!("\nid\texpected\trules\tmodel\tno_new_intent\tcombined");
        for i in 0..set.len() {
            println!(
                "{}\t{}\t{}\t{}\t{}\t{}",
                set[i].id,
                set[i].intent_type,
                type_of(ruled[i].as_ref()),
                type_of(modelled[i].as_ref()),
                rules::no_new_intent(&set[i].message),
                type_of(combined[i].as_ref()),
            );
        }
    }
    let wrong: Vec<String> = (0..set.len())
        .filter(|&i| type_of(combined[i].as_ref()) != set[i].intent_type)
        .map(|i| {
            format!(
                "{} ({}: rules {}, model {})",
                set[i].id,
                set[i].intent_type,
                type_of(ruled[i].as_ref()),
                type_of(modelled[i].as_ref())
            )
        })
        .collect();
    println!(
        "\nMisclassified by rules + model + gate (id, expected type: what each stage found):\n{}",
        wrong.join("\n")
    );

    println!("\n## Speed on {}\n", std::env::consts::ARCH);
    println!("- rules: {rules_us:.1} µs per message (median of seven passes over the set)");
    if let Some(Speed {
        latencies,
        alone_tokens,
        alone_secs,
        before,
        after,
        batch_secs,
    }) = speed
    {
        if !latencies.is_empty() {
            println!(
                "- model, one message at a time ({} messages): latency p50 {:.0} ms, p99 {:.0} ms; {:.1} tokens/s",
                latencies.len(),
                percentile(latencies.clone(), 0.5),
                percentile(latencies, 0.99),
                alone_tokens as f64 / alone_secs
            );
        }
        let (tokens, steps, seqs) = (
            after.tokens - before.tokens,
            after.steps - before.steps,
            after.step_sequences - before.step_sequences,
        );
        println!(
            "- model, all {} messages at once (continuous batching, max-batch 8): {:.1} s, {:.2} messages/s, {:.1} tokens/s, mean batch {:.2}, mean time to first token {:.0} ms (queue included)",
            set.len(),
            batch_secs,
            set.len() as f64 / batch_secs,
            tokens as f64 / batch_secs,
            seqs as f64 / steps.max(1) as f64,
            (after.first_token_ms - before.first_token_ms) as f64
                / (after.first_tokens - before.first_tokens).max(1) as f64
        );
    }
    Ok(())
}

/// What the model's runs measured.
struct Speed {
    latencies: Vec<f64>,
    alone_tokens: u64,
    alone_secs: f64,
    before: GenerationStats,
    after: GenerationStats,
    batch_secs: f64,
}

/// Runs the model on every message: `ENGRAM_BENCH_ALONE` of them one at a time first, then
/// all at once.
async fn run_model(
    set: &[Labelled],
    generation: &dyn Fn(&str) -> Generation,
) -> Result<(Vec<Option<Distilled>>, Speed)> {
    let model = std::env::var_os("ENGRAM_BENCH_MODEL").map_or_else(
        || GenerationConfig::default().model,
        std::path::PathBuf::from,
    );
    let precision = match std::env::var("ENGRAM_BENCH_PRECISION").as_deref() {
        Ok("int8") => Precision::Int8,
        Ok("float16") => Precision::Float16,
        Ok("float32") => Precision::Float32,
        Ok("int8-rows") => Precision::Int8Rows,
        Err(_) => GenerationConfig::default().precision,
        Ok(other) => {
            anyhow::bail!("ENGRAM_BENCH_PRECISION={other}: float32, float16, int8 or int8-rows")
        }
    };
    println!("model: {}, {precision:?}", model.display());
    let pool = GenerationPool::start(GenerationConfig {
        model,
        precision,
        max_batch: 8,
        queue_capacity: 1024,
        tenant_share_percent: 100,
        priority: BackgroundPriority::Normal,
        ..GenerationConfig::default()
    })
    .await
    .context("run .ci/models")?;

    // One message at a time: the latency a lone message sees.
    let alone: usize = std::env::var("ENGRAM_BENCH_ALONE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut latencies = Vec::new();
    let before = pool.stats();
    let started = Instant::now();
    for l in set.iter().take(alone) {
        let t = Instant::now();
        pool.generate("bench", generation(&l.message), None).await?;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let alone_secs = started.elapsed().as_secs_f64();
    let alone_tokens = pool.stats().tokens - before.tokens;

    // Every message at once: continuous batching.
    let before = pool.stats();
    let started = Instant::now();
    let calls: Vec<_> = set
        .iter()
        .map(|l| {
            let (pool, g) = (pool.clone(), generation(&l.message));
            tokio::spawn(async move { pool.generate("bench", g, None).await })
        })
        .collect();
    let mut modelled = Vec::new();
    for call in calls {
        modelled.push(call.await?.ok().and_then(|a| parse_answer(&a)));
    }
    let batch_secs = started.elapsed().as_secs_f64();
    let after = pool.stats();

    pool.close();
    Ok((
        modelled,
        Speed {
            latencies,
            alone_tokens,
            alone_secs,
            before,
            after,
            batch_secs,
        },
    ))
}
