//! Recall as the product serves it: each question asked under a node's query deadline
//! (`inference.query-deadline`, 250 ms by default: past it a read is ranked without its
//! question's vector, by words and priors, and says `fallback: "deadline"`) on a node busy
//! with its own background work: each conversation's questions are asked right after its
//! turns are written, while the pipeline still embeds them (turns not yet embedded are found
//! by their words only). The figures stand beside recall with every question embedded on a
//! drained store, the benchmark's main figures.
//!
//! The served bench is a second store and pipeline on the same embedding pool (one model
//! loaded); it ranks in hybrid mode, the context's, without the reranker.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use engram_actors::model::index::IndexParams;
use engram_actors::model::retrieve::SearchMode;
use engram_inference::ModelKind;
use engram_storage::types::Timestamp;

use super::dataset::Dataset;
use super::{Bench, KS, Ranking, Report, percentile};

/// The ranking served: hybrid, not reranked.
pub const SERVED: Ranking = Ranking {
    mode: SearchMode::Hybrid,
    rerank: false,
};

/// A bench whose questions wait at most `deadline` for their vector, on `main`'s pool.
pub async fn start(
    main: &Bench,
    model: ModelKind,
    index: IndexParams,
    deadline: Duration,
) -> Result<Bench> {
    let mut bench = Bench::on_pool(main.pool().clone(), model, index, None, Some(deadline)).await?;
    bench.rankings = vec![SERVED];
    bench.active_only = main.active_only;
    Ok(bench)
}

/// Writes each conversation of `set` as user `{kind}-served-{n}-{i}` and asks its questions
/// at once, while the pipeline embeds what was just written; then waits for the pipeline to
/// drain (untimed) so the next set starts on a quiet node.
pub async fn ask_while_busy(bench: &Arc<Bench>, n: usize, set: &Dataset) -> Result<Report> {
    // Questions are asked as of the set's earliest session, as in the main pass.
    let first_said: Option<Timestamp> = set
        .conversations
        .iter()
        .flat_map(|c| c.passages.iter().filter_map(|p| p.said_at))
        .min();
    let mut report = Report::default();
    for (i, conversation) in set.conversations.iter().enumerate() {
        let user = format!("{}-served-{n}-{i}", set.kind);
        let written = bench.write(&user, conversation).await?;
        if let Some(first) = first_said {
            bench.set_clock(first);
        }
        report.merge(bench.ask(&written, conversation).await?);
    }
    bench.drained().await?;
    Ok(report)
}

/// The served figures beside the embedded ones, as markdown: recall@k of hybrid search, the
/// share of searches ranked with their question's vector (and why the others were not), and
/// the search latency.
pub fn beside(embedded: &Report, served: &Report, deadline: Duration, took: Duration) -> String {
    let row = |label: &str, report: &Report| {
        let recall = report.recall(SERVED, "all").unwrap_or_default();
        let mut latency = report
            .latency
            .get(&SERVED.index())
            .cloned()
            .unwrap_or_default();
        latency.sort_unstable();
        let searches = latency.len();
        let with_vector = report.embedded.get(&SERVED.index()).copied().unwrap_or(0);
        let mut line = format!("| {label} | {searches} |");
        for r in recall {
            line.push_str(&format!(" {r:.3} |"));
        }
        line.push_str(&format!(
            " {:.1}% | {:.2} ms | {:.2} ms |\n",
            100.0 * with_vector as f64 / searches.max(1) as f64,
            percentile(&latency, 0.5).as_secs_f64() * 1e3,
            percentile(&latency, 0.99).as_secs_f64() * 1e3,
        ));
        line
    };
    let mut out = String::from("| hybrid search | questions |");
    let mut rule = String::from("|---|---:|");
    for k in KS {
        out.push_str(&format!(" @{k} |"));
        rule.push_str("---:|");
    }
    out.push_str(" ranked with its vector | p50 | p99 |\n");
    out.push_str(&rule);
    out.push_str("---:|---:|---:|\n");
    out.push_str(&row(
        "every question embedded (drained store, no deadline)",
        embedded,
    ));
    out.push_str(&row(
        &format!(
            "as served ({} ms deadline, asked while the pipeline embeds)",
            deadline.as_millis()
        ),
        served,
    ));
    let reasons: Vec<String> = served
        .query_fallbacks
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    out.push_str(&format!(
        "\nAs served, ranked without their vector: {}; the served pass took {:.1} s\n",
        if reasons.is_empty() {
            "none".to_owned()
        } else {
            reasons.join(", ")
        },
        took.as_secs_f64()
    ));
    out
}
