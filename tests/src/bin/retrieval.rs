//! `retrieval`: the retrieval benchmark. Loads LoCoMo and MemDaily files (shared/data), treats
//! every conversation turn or message as a passage of one user, embeds passages and questions
//! with the encoder (cached on disk by a hash of model, role and text, so reruns are fast),
//! and prints evidence recall@5/10/20 per category for dense-only, BM25-only and hybrid
//! search, with the search latency (the encoder's time excluded).
//!
//! ```text
//! cargo run --release -p engram-tests --bin retrieval                       # all shared data
//! retrieval ../shared/data/locomo-dev.json --max-conversations 2            # a subset
//! retrieval --fusion weighted --dense-context 0 --bm25-previous false       # variants
//! retrieval ../shared/data/memdaily-dev/*.json --pool                       # one user a file
//! ```
//!
//! This first version calls the retriever (`engram_actors::model::retrieve`) directly, not
//! through the gateway and the user actors, which do not hold embeddings yet. LoCoMo's
//! category 5 (adversarial, no evidence) is skipped; malformed evidence lists are split.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::retrieve::{Fusion, RetrieverParams};
use engram_inference::{Encoder, EncoderConfig, ModelKind, TextRole, default_model_dir};
use engram_tests::retrieval::cache::EmbeddingCache;
use engram_tests::retrieval::dataset::{self, Dataset, PassageStyle};
use engram_tests::retrieval::{EvalOptions, Report, embed_cached, evaluate};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FusionArg {
    Rrf,
    Weighted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ModelArg {
    E5,
    Minilm,
}

/// Evidence recall of dense, BM25 and hybrid retrieval on LoCoMo and MemDaily.
#[derive(Debug, Parser)]
#[command(name = "retrieval", about)]
struct Args {
    /// LoCoMo or MemDaily files (default: everything under shared/data).
    files: Vec<PathBuf>,
    /// Only the first N conversations (trajectories) of each file.
    #[arg(long)]
    max_conversations: Option<usize>,
    /// Encoder.
    #[arg(long, value_enum, default_value_t = ModelArg::E5)]
    model: ModelArg,
    /// Texts per encoder call.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Where embeddings are cached (default `$ENGRAM_CACHE/embeddings`).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Keep embeddings in memory only.
    #[arg(long)]
    no_cache: bool,
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
    /// Weight of neighbouring turns' vectors mixed into each turn's vector (0: none).
    #[arg(long, default_value_t = 0.3)]
    dense_context: f32,
    /// Index each turn's words with the previous turn's.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    bm25_previous: bool,
    /// Index each turn's words with the next turn's.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    bm25_next: bool,
    /// Search each file's conversations as one user's documents (MemDaily trajectories hold
    /// only 4-8 messages each, which makes recall@10 trivial).
    #[arg(long)]
    pool: bool,
}

fn default_files() -> Result<Vec<PathBuf>> {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
    let mut files = vec![data.join("locomo-dev.json")];
    let mut memdaily: Vec<PathBuf> = std::fs::read_dir(data.join("memdaily-dev"))
        .with_context(|| format!("listing {}/memdaily-dev", data.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    memdaily.sort();
    files.extend(memdaily);
    Ok(files)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let command: Vec<String> = std::env::args().collect();
    let files = if args.files.is_empty() {
        default_files()?
    } else {
        args.files.clone()
    };
    let style = PassageStyle {
        dates: !args.no_dates,
        speakers: !args.no_speakers,
        captions: true,
    };
    let mut sets: Vec<Dataset> = Vec::new();
    for file in &files {
        let mut set = dataset::load(file, style)?;
        if let Some(n) = args.max_conversations {
            set.conversations.truncate(n);
        }
        if args.pool {
            set.conversations = vec![dataset::pool(file, std::mem::take(&mut set.conversations))];
        }
        match sets.iter_mut().find(|s| s.kind == set.kind) {
            Some(same) => same.conversations.append(&mut set.conversations),
            None => sets.push(set),
        }
    }
    if sets.is_empty() {
        bail!("no data");
    }
    let model = match args.model {
        ModelArg::E5 => ModelKind::MultilingualE5Small,
        ModelArg::Minilm => ModelKind::AllMiniLmL6V2,
    };
    let encoder = Encoder::load(&EncoderConfig {
        model,
        ..EncoderConfig::default()
    })?;
    let mut cache = if args.no_cache {
        EmbeddingCache::in_memory()
    } else {
        let dir = args.cache_dir.clone().unwrap_or_else(|| {
            default_model_dir()
                .parent()
                .map_or_else(|| PathBuf::from("target"), PathBuf::from)
                .join("embeddings")
        });
        EmbeddingCache::open(&dir, model.name())?
    };
    let extractor = EntityExtractor::default();
    let options = EvalOptions {
        params: RetrieverParams {
            k1: args.k1,
            b: args.b,
            stem: !args.no_stem,
            fusion: match args.fusion {
                FusionArg::Rrf => Fusion::Rrf { k: args.rrf_k },
                FusionArg::Weighted => Fusion::Weighted,
            },
            dense_weight: args.dense_weight,
            bm25_weight: args.bm25_weight,
            // Turns of one evaluation conversation carry no salience, and questions ask
            // about any time of the conversation: the priors stay out of these figures.
            recency_weight: 0.0,
            salience_weight: 0.0,
            ..RetrieverParams::default()
        },
        dense_context: args.dense_context,
        bm25_previous: args.bm25_previous,
        bm25_next: args.bm25_next,
    };
    println!("command: `{}`\n", command.join(" "));
    println!(
        "encoder {} on {}, {} cached embeddings\n",
        model.name(),
        encoder.device_name(),
        cache.len()
    );
    for set in &sets {
        let started = Instant::now();
        let passages: Vec<&str> = set
            .conversations
            .iter()
            .flat_map(|c| c.passages.iter().map(|p| p.text.as_str()))
            .collect();
        let questions: Vec<&str> = set
            .conversations
            .iter()
            .flat_map(|c| c.questions.iter().map(|q| q.text.as_str()))
            .collect();
        let passage_vectors = embed_cached(
            &encoder,
            &mut cache,
            &passages,
            TextRole::Passage,
            args.batch,
        )?;
        let question_vectors = embed_cached(
            &encoder,
            &mut cache,
            &questions,
            TextRole::Query,
            args.batch,
        )?;
        let embedded = started.elapsed();
        let mut report = Report::default();
        let (mut p_at, mut q_at) = (0, 0);
        for conversation in &set.conversations {
            let (np, nq) = (conversation.passages.len(), conversation.questions.len());
            evaluate(
                conversation,
                &passage_vectors[p_at..p_at + np],
                &question_vectors[q_at..q_at + nq],
                &options,
                &extractor,
                &mut report,
            )?;
            p_at += np;
            q_at += nq;
        }
        println!(
            "## {}: {} conversations, {} passages, {} questions ({} skipped without evidence, {} unknown evidence ids); embedding {:.1} s\n",
            set.kind,
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
            embedded.as_secs_f64(),
        );
        println!("{}", report.markdown());
    }
    Ok(())
}
