//! What the benches share: the encoder benches' texts and the length of a measurement.
// Each bench compiles its own copy and uses only some of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

/// The directory of the evaluation sets: the one `ENGRAM_EVAL_DATA` names, else
/// `../shared/data` beside the repository. The sets stay outside the repository: they are
/// public data sets under their own licences (LoCoMo, from snap-research/LoCoMo, is
/// CC BY-NC 4.0), used unchanged as their authors publish them (docs/architecture.md,
/// "Evaluation data"). A relative path is read from the directory the bench runs in, which
/// `cargo bench` makes this crate's. A directory that is not there is an error naming the
/// variable.
pub fn eval_data() -> Result<PathBuf> {
    let (data, from) = match std::env::var_os("ENGRAM_EVAL_DATA").filter(|v| !v.is_empty()) {
        Some(dir) => (PathBuf::from(dir), "ENGRAM_EVAL_DATA"),
        None => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
            "the default, ../shared/data beside the repository",
        ),
    };
    anyhow::ensure!(
        data.is_dir(),
        "the evaluation data directory {} ({from}) is not there: set ENGRAM_EVAL_DATA to the \
         directory holding locomo-dev.json (the sets are public data kept outside the repository)",
        data.display()
    );
    Ok(data)
}

/// Conversation turns of every LoCoMo sample of `locomo-dev.json` in [`eval_data`], in file
/// order.
pub fn locomo_turns() -> Result<Vec<String>> {
    let path = eval_data()?.join("locomo-dev.json");
    let raw = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let samples: serde_json::Value = serde_json::from_slice(&raw)?;
    let mut turns = Vec::new();
    for sample in samples.as_array().into_iter().flatten() {
        let Some(conversation) = sample.get("conversation").and_then(|c| c.as_object()) else {
            continue;
        };
        for session in 1.. {
            let Some(session) = conversation.get(&format!("session_{session}")) else {
                break;
            };
            for turn in session.as_array().into_iter().flatten() {
                if let Some(text) = turn.get("text").and_then(|t| t.as_str()) {
                    turns.push(text.to_owned());
                }
            }
        }
    }
    anyhow::ensure!(!turns.is_empty(), "no turns in {}", path.display());
    Ok(turns)
}

/// The length of each measurement: `ENGRAM_BENCH_SECS` seconds (default 5).
pub fn measurement() -> Duration {
    let secs: u64 = std::env::var("ENGRAM_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(secs)
}

/// The questions of every LoCoMo sample of `locomo-dev.json` in [`eval_data`], in file order
/// (each a question a gateway's user might ask once).
pub fn locomo_questions() -> Result<Vec<String>> {
    let path = eval_data()?.join("locomo-dev.json");
    let raw = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let samples: serde_json::Value = serde_json::from_slice(&raw)?;
    let questions: Vec<String> = samples
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|sample| sample.get("qa").and_then(|qa| qa.as_array()))
        .flatten()
        .filter_map(|qa| qa.get("question").and_then(|q| q.as_str()))
        .map(str::to_owned)
        .collect();
    anyhow::ensure!(!questions.is_empty(), "no questions in {}", path.display());
    Ok(questions)
}
