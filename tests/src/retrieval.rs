//! The retrieval benchmark's logic (the program is `src/bin/retrieval.rs`). Each
//! conversation is written into a fresh user through the user actors, the path the gateway's
//! `POST /v1/users/{user}/turns` takes: validation, entity extraction, one SQLite transaction
//! (turn, episodic memory, pending embedding, request id), the index updated after the
//! commit, and the embedding stored by the node's pipeline after it. Once the pipeline has
//! drained ([`Bench::drained`]), each question is asked through the
//! memory search behind the context's slots (`POST /v1/users/{user}/memories/search`) in each
//! mode, and evidence recall@k is counted per category, with the search latency as a gateway
//! sees it (dense and hybrid include embedding the question; BM25 embeds nothing).

pub mod dataset;
pub mod facts;
pub mod served;

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};
use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::directory::Directory;
use engram_actors::embed::Embedder;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::index::IndexParams;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::pipeline::{Pipeline, PipelineConfig};
use engram_actors::placement::UserKey;
use engram_actors::request::user::{SearchQuery, SearchResult, TurnRequest};
use engram_actors::rerank::RerankService;
use engram_actors::services::{Metrics, Services, Settings};
use engram_inference::{EmbeddingPool, ModelKind, PoolConfig};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{MemoryKind, Timestamp};
use engram_storage::{Keyspace, Store};

use self::dataset::{Conversation, Question};

/// The cut-offs reported.
pub const KS: [usize; 3] = [5, 10, 20];

/// The modes compared, in report order.
pub const MODES: [SearchMode; 3] = [SearchMode::Dense, SearchMode::Bm25, SearchMode::Hybrid];

/// A ranking the report compares: a search mode, and whether its first candidates are
/// reranked by the node's cross-encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranking {
    /// The search mode.
    pub mode: SearchMode,
    /// Whether the search asks to be reranked.
    pub rerank: bool,
}

impl Ranking {
    /// The report's key of this ranking (its order in the tables).
    fn index(self) -> usize {
        mode_index(self.mode) + if self.rerank { MODES.len() } else { 0 }
    }

    /// The ranking whose key is `index`.
    fn of(index: usize) -> Ranking {
        Ranking {
            mode: MODES[index % MODES.len()],
            rerank: index >= MODES.len(),
        }
    }

    fn label(self) -> String {
        if self.rerank {
            format!("{:?}+rerank", self.mode)
        } else {
            format!("{:?}", self.mode)
        }
    }
}

/// A node's worth of user actors on a temporary SQLite file, with an embedding pool.
pub struct Bench {
    directory: Arc<Directory>,
    pool: EmbeddingPool,
    pipeline: Pipeline,
    clock: Arc<ManualClock>,
    /// Search active memories only (the seed's status rule; the turns' episodic memories are
    /// candidates, so this shows what that rule costs).
    active_only: bool,
    /// Where each question's hybrid candidates are written, for rerankers measured outside
    /// (`--dump-candidates`).
    dump: Option<Mutex<std::fs::File>>,
    /// The rankings each question is asked in.
    rankings: Vec<Ranking>,
    _dir: tempfile::TempDir,
}

impl Bench {
    /// Starts the pool and the actors; `index` tunes every user's memory index; with
    /// `reranker`, hybrid searches are also asked reranked (a fourth ranking).
    pub async fn start(
        pool: PoolConfig,
        index: IndexParams,
        reranker: Option<RerankService>,
    ) -> Result<Bench> {
        let model = pool.encoder.model;
        let pool = EmbeddingPool::start(pool).await?;
        Bench::on_pool(pool, model, index, reranker, None).await
    }

    /// A bench of its own (store, users, pipeline) on a started pool (shared with another
    /// bench: one model loaded), whose query embeddings wait at most `query_deadline`, as a
    /// node's do (`None`: every question waits for its vector).
    pub async fn on_pool(
        pool: EmbeddingPool,
        model: ModelKind,
        index: IndexParams,
        reranker: Option<RerankService>,
        query_deadline: Option<Duration>,
    ) -> Result<Bench> {
        let dir = tempfile::tempdir()?;
        let store = Store::sqlite(&dir.path().join("bench.sqlite"), SqliteOptions::default())?;
        let clock = ManualClock::new(Timestamp(1_780_000_000_000));
        let pipeline = Pipeline::new(PipelineConfig::default());
        let services = Services {
            store,
            keyspace: Keyspace::new("bench"),
            clock: clock.clone() as SharedClock,
            extractor: Arc::new(EntityExtractor::default()),
            embedder: Some(Embedder::new(pool.clone(), model).with_query_deadline(query_deadline)),
            pipeline: Some(pipeline.clone()),
            distillation: None,
            reranker: reranker.clone(),
            ownership: None,
            settings: Settings {
                index,
                ..Settings::default()
            },
            metrics: Arc::new(Metrics::default()),
        };
        let directory = Directory::new(services);
        pipeline.start(Arc::clone(&directory)).await?;
        Ok(Bench {
            directory,
            pool,
            pipeline,
            clock,
            active_only: false,
            dump: None,
            rankings: MODES
                .iter()
                .map(|&mode| Ranking {
                    mode,
                    rerank: false,
                })
                .chain(reranker.map(|_| Ranking {
                    mode: SearchMode::Hybrid,
                    rerank: true,
                }))
                .collect(),
            _dir: dir,
        })
    }

    /// Searches active memories only from now on.
    pub fn active_only(mut self) -> Bench {
        self.active_only = true;
        self
    }

    /// Writes each question's first [`DUMPED`] hybrid candidates to `path` from now on, one
    /// JSON line a question: its id, category, text and evidence, and the candidates' passage
    /// indices, texts and the texts of the turns before them (in a file, never in a log).
    pub fn dump_candidates(mut self, path: &std::path::Path) -> Result<Bench> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--dump-candidates {}", path.display()))?;
        self.dump = Some(Mutex::new(file));
        Ok(self)
    }

    /// The pool (for its statistics).
    pub fn pool(&self) -> &EmbeddingPool {
        &self.pool
    }

    /// Sets the clock that writes and searches read.
    pub fn set_clock(&self, at: Timestamp) {
        self.clock.set(at);
    }

    /// Waits until the pipeline has embedded everything written (a condition, polled);
    /// returns how long that took.
    pub async fn drained(&self) -> Result<Duration> {
        let started = Instant::now();
        loop {
            let pending = self
                .pipeline
                .pending(self.directory.services())
                .await?
                .entries;
            let in_rounds = self
                .pipeline
                .metrics()
                .users_in_rounds
                .load(std::sync::atomic::Ordering::Relaxed);
            if pending == 0 && in_rounds == 0 {
                return Ok(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes `conversation` as user `user` (one turn a passage, in order, in its session);
    /// its embeddings follow through the pipeline.
    pub async fn write(&self, user: &str, conversation: &Conversation) -> Result<Written> {
        let key = UserKey::new("bench", user);
        let mut passage_of: HashMap<(String, u64), usize> = HashMap::new();
        let mut session: Option<&str> = None;
        for (i, passage) in conversation.passages.iter().enumerate() {
            // Each session is written at its own date where the data set gives one, its
            // turns a second apart, so that the memories carry the time they were said.
            if let Some(at) = passage.said_at
                && session != Some(passage.session.as_str())
            {
                self.clock.set(at);
            }
            session = Some(passage.session.as_str());
            let req = TurnRequest {
                request_id: format!("{user}-{i}"),
                session_id: Some(passage.session.clone()),
                user_text: passage.text.clone(),
                assistant_text: String::new(),
                route: None,
                success: true,
                trace_id: None,
                choices: Vec::new(),
                clarification: None,
            };
            let ack = self
                .directory
                .ask_admin(&key, req.clone())
                .await
                .with_context(|| format!("writing passage {} of {user}", passage.id))?;
            let seq = ack.seq.ok_or_else(|| anyhow!("turn {i} was not written"))?;
            passage_of.insert((passage.session.clone(), seq), passage.source.unwrap_or(i));
            self.clock.advance(1_000);
        }
        Ok(Written {
            key,
            passage_of,
            passages: conversation.passages.len(),
            facts: conversation.passages.iter().any(|p| p.source.is_some()),
        })
    }

    /// Searches all the questions of a written conversation in every mode.
    pub async fn ask(&self, written: &Written, conversation: &Conversation) -> Result<Report> {
        let Written {
            key,
            passage_of,
            passages,
            facts,
        } = written;
        let user = &key.user;
        let mut report = Report {
            passages: *passages,
            ..Report::default()
        };
        let k_max = KS[KS.len() - 1];
        // A turn and its fact may both be hits: twice as many are asked for, so that the
        // first k_max distinct turns are counted.
        let asked = if *facts { 2 * k_max } else { k_max };
        for question in &conversation.questions {
            report.questions += 1;
            let mut found_by_any = false;
            for &ranking in &self.rankings {
                let query = SearchQuery {
                    query: question.text.clone(),
                    k: asked,
                    kinds: vec![MemoryKind::Episodic],
                    mode: ranking.mode,
                    active_only: self.active_only,
                    rerank: ranking.rerank,
                };
                let started = Instant::now();
                let result = self
                    .directory
                    .ask_admin(key, query.clone())
                    .await
                    .with_context(|| format!("searching for {user}"))?;
                report
                    .latency
                    .entry(ranking.index())
                    .or_default()
                    .push(started.elapsed());
                if result.embedded {
                    *report.embedded.entry(ranking.index()).or_default() += 1;
                }
                if let Some(why) = result.fallback {
                    *report.query_fallbacks.entry(why.as_str()).or_default() += 1;
                }
                if let Some(why) = result.rerank_fallback {
                    *report.rerank_fallbacks.entry(why.as_str()).or_default() += 1;
                }
                let mut hits = passages_of(&result, passage_of);
                hits.truncate(k_max);
                found_by_any |= hits.iter().any(|h| question.evidence.contains(h));
                report.add(ranking, &question.category, &question.evidence, &hits);
            }
            if !found_by_any {
                report.miss(&question.id, &question.category);
            }
            if let Some(dump) = &self.dump {
                self.dump_question(dump, key, passage_of, conversation, question)
                    .await?;
            }
        }
        Ok(report)
    }
}

/// How many hybrid candidates `--dump-candidates` writes for each question.
pub const DUMPED: usize = 50;

/// The passages (indices in their conversation) of a search's hits, best first, each once (a
/// fact's hit counts as its source's).
fn passages_of(result: &SearchResult, passage_of: &HashMap<(String, u64), usize>) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    result
        .hits
        .iter()
        .filter_map(|h| passage_of.get(&(h.memory.session_id.clone()?, h.memory.turn_id?)))
        .copied()
        .filter(|&p| seen.insert(p))
        .collect()
}

impl Bench {
    /// Writes `question`'s first [`DUMPED`] hybrid candidates to `dump`.
    async fn dump_question(
        &self,
        dump: &Mutex<std::fs::File>,
        key: &UserKey,
        passage_of: &HashMap<(String, u64), usize>,
        conversation: &Conversation,
        question: &Question,
    ) -> Result<()> {
        let query = SearchQuery {
            query: question.text.clone(),
            k: DUMPED,
            kinds: vec![MemoryKind::Episodic],
            mode: SearchMode::Hybrid,
            active_only: self.active_only,
            rerank: false,
        };
        let result = self.directory.ask_admin(key, query).await?;
        let passages = &conversation.passages;
        let hits = passages_of(&result, passage_of);
        let before = |h: usize| match h.checked_sub(1) {
            Some(p) if passages[p].session == passages[h].session => passages[p].text.as_str(),
            _ => "",
        };
        let line = serde_json::json!({
            "id": question.id,
            "category": question.category,
            "q": question.text,
            "evidence": question.evidence,
            "hits": hits,
            "texts": hits.iter().map(|&h| passages[h].text.as_str()).collect::<Vec<_>>(),
            "before": hits.iter().map(|&h| before(h)).collect::<Vec<_>>(),
        });
        // One write a line: conversations are asked concurrently.
        let mut file = dump.lock().expect("the dump file's lock");
        file.write_all(format!("{line}\n").as_bytes())?;
        Ok(())
    }
}

/// A conversation written into its user, for [`Bench::ask`].
#[derive(Debug)]
pub struct Written {
    key: UserKey,
    /// The passage each (session, turn) holds.
    passage_of: HashMap<(String, u64), usize>,
    passages: usize,
    /// Whether facts are indexed beside the turns.
    facts: bool,
}

/// Recall sums of one (mode, category).
#[derive(Debug, Clone, Default)]
struct Cell {
    questions: usize,
    recall: [f64; KS.len()],
}

/// Examples of missed questions a report keeps (ids only).
const MISSED_EXAMPLES: usize = 5;

/// Accumulated results.
#[derive(Debug, Default)]
pub struct Report {
    cells: BTreeMap<(usize, String), Cell>,
    latency: BTreeMap<usize, Vec<Duration>>,
    /// Questions none of whose evidence any mode found in its top 20, per category.
    missed: BTreeMap<String, usize>,
    /// The first few of them, by id.
    missed_examples: Vec<String>,
    /// Searches that asked to be reranked and were not, by reason.
    rerank_fallbacks: BTreeMap<&'static str, usize>,
    /// Searches ranked with their question's vector, by ranking.
    embedded: BTreeMap<usize, usize>,
    /// Searches ranked without it, by the reason.
    query_fallbacks: BTreeMap<&'static str, usize>,
    /// Passages written.
    pub passages: usize,
    /// Questions searched.
    pub questions: usize,
}

fn mode_index(mode: SearchMode) -> usize {
    match mode {
        SearchMode::Dense => 0,
        SearchMode::Bm25 => 1,
        SearchMode::Hybrid => 2,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

impl Report {
    /// Counts one question's hits (passage indices, best first) against its evidence.
    fn add(&mut self, ranking: Ranking, category: &str, evidence: &[usize], hits: &[usize]) {
        let mut recall = [0.0; KS.len()];
        for (slot, &k) in KS.iter().enumerate() {
            let found = evidence
                .iter()
                .filter(|e| hits.iter().take(k).any(|h| h == *e))
                .count();
            recall[slot] = found as f64 / evidence.len().max(1) as f64;
        }
        for category in [category.to_owned(), "all".to_owned()] {
            let cell = self.cells.entry((ranking.index(), category)).or_default();
            cell.questions += 1;
            for (sum, r) in cell.recall.iter_mut().zip(recall) {
                *sum += r;
            }
        }
    }

    /// Counts a question none of whose evidence any mode found in its top 20.
    fn miss(&mut self, id: &str, category: &str) {
        for category in [category, "all"] {
            *self.missed.entry(category.to_owned()).or_default() += 1;
        }
        if self.missed_examples.len() < MISSED_EXAMPLES {
            self.missed_examples.push(id.to_owned());
        }
    }

    /// Adds another report's counts to this one.
    pub fn merge(&mut self, other: Report) {
        for (category, n) in other.missed {
            *self.missed.entry(category).or_default() += n;
        }
        for id in other.missed_examples {
            if self.missed_examples.len() < MISSED_EXAMPLES {
                self.missed_examples.push(id);
            }
        }
        for (key, cell) in other.cells {
            let mine = self.cells.entry(key).or_default();
            mine.questions += cell.questions;
            for (sum, r) in mine.recall.iter_mut().zip(cell.recall) {
                *sum += r;
            }
        }
        for (reason, n) in other.rerank_fallbacks {
            *self.rerank_fallbacks.entry(reason).or_default() += n;
        }
        for (reason, n) in other.query_fallbacks {
            *self.query_fallbacks.entry(reason).or_default() += n;
        }
        for (ranking, n) in other.embedded {
            *self.embedded.entry(ranking).or_default() += n;
        }
        for (mode, mut latency) in other.latency {
            self.latency.entry(mode).or_default().append(&mut latency);
        }
        self.passages += other.passages;
        self.questions += other.questions;
    }

    /// Mean recall@k of `ranking` over `category` ("all" for every question).
    pub fn recall(&self, ranking: Ranking, category: &str) -> Option<[f64; KS.len()]> {
        let cell = self.cells.get(&(ranking.index(), category.to_owned()))?;
        let n = cell.questions.max(1) as f64;
        Some(cell.recall.map(|s| s / n))
    }

    /// The recall table (rows: categories then "all"; columns: mode x k) and the latency
    /// table, as markdown.
    pub fn markdown(&self) -> String {
        let mut categories: Vec<&String> = self
            .cells
            .keys()
            .filter(|(m, c)| *m == 0 && c != "all")
            .map(|(_, c)| c)
            .collect();
        categories.sort();
        let rankings: Vec<Ranking> = self.latency.keys().map(|&i| Ranking::of(i)).collect();
        let mut out = String::from("| category | n |");
        let mut rule = String::from("|---|---:|");
        for ranking in &rankings {
            for k in KS {
                out.push_str(&format!(" {} @{k} |", ranking.label()));
                rule.push_str("---:|");
            }
        }
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        let all = "all".to_owned();
        for category in categories.into_iter().chain([&all]) {
            let n = self
                .cells
                .get(&(0, category.clone()))
                .map_or(0, |c| c.questions);
            let label = if category == "all" {
                "**all**"
            } else {
                category
            };
            out.push_str(&format!("| {label} | {n} |"));
            for &ranking in &rankings {
                let recall = self.recall(ranking, category).unwrap_or_default();
                for r in recall {
                    out.push_str(&format!(" {r:.3} |"));
                }
            }
            out.push('\n');
        }
        let missed: Vec<String> = self
            .missed
            .iter()
            .map(|(category, n)| format!("{category} {n}"))
            .collect();
        if missed.is_empty() {
            out.push_str("\nFound by no mode in its top 20: none\n");
        } else {
            out.push_str(&format!(
                "\nFound by no mode in its top 20: {}; for example (question ids) {}\n",
                missed.join(", "),
                self.missed_examples.join(", ")
            ));
        }
        if !self.rerank_fallbacks.is_empty() {
            let reasons: Vec<String> = self
                .rerank_fallbacks
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            out.push_str(&format!(
                "\nSearches not reranked: {}\n",
                reasons.join(", ")
            ));
        }
        if !self.query_fallbacks.is_empty() {
            let reasons: Vec<String> = self
                .query_fallbacks
                .iter()
                .map(|(reason, n)| format!("{reason} {n}"))
                .collect();
            out.push_str(&format!(
                "\nSearches ranked without their question's vector: {}\n",
                reasons.join(", ")
            ));
        }
        out.push_str("\n| mode | searches | p50 | p99 |\n|---|---:|---:|---:|\n");
        for &ranking in &rankings {
            let mut lat = self
                .latency
                .get(&ranking.index())
                .cloned()
                .unwrap_or_default();
            lat.sort_unstable();
            out.push_str(&format!(
                "| {} | {} | {:.2} ms | {:.2} ms |\n",
                ranking.label(),
                lat.len(),
                percentile(&lat, 0.5).as_secs_f64() * 1e3,
                percentile(&lat, 0.99).as_secs_f64() * 1e3,
            ));
        }
        out
    }
}
