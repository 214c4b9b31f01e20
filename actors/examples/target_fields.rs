//! Structured-target accuracy per field on the labelled intent sets that label fields
//! (`inference/data/intents_check_N.jsonl` lines with `fields`; `inference/data/LABELS.md`,
//! "Structured targets"), beside the rules' type accuracy on the same lines.
//!
//! Each field is scored on the lines of the type it belongs to, from the message and its
//! labelled type (time, place, product, period and problem are read from the message alone;
//! `service` from the rules' short target where the rules found the complaint):
//! time exact to the second, `cycle` exact, keywords either containing the other, and an
//! empty keyword list or a null label right only when nothing is found.
//!
//! ```sh
//! cargo run --release -p engram-actors --example target_fields [FILE.jsonl ...]
//! ```
//! Without files it reads every set of `inference/data` that labels fields; `ENGRAM_DETAIL=1`
//! prints each wrong field (ids, what was found and what was labelled).

use std::collections::BTreeMap;
use std::path::PathBuf;

use engram_actors::model::intent::target::structured;
use engram_storage::types::Timestamp;
use serde_json::Value;

fn main() {
    let mut files: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../inference/data");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&data)
            .unwrap_or_else(|err| panic!("{}: {err}", data.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        found.sort();
        files = found;
    }
    // field -> (right, scored)
    let mut fields: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut types: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut lines = 0;
    // `ENGRAM_DETAIL=1`: each wrong field, with what was found and labelled.
    let detail = std::env::var_os("ENGRAM_DETAIL").is_some();
    for file in &files {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let item: Value = serde_json::from_str(line).expect("a JSON line");
            let Some(labels) = item.get("fields").and_then(Value::as_object) else {
                continue;
            };
            lines += 1;
            let message = item["message"].as_str().unwrap_or_default();
            let want = item["intent_type"].as_str().unwrap_or_default();
            let written = chrono::DateTime::parse_from_rfc3339(
                item["written_at"].as_str().expect("written_at"),
            )
            .expect("RFC 3339")
            .timestamp_millis();
            let rule = engram_inference::distil::rules::apply(message);
            let found = rule.as_ref().map_or("none", |d| d.intent_type.as_str());
            let t = types.entry(want.to_owned()).or_default();
            t.0 += usize::from(found == want);
            t.1 += 1;
            let short = rule
                .as_ref()
                .filter(|d| d.intent_type == want)
                .map(|d| d.target.clone());
            let Some(got) = structured(
                want,
                message,
                short.as_deref().unwrap_or(""),
                Timestamp(written),
            ) else {
                continue;
            };
            let id = item["id"].as_str().unwrap_or_default();
            let mut score = |field: &'static str, right: bool| {
                let f = fields.entry(field).or_default();
                f.0 += usize::from(right);
                f.1 += 1;
                if !right && detail {
                    println!("{id} {field}: got {got}, labelled {labels:?}");
                }
            };
            match want {
                "appointment" => {
                    score("appointment.time", got["time"] == labels["time"]);
                    score(
                        "appointment.location",
                        keywords_match(&got["location"], &labels["location_any"]),
                    );
                }
                "complaint" => {
                    score(
                        "complaint.problem",
                        keywords_match(&got["problem"], &labels["problem_any"]),
                    );
                    if short.is_some() {
                        score(
                            "complaint.service (rules' target)",
                            keywords_match(&got["service"], &labels["service_any"]),
                        );
                    }
                }
                _ => {
                    score(
                        "subscription.product",
                        keywords_match(&got["product"], &labels["product_any"]),
                    );
                    score("subscription.cycle", got["cycle"] == labels["cycle"]);
                }
            }
        }
    }
    println!("{lines} labelled lines in {} files", files.len());
    println!("\nType accuracy of the rules alone (the model and the gate follow them):");
    for (t, (right, n)) in &types {
        println!("  {t:<22} {right:>3}/{n:<3} {:>5.1}%", pct(*right, *n));
    }
    println!("\nField accuracy, on the lines of each field's labelled type:");
    for (f, (right, n)) in &fields {
        println!("  {f:<36} {right:>3}/{n:<3} {:>5.1}%", pct(*right, *n));
    }
}

fn pct(right: usize, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        100.0 * right as f64 / n as f64
    }
}

/// Whether `got` (a string or null) names one of the labelled keywords: either contains the
/// other; an empty list is right only for null.
fn keywords_match(got: &Value, labelled: &Value) -> bool {
    let keywords: Vec<String> = labelled
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_lowercase)
                .collect()
        })
        .unwrap_or_default();
    match got.as_str().map(str::to_lowercase) {
        None => keywords.is_empty(),
        Some(got) => keywords
            .iter()
            .any(|k| got.contains(k.as_str()) || k.contains(got.as_str())),
    }
}
