//! `facts`: distils one self-contained fact from each LoCoMo turn with the generative model,
//! for the facts lever (docs/decisions/0016-distilled-facts-not-kept.md) measured outside the
//! product (`retrieval --facts FILE` indexes them beside the raw turns, each pointing to its
//! source turn, or appended to them). The model sees the session's date, the turn before and
//! the turn, and answers `{"fact": "..."}` under a JSON schema (an empty fact for a turn that
//! states nothing). One JSON line a turn goes to `--out`: the conversation, the turn's id and
//! the fact (in a file, never in a log); a run resumes where an earlier one stopped.
//!
//! ```text
//! cargo run --release -p engram-tests --bin facts -- ../shared/data/locomo-dev.json --half tuning --out /tmp/facts-tuning.jsonl
//! ```

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, ValueEnum};
use engram_inference::constrain::Schema;
use engram_inference::{BackgroundPriority, Generation, GenerationConfig, GenerationPool};
use engram_tests::retrieval::dataset::{self, Half, PassageStyle};
use engram_tests::retrieval::facts;
use futures::StreamExt as _;
use serde_json::json;

/// Characters a fact may take at most.
const FACT_CHARS: usize = 160;

/// The task, with two examples written for it (none from the evaluation data): it is the
/// same for every turn, so the decoder computes its keys and values once.
const SYSTEM: &str = "You read one message of a conversation between two people and write the fact it states about its speaker, as JSON, for a memory index.\n\
Write one short sentence that starts with the speaker's name and can be understood alone: name people instead of I, you, he, she, we or they; turn relative times (yesterday, last week, next month) into dates using the conversation's date; keep the names of things, places, activities, events and numbers.\n\
Say what the speaker did, has, likes, plans, feels or is. If the message states nothing about anyone (a greeting, thanks, a question only), answer an empty fact.\n\
Example: Date: 3 March 2021. Previous message, by Tom: \"How was your weekend?\" Speaker: Ana. Message: \"Great! I ran my first half marathon on Saturday.\" Answer: {\"fact\": \"Ana ran her first half marathon on Saturday 27 February 2021.\"}\n\
Example: Date: 9 June 2022. Previous message, by Ana: \"Good luck!\" Speaker: Tom. Message: \"Thanks, talk soon!\" Answer: {\"fact\": \"\"}";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HalfArg {
    Tuning,
    Checking,
}

/// Distils one fact from each LoCoMo turn.
#[derive(Debug, Parser)]
#[command(name = "facts", about)]
struct Args {
    /// The LoCoMo file.
    file: PathBuf,
    /// Which half (dataset::split).
    #[arg(long, value_enum)]
    half: HalfArg,
    /// Where the facts go (JSON lines; turns already there are skipped).
    #[arg(long)]
    out: PathBuf,
    /// The GGUF file, relative to the model directory.
    #[arg(long, default_value = "qwen2.5-coder-0.5b-instruct/model-q4_k_m.gguf")]
    model: PathBuf,
    /// Only the first N turns of each conversation (to look at the answers).
    #[arg(long)]
    limit: Option<usize>,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let style = PassageStyle {
        dates: true,
        speakers: true,
        captions: true,
    };
    let set = dataset::load(&args.file, style)?;
    if set.kind != "LoCoMo" {
        bail!(
            "{}: facts are distilled for LoCoMo only",
            args.file.display()
        );
    }
    let (tuning, checking) = dataset::split(set);
    let (half, part) = match args.half {
        HalfArg::Tuning => (Half::Tuning, tuning),
        HalfArg::Checking => (Half::Checking, checking),
    };
    let done = if args.out.exists() {
        facts::read(&args.out)?
    } else {
        facts::Facts::new()
    };
    let schema = Arc::new(
        Schema::from_json(&json!({
            "type": "object",
            "properties": {"fact": {"type": "string", "maxLength": FACT_CHARS}},
            "required": ["fact"],
        }))
        .map_err(anyhow::Error::msg)?,
    );
    let pool = GenerationPool::start(GenerationConfig {
        model: args.model.clone(),
        max_batch: args.max_batch,
        priority: BackgroundPriority::Normal,
        busy_share_percent: 100,
        tenant_share_percent: 100,
        system_prompts: vec![SYSTEM.to_owned()],
        ..GenerationConfig::default()
    })
    .await?;
    let mut jobs = Vec::new();
    for conversation in &part.conversations {
        let passages = &conversation.passages;
        for (i, passage) in passages
            .iter()
            .enumerate()
            .take(args.limit.unwrap_or(usize::MAX))
        {
            if done.contains_key(&(conversation.name.clone(), passage.id.clone())) {
                continue;
            }
            let (date, speaker, message) = parts(&passage.text);
            let before = match i.checked_sub(1) {
                Some(p) if passages[p].session == passage.session => {
                    let (_, who, what) = parts(&passages[p].text);
                    format!("Previous message, by {who}: \"{what}\"")
                }
                _ => "No previous message.".to_owned(),
            };
            // "1:56 pm on 8 May, 2023": the day is what the facts need.
            let date = date.rsplit(" on ").next().unwrap_or(date);
            let user = format!("Date: {date}. {before} Speaker: {speaker}. Message: \"{message}\"");
            jobs.push((conversation.name.clone(), passage.id.clone(), user));
        }
    }
    println!(
        "{}: {} turns to distil ({} done before), {}",
        half.name(),
        jobs.len(),
        done.len(),
        args.model.display()
    );
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .with_context(|| format!("--out {}", args.out.display()))?;
    let started = Instant::now();
    // Twice the batch in flight keeps every place of the batch filled.
    let mut pending = futures::stream::iter(jobs.into_iter().map(|(conversation, turn, user)| {
        let pool = &pool;
        let schema = Arc::clone(&schema);
        async move {
            let generation = Generation {
                system: SYSTEM.to_owned(),
                user,
                shots: Vec::new(),
                schema,
                max_tokens: FACT_CHARS + 16,
            };
            let answer = pool.generate("facts", generation, None).await;
            (conversation, turn, answer)
        }
    }))
    .buffer_unordered(args.max_batch * 2);
    let mut written = 0usize;
    while let Some((conversation, turn, answer)) = pending.next().await {
        let fact = match answer {
            Ok(answer) => {
                let v: serde_json::Value = serde_json::from_str(&answer)?;
                v["fact"].as_str().unwrap_or("").to_owned()
            }
            Err(err) => {
                eprintln!("{conversation} {turn}: {err}");
                continue;
            }
        };
        let line = json!({"conversation": conversation, "turn": turn, "fact": fact});
        out.write_all(format!("{line}\n").as_bytes())?;
        written += 1;
        if written.is_multiple_of(50) {
            println!(
                "{written} turns in {:.0} s ({:.2} s a turn)",
                started.elapsed().as_secs_f64(),
                started.elapsed().as_secs_f64() / written as f64
            );
        }
    }
    let stats = pool.stats();
    println!(
        "{written} turns in {:.0} s; {} tokens decoded, {} prompt tokens",
        started.elapsed().as_secs_f64(),
        stats.tokens,
        stats.prompt_tokens
    );
    pool.close();
    pool.join().await;
    Ok(())
}

/// A passage written "[date] Speaker: text", split into its date, speaker and text.
fn parts(passage: &str) -> (&str, &str, &str) {
    let (date, rest) = facts::dated(passage).unwrap_or(("", passage));
    let (speaker, text) = rest.split_once(": ").unwrap_or(("someone", rest));
    (date, speaker, text)
}
