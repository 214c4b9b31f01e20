//! `retrieval`: the retrieval benchmark. Loads LoCoMo and MemDaily files, writes
//! every conversation into a fresh user through the user actors (the gateway's write path:
//! one turn a passage, stored in a temporary SQLite file, embedded by the pipeline after the
//! commit), waits for the pipeline to drain (and prints how long that took), asks every
//! question through the memory search behind the context's slots,
//! and prints evidence recall@5/10/20 per category for dense-only, BM25-only and hybrid
//! search, with the search latency (dense and hybrid include embedding the question), and
//! how many questions no mode found any evidence of in its top 20 (with a few of their ids).
//! With `--rerank`, each hybrid search is also asked reranked by the English cross-encoder
//! (`Hybrid+rerank`; non-English questions keep the hybrid order and are counted).
//! Each set is reported in two halves (`dataset::split`): settings are tuned on the tuning
//! half only, and the checking half shows how far they carry; `--whole` reports sets whole,
//! `--half tuning` (or `checking`) one half only.
//!
//! The files are those named, or every file of the evaluation data directory: `--data DIR`,
//! else `ENGRAM_EVAL_DATA`, else `../shared/data` beside the repository. The sets stay outside
//! the repository because they are public data sets under their own licences (LoCoMo is
//! CC BY-NC 4.0), used as their authors publish them (`engram_tests::retrieval::dataset`).
//!
//! ```text
//! cargo run --release -p engram-tests --bin retrieval                       # all the data
//! retrieval --data /srv/eval-data                                           # elsewhere
//! retrieval ../shared/data/locomo-dev.json --max-conversations 2            # a subset
//! retrieval --fusion weighted --neighbour-weight 0 --neighbour-text false   # variants
//! retrieval ../shared/data/memdaily-dev/*.json --pool                       # one user a file
//! retrieval ../shared/data/locomo-dev.json --half checking --rerank         # the reranker
//! retrieval ../shared/data/locomo-dev.json --half tuning --facts /tmp/facts-tuning.jsonl
//! ```
//!
//! Recall as served (`--served`, on by default; `engram_tests::retrieval::served`): each
//! set is then written again into a second store on the same encoder, one conversation at a
//! time, and each conversation's questions are asked right after its turns, under a node's
//! query deadline (`--query-deadline-ms`, default 250) while the pipeline still embeds them;
//! hybrid recall@k, the share ranked with the question's vector and the latency are printed
//! beside those with every question embedded. `--served false` skips it.
//!
//! Conversations are written concurrently (one user each), so the pool batches across users
//! as it would across a node's users. LoCoMo's category 5 (adversarial, no evidence) is
//! skipped; malformed evidence lists are split.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use engram_actors::model::index::IndexParams;
use engram_actors::model::retrieve::{Fusion, RetrieverParams};
use engram_actors::rerank::{RerankService, RerankSettings};
use engram_inference::{EncoderConfig, ModelKind, PoolConfig, Precision, Reranker, RerankerConfig};
use engram_storage::types::Timestamp;
use engram_tests::retrieval::dataset::{self, Dataset, Half, PassageStyle};
use engram_tests::retrieval::{Bench, Report};
use engram_tests::retrieval::{facts, served};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FusionArg {
    Rrf,
    Weighted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum HalfArg {
    Tuning,
    Checking,
}

impl HalfArg {
    fn half(self) -> Half {
        match self {
            HalfArg::Tuning => Half::Tuning,
            HalfArg::Checking => Half::Checking,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum PrecisionArg {
    Float32,
    Float16,
    Int8,
    Int8Rows,
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::Float32 => Precision::Float32,
            PrecisionArg::Float16 => Precision::Float16,
            PrecisionArg::Int8 => Precision::Int8,
            PrecisionArg::Int8Rows => Precision::Int8Rows,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModelArg {
    E5,
    Minilm,
    /// bge-small-en-v1.5 (English).
    Bge,
}

/// Evidence recall of dense, BM25 and hybrid retrieval on LoCoMo and MemDaily, through the
/// user actors.
#[derive(Debug, Parser)]
#[command(name = "retrieval", about)]
struct Args {
    /// LoCoMo or MemDaily files (default: every file of the evaluation data directory).
    files: Vec<PathBuf>,
    /// The evaluation data directory, when no files are named (default: `ENGRAM_EVAL_DATA`,
    /// else `../shared/data` beside the repository).
    #[arg(long, conflicts_with = "files")]
    data: Option<PathBuf>,
    /// Only the first N conversations (trajectories) of each file.
    #[arg(long)]
    max_conversations: Option<usize>,
    /// Encoder.
    #[arg(long, value_enum, default_value_t = ModelArg::E5)]
    model: ModelArg,
    /// The encoder's linear layers (default: the model's own, as a node runs it: int8-rows
    /// for multilingual-e5-small, float32 for the English encoders).
    #[arg(long, value_enum)]
    precision: Option<PrecisionArg>,
    /// Most texts in one embedding batch.
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// Hybrid fusion.
    #[arg(long, value_enum, default_value_t = FusionArg::Rrf)]
    fusion: FusionArg,
    /// RRF rank offset.
    #[arg(long, default_value_t = 20.0)]
    rrf_k: f32,
    /// Weight of the dense list in hybrid search.
    #[arg(long, default_value_t = 1.0)]
    dense_weight: f32,
    /// Weight of the BM25 list in hybrid search.
    #[arg(long, default_value_t = 1.0)]
    bm25_weight: f32,
    /// Weight of a hybrid candidate speaking of a time the question names (0: off).
    #[arg(long, default_value_t = RetrieverParams::default().date_weight)]
    date_weight: f32,
    /// Weight of a hybrid candidate naming what the question names (0: off).
    #[arg(long, default_value_t = RetrieverParams::default().entity_weight)]
    entity_weight: f32,
    /// BM25 k1.
    #[arg(long, default_value_t = 1.2)]
    k1: f32,
    /// BM25 b.
    #[arg(long, default_value_t = 0.75)]
    b: f32,
    /// Do not stem English words.
    #[arg(long)]
    no_stem: bool,
    /// Leave session dates and message times out of the passages.
    #[arg(long)]
    no_dates: bool,
    /// Leave speakers' names out of the passages.
    #[arg(long)]
    no_speakers: bool,
    /// Weight of each neighbouring turn's vector mixed into a turn's (0: none).
    #[arg(long, default_value_t = IndexParams::default().neighbour_weight)]
    neighbour_weight: f32,
    /// Index each turn's words with its neighbouring turns' words.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    neighbour_text: bool,
    /// Search each file's conversations as one user's documents (MemDaily trajectories hold
    /// only 4-8 messages each, which makes recall@10 trivial).
    #[arg(long)]
    pool: bool,
    /// Search active memories only (the seed's status rule) instead of active and candidate.
    #[arg(long)]
    active_only: bool,
    /// Report each set whole instead of its tuning and checking halves.
    #[arg(long)]
    whole: bool,
    /// Only this half ("tuning" while tuning; "checking" for the final figures).
    #[arg(long, value_enum, conflicts_with = "whole")]
    half: Option<HalfArg>,
    /// Write each question's first 50 hybrid candidates to this file (JSON lines with the
    /// texts, for rerankers measured outside: `tests/scripts/rerank_candidates.py`).
    #[arg(long)]
    dump_candidates: Option<std::path::PathBuf>,
    /// Also ask each hybrid search reranked by the English cross-encoder (a fourth ranking,
    /// `Hybrid+rerank`), without a deadline.
    #[arg(long)]
    rerank: bool,
    /// How many of the first hybrid candidates the cross-encoder scores.
    #[arg(long, default_value_t = RerankSettings::default().candidates)]
    rerank_candidates: usize,
    /// The cross-encoder's precision (CPU; default the reranker's own).
    #[arg(long, value_enum)]
    rerank_precision: Option<PrecisionArg>,
    /// Facts distilled from the turns (the `facts` program's output; repeatable), each indexed
    /// beside the turns as a passage of its own that counts as its source turn.
    #[arg(long)]
    facts: Vec<PathBuf>,
    /// Append each fact to its source turn's text instead.
    #[arg(long)]
    facts_appended: bool,
    /// Also measure recall as served: each conversation written into a second store and its
    /// questions asked at once, under the query deadline, while the pipeline embeds the turns
    /// (printed beside hybrid recall with every question embedded).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    served: bool,
    /// The query deadline of the served pass, in milliseconds (a node's default
    /// `inference.query-deadline`).
    #[arg(long, default_value_t = NODE_QUERY_DEADLINE_MS)]
    query_deadline_ms: u64,
}

/// A node's default query deadline (`node/src/config/inference.rs`, `query_deadline`).
const NODE_QUERY_DEADLINE_MS: u64 = 250;

fn main() -> Result<()> {
    let args = Args::parse();
    let command: Vec<String> = std::env::args().collect();
    let files = if args.files.is_empty() {
        dataset::default_files(&dataset::data_dir(args.data.as_deref())?)?
    } else {
        args.files.clone()
    };
    let style = PassageStyle {
        dates: !args.no_dates,
        speakers: !args.no_speakers,
        captions: true,
    };
    let mut sets: Vec<(String, Dataset)> = Vec::new();
    for file in &files {
        let mut set = dataset::load(file, style)?;
        if let Some(n) = args.max_conversations {
            set.conversations.truncate(n);
        }
        let kind = set.kind;
        let parts = if args.whole {
            vec![(kind.to_owned(), set)]
        } else {
            let (tuning, checking) = dataset::split(set);
            [(Half::Tuning, tuning), (Half::Checking, checking)]
                .into_iter()
                .filter(|(half, _)| args.half.is_none_or(|only| only.half() == *half))
                .map(|(half, part)| (format!("{kind} ({})", half.name()), part))
                .collect()
        };
        for (label, mut part) in parts {
            if part.conversations.is_empty() {
                continue;
            }
            if args.pool {
                part.conversations =
                    vec![dataset::pool(file, std::mem::take(&mut part.conversations))];
            }
            match sets.iter_mut().find(|(l, _)| *l == label) {
                Some((_, same)) => same.conversations.append(&mut part.conversations),
                None => sets.push((label, part)),
            }
        }
    }
    // Tuning halves first, then checking halves (LoCoMo before MemDaily within each).
    sets.sort_by_key(|(label, _)| {
        (
            label.contains(Half::Checking.name()),
            !label.starts_with("LoCoMo"),
        )
    });
    if sets.is_empty() {
        bail!("no data");
    }
    let mut facts = facts::Facts::new();
    for file in &args.facts {
        facts.extend(facts::read(file)?);
    }
    let placement = if args.facts_appended {
        facts::Placement::Appended
    } else {
        facts::Placement::Beside
    };
    if !facts.is_empty() {
        for (label, set) in &mut sets {
            let added: usize = set
                .conversations
                .iter_mut()
                .map(|c| facts::add(c, &facts, placement))
                .sum();
            let place = match placement {
                facts::Placement::Beside => "beside the turns",
                facts::Placement::Appended => "appended to their turns",
            };
            println!("{label}: {added} facts indexed {place}");
        }
    }
    let model = match args.model {
        ModelArg::E5 => ModelKind::MultilingualE5Small,
        ModelArg::Minilm => ModelKind::AllMiniLmL6V2,
        ModelArg::Bge => ModelKind::BgeSmallEnV15,
    };
    let pool = PoolConfig {
        encoder: EncoderConfig {
            model,
            precision: args
                .precision
                .map_or_else(|| model.default_precision(), Precision::from),
            ..EncoderConfig::default()
        },
        max_batch: args.max_batch,
        ..PoolConfig::default()
    };
    let index = IndexParams {
        retriever: RetrieverParams {
            k1: args.k1,
            b: args.b,
            stem: !args.no_stem,
            fusion: match args.fusion {
                FusionArg::Rrf => Fusion::Rrf { k: args.rrf_k },
                FusionArg::Weighted => Fusion::Weighted,
            },
            dense_weight: args.dense_weight,
            bm25_weight: args.bm25_weight,
            date_weight: args.date_weight,
            entity_weight: args.entity_weight,
            // Turns of one evaluation conversation carry no salience, and questions ask
            // about any time of the conversation: the priors stay out of these figures.
            recency_weight: 0.0,
            salience_weight: 0.0,
            ..RetrieverParams::default()
        },
        neighbour_weight: args.neighbour_weight,
        neighbour_text: args.neighbour_text,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let reranker = if args.rerank {
        let config = RerankerConfig {
            precision: args
                .rerank_precision
                .map_or(RerankerConfig::default().precision, Precision::from),
            ..RerankerConfig::default()
        };
        let settings = RerankSettings {
            candidates: args.rerank_candidates,
            deadline: None,
            // Every conversation asks at once: none is turned away.
            queue: 4096,
        };
        Some(RerankService::start(
            move || Reranker::load(&config),
            settings,
        )?)
    } else {
        None
    };
    let served = args
        .served
        .then(|| Duration::from_millis(args.query_deadline_ms));
    runtime.block_on(run(
        &command,
        sets,
        (pool, index, reranker),
        args.active_only,
        args.dump_candidates.as_deref(),
        served,
    ))
}

async fn run(
    command: &[String],
    sets: Vec<(String, Dataset)>,
    (pool, index, reranker): (PoolConfig, IndexParams, Option<RerankService>),
    active_only: bool,
    dump_candidates: Option<&std::path::Path>,
    served_deadline: Option<Duration>,
) -> Result<()> {
    let model = pool.encoder.model;
    let mut bench = Bench::start(pool, index.clone(), reranker).await?;
    if active_only {
        bench = bench.active_only();
    }
    if let Some(path) = dump_candidates {
        bench = bench.dump_candidates(path)?;
    }
    let served_bench = match served_deadline {
        Some(deadline) => Some(Arc::new(
            served::start(&bench, model, index, deadline).await?,
        )),
        None => None,
    };
    let bench = Arc::new(bench);
    println!("command: `{}`\n", command.join(" "));
    println!("encoder {} through the embedding pool\n", model.name());
    for (n, (label, set)) in sets.into_iter().enumerate() {
        let started = Instant::now();
        // A set with dates moves the one clock to each session's date, so its conversations
        // are written one after another; the others at once.
        let first_said: Option<Timestamp> = set
            .conversations
            .iter()
            .flat_map(|c| c.passages.iter().filter_map(|p| p.said_at))
            .min();
        let mut tasks = tokio::task::JoinSet::new();
        let mut written = Vec::new();
        for (i, conversation) in set.conversations.iter().cloned().enumerate() {
            let bench = Arc::clone(&bench);
            let user = format!("{}-{n}-{i}", set.kind);
            let write = async move {
                let written = bench.write(&user, &conversation).await?;
                anyhow::Ok((written, conversation))
            };
            if first_said.is_none() {
                tasks.spawn(write);
            } else {
                written.push(write.await?);
            }
        }
        while let Some(done) = tasks.join_next().await {
            written.push(done??);
        }
        let writes_took = started.elapsed();
        // Questions are asked as of the earliest session: a dated set spans months, and the
        // memory layer's time to live (90 days for a candidate nobody confirmed) would hide
        // its first sessions as of the last.
        if let Some(first) = first_said {
            bench.set_clock(first);
        }
        let drain = bench.drained().await?;
        println!(
            "{label}: written in {:.1} s; the pipeline drained {:.1} s after the last write\n",
            writes_took.as_secs_f64(),
            drain.as_secs_f64()
        );
        let mut tasks = tokio::task::JoinSet::new();
        for (w, conversation) in written {
            let bench = Arc::clone(&bench);
            tasks.spawn(async move { bench.ask(&w, &conversation).await });
        }
        let mut report = Report::default();
        while let Some(done) = tasks.join_next().await {
            report.merge(done??);
        }
        let stats = bench.pool().stats();
        println!(
            "## {label}: {} conversations, {} passages, {} questions ({} skipped without evidence, {} unknown evidence ids); {:.1} s in all, {} texts embedded so far\n",
            set.conversations.len(),
            report.passages,
            report.questions,
            set.conversations
                .iter()
                .map(|c| c.skipped_questions)
                .sum::<usize>(),
            set.conversations
                .iter()
                .map(|c| c.unknown_evidence)
                .sum::<usize>(),
            started.elapsed().as_secs_f64(),
            stats.texts,
        );
        println!("{}", report.markdown());
        if let (Some(served_bench), Some(deadline)) = (&served_bench, served_deadline) {
            let started = Instant::now();
            let served_report = served::ask_while_busy(served_bench, n, &set).await?;
            println!(
                "### {label}: recall as served\n\n{}",
                served::beside(&report, &served_report, deadline, started.elapsed())
            );
        }
    }
    Ok(())
}
