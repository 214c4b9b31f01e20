//! What the benches share: the encoder benches' texts and the length of a measurement.
// Each bench compiles its own copy and uses only some of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

/// Conversation turns of every LoCoMo sample, in file order.
pub fn locomo_turns() -> Result<Vec<String>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/locomo-dev.json");
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
