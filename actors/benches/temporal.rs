//! The days a text speaks of (`engram_actors::model::temporal::mentioned`), which the index
//! reads from every record it (re)indexes: microseconds per text over the evaluation data's
//! turns, English (LoCoMo) and Chinese (MemDaily), the median of seven passes.
//!
//! ```text
//! cargo bench -p engram-actors --bench temporal
//! ```
//!
//! `ENGRAM_BENCH_TEXTS` (default 5,000): texts of each language timed.

use std::time::Instant;

use anyhow::{Context, Result};
use engram_actors::model::temporal::mentioned;
use engram_storage::model::Timestamp;
use serde_json::Value;

/// Every string of `value` of at least 20 bytes, in document order.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.len() >= 20 => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

fn texts(paths: &[std::path::PathBuf], limit: usize) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        strings(&serde_json::from_str(&text)?, &mut out);
        if out.len() >= limit {
            break;
        }
    }
    out.truncate(limit);
    Ok(out)
}

fn main() -> Result<()> {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
    let limit: usize = std::env::var("ENGRAM_BENCH_TEXTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let mut memdaily: Vec<_> = std::fs::read_dir(data.join("memdaily-dev"))
        .context("shared/data/memdaily-dev")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    memdaily.sort();
    let sets = [
        (
            "English (LoCoMo)",
            texts(&[data.join("locomo-dev.json")], limit)?,
        ),
        ("Chinese (MemDaily)", texts(&memdaily, limit)?),
    ];
    // 2026-12-04 00:00 UTC: every relative expression resolves.
    let written = Timestamp(1_796_342_400_000);
    for (name, set) in &sets {
        let found: usize = set.iter().map(|t| mentioned(t, written).len()).sum();
        let mut passes: Vec<f64> = (0..7)
            .map(|_| {
                let started = Instant::now();
                for t in set {
                    std::hint::black_box(mentioned(t, written));
                }
                started.elapsed().as_secs_f64() * 1e6 / set.len() as f64
            })
            .collect();
        passes.sort_by(f64::total_cmp);
        let bytes = set.iter().map(String::len).sum::<usize>() / set.len().max(1);
        println!(
            "- {name}: {} texts (mean {bytes} bytes), {found} day spans found, {:.2} µs a text (median of seven passes)",
            set.len(),
            passes[3]
        );
    }
    Ok(())
}
