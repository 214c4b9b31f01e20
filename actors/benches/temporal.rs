//! The days a text speaks of (`engram_actors::model::temporal::mentioned`), which the index
//! reads from every record it (re)indexes: microseconds per text over the evaluation data's
//! turns, English (LoCoMo) and Chinese (MemDaily), the median of seven passes.
//!
//! ```text
//! cargo bench -p engram-actors --bench temporal
//! ```
//!
//! `ENGRAM_BENCH_TEXTS` (default 5,000): texts of each language timed. `ENGRAM_EVAL_DATA`: the
//! evaluation data directory (`locomo-dev.json`, `memdaily-dev/`), default `../shared/data`
//! beside the repository. The sets stay outside the repository: they are public data sets under
//! their own licences (LoCoMo, from snap-research/LoCoMo, is CC BY-NC 4.0; MemDaily comes from
//! nuster1128/MemSim), used unchanged as their authors publish them (docs/architecture.md,
//! "Evaluation data"). A relative path is read from the directory the bench runs in, which
//! `cargo bench` makes this crate's.

use std::time::Instant;

use anyhow::{Context, Result};
use engram_actors::model::temporal::mentioned;
use engram_storage::types::Timestamp;
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

/// The evaluation data directory: `ENGRAM_EVAL_DATA`, else `../shared/data` beside the
/// repository; one that is not there is an error naming the variable.
fn eval_data() -> Result<std::path::PathBuf> {
    let (data, from) = match std::env::var_os("ENGRAM_EVAL_DATA").filter(|v| !v.is_empty()) {
        Some(dir) => (std::path::PathBuf::from(dir), "ENGRAM_EVAL_DATA"),
        None => (
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
            "the default, ../shared/data beside the repository",
        ),
    };
    anyhow::ensure!(
        data.is_dir(),
        "the evaluation data directory {} ({from}) is not there: set ENGRAM_EVAL_DATA to the \
         directory holding locomo-dev.json and memdaily-dev/ (the sets are public data kept \
         outside the repository)",
        data.display()
    );
    Ok(data)
}

fn main() -> Result<()> {
    let data = eval_data()?;
    let limit: usize = std::env::var("ENGRAM_BENCH_TEXTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let mut memdaily: Vec<_> = std::fs::read_dir(data.join("memdaily-dev"))
        .with_context(|| format!("listing {}/memdaily-dev", data.display()))?
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
