//! The tenant's shared sets on the real encoder (multilingual-e5-small), through the node's
//! directory: how well the semantic SQL cache tells a question that the stored SQL answers
//! from a near-miss that needs other SQL, and how long lookups and few-shot searches take.
//!
//! Accuracy runs on the labelled set `actors/benches/data/sql_cache_pairs.jsonl` (English and
//! Chinese business analytics questions; each pair a question stored with its SQL and one
//! asked later, labelled `same_sql` and with a kind: `paraphrase`, or a near-miss of a
//! different filter, limit or grouping, metric, entity or time window, or unrelated). Each
//! pair is stored in a domain of its own (lookups only compare within a route and domain) and
//! looked up once with the tenant's threshold at 0.5, the least allowed, so the lookup reports
//! the raw best similarity: in a tenant with the literal guard off and in one with it on; the
//! thresholds 0.88 to 0.98 are then applied offline. Latency (the default settings: 0.92, the
//! guard on): lookups of an exact normalised match (no encoder), a repeated question (its
//! embedding cached) and a new question (the encoder runs), with the pairs' entries and with
//! `ENGRAM_BENCH_ENTRIES` synthetic entries in one domain, next to the encoder alone; the rate
//! of puts; and few-shot searches (limit 3) over `ENGRAM_BENCH_EXAMPLES` approved examples.
//! Nothing is asserted on time: the bench prints figures, and the machine's load average with
//! them (encoder latency follows whatever else runs on the machine).
//!
//! ```text
//! cargo test -p engram-actors --bench shared_sets        # dev profile
//! cargo bench -p engram-actors --bench shared_sets       # optimised
//! ```
//!
//! First, before the encoder starts: the cost of reading a SQL text with the parser
//! (`engram_actors::tenant::statement::read_query`, run once per put, record, import or edit,
//! and once per entry or example about to be served) for a few typical queries, alone.
//! `ENGRAM_BENCH_PARSE_ONLY=1` stops after it.
//!
//! `ENGRAM_BENCH_ENTRIES` (default 10,000): synthetic entries in the large set;
//! `ENGRAM_BENCH_EXAMPLES` (default 1,000): approved few-shot examples;
//! `ENGRAM_BENCH_LOOKUPS` (default 200): timed lookups or searches per case.

#[path = "shared_sets/pairs.rs"]
mod pairs;
#[path = "shared_sets/questions.rs"]
mod questions;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use engram_actors::directory::Directory;
use engram_actors::embed::Embedder;
use engram_actors::placement::UserKey;
use engram_actors::request::tenant::{
    ExampleImport, ExampleSearch, PortableExample, ReadSettings, SqlLookup, SqlLookupReply, SqlPut,
    WriteSettings,
};
use engram_storage::shared::ExampleStatus;
use pairs::{Pair, Scored, load_pairs, print_accuracy};
use questions::{fresh_questions, new_questions, reworded, synthetic_questions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::Mode;
use tempfile::TempDir;

/// The gateway's route of every entry.
const ROUTE: &str = "nl2sql";
/// Untimed lookups before each timed case.
const WARM_UP: usize = 20;
/// Texts per call when embedding or importing in bulk (under a tenant's share of the pool's
/// queue).
const CHUNK: usize = 250;

/// A count from the environment, or `default`.
fn env_usize(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

/// The `p` quantile (0 to 1) of `xs`, nearest rank.
fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n => xs[((n as f64 - 1.0) * p).round() as usize],
    }
}

/// A lookup of `question` in `domain`.
fn lookup(question: &str, domain: &str) -> SqlLookup {
    SqlLookup {
        question: question.into(),
        route: ROUTE.into(),
        domain: domain.into(),
        // The actor embeds it (through the node's cache).
        vector: None,
    }
}

/// Sets the tenant's least similarity of a hit and its literal guard.
async fn configure(
    directory: &Directory,
    key: &UserKey,
    similarity: f32,
    literal_guard: bool,
) -> Result<()> {
    let mut settings = directory.ask_admin(key, ReadSettings).await?;
    settings.sql_similarity = similarity;
    settings.literal_guard = literal_guard;
    let request_id = format!("settings-{}-{literal_guard}", (similarity * 1000.0).round());
    directory
        .ask_admin(
            key,
            WriteSettings {
                request_id,
                settings,
            },
        )
        .await?;
    Ok(())
}

/// Lookups of each question after `WARM_UP` untimed ones: milliseconds each, and the hits.
async fn time_lookups(
    directory: &Directory,
    key: &UserKey,
    warm_up: &[(String, String)],
    timed: &[(String, String)],
) -> Result<(Vec<f64>, usize)> {
    for (question, domain) in warm_up.iter().take(WARM_UP) {
        directory.ask_admin(key, lookup(question, domain)).await?;
    }
    let mut ms = Vec::with_capacity(timed.len());
    let mut hits = 0;
    for (question, domain) in timed {
        let started = Instant::now();
        let reply: SqlLookupReply = directory.ask_admin(key, lookup(question, domain)).await?;
        ms.push(started.elapsed().as_secs_f64() * 1e3);
        ensure!(reply.fallback.is_none(), "a lookup went without its vector");
        hits += usize::from(reply.hit.is_some());
    }
    Ok((ms, hits))
}

/// A row of the latency table.
fn latency_row(set: &str, case: &str, ms: &[f64], hits: Option<usize>) {
    println!(
        "| {set} | {case} | {} | {} | {:.2} | {:.2} |",
        ms.len(),
        hits.map_or("-".into(), |h| h.to_string()),
        percentile(ms, 0.5),
        percentile(ms, 0.99)
    );
}

/// The machine's load average over the last minute (the bench shares the machine).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// The bench's node, its tenants' keys and the timed lookups' sizes.
struct Bench {
    node: support::Node,
    embedder: Embedder,
    rng: SmallRng,
    /// Timed lookups or searches per case.
    timed: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let entries = env_usize("ENGRAM_BENCH_ENTRIES", 10_000)?;
    let examples = env_usize("ENGRAM_BENCH_EXAMPLES", 1_000)?;
    let timed = env_usize("ENGRAM_BENCH_LOOKUPS", 200)?.max(1);
    let pairs = load_pairs()?;
    let profile = if cfg!(debug_assertions) {
        "dev profile, `cargo test -p engram-actors --bench shared_sets`"
    } else {
        "optimised, `cargo bench -p engram-actors --bench shared_sets`"
    };
    println!("# Shared sets: SQL cache accuracy and latency, few-shot search latency\n");
    println!(
        "Every figure below comes from one run of this program: built in the {profile}, with \
         ENGRAM_BENCH_ENTRIES={entries} ENGRAM_BENCH_EXAMPLES={examples} \
         ENGRAM_BENCH_LOOKUPS={timed}. Encoder: multilingual-e5-small in the node's pool (one \
         worker); the node in process on 2 tokio workers, SQLite storage. Load average at the \
         start: {}.\n",
        load()
    );

    parse_cost(timed.max(1_000))?;
    if std::env::var("ENGRAM_BENCH_PARSE_ONLY").is_ok_and(|v| v == "1") {
        return Ok(());
    }

    let started = Instant::now();
    let pool = support::pool().await;
    let dir = TempDir::new()?;
    // The cache holds every question of the bench, as a node's would hold the hot ones.
    let embedder = support::embedder(&pool).with_cache(entries + examples + 20_000);
    let node = support::node_with(&dir, embedder.clone(), Mode::Synchronous).await;
    println!(
        "Encoder pool and node started in {:.1} s.\n",
        started.elapsed().as_secs_f64()
    );
    let mut bench = Bench {
        node,
        embedder,
        rng: SmallRng::seed_from_u64(14),
        timed,
    };
    let started = Instant::now();
    bench.accuracy(&pairs).await?;
    println!(
        "## SQL cache lookup latency (through the directory, threshold 0.92, literal guard on)\n\n\
         Each case: {WARM_UP} untimed lookups, then {timed} timed one after another.\n"
    );
    println!("| set | case | lookups | hits | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    bench.pairs_latency(&pairs).await?;
    if entries > 0 {
        bench.large_set(entries).await?;
    }
    if examples > 0 {
        bench.few_shot(examples).await?;
    }
    let m = bench.embedder.metrics();
    println!(
        "\nEmbedding cache over the run: {} hits, {} misses. Load average at the end: {}. \
         Whole run after start-up: {:.0} s.",
        m.cache_hits.load(std::sync::atomic::Ordering::Relaxed),
        m.cache_misses.load(std::sync::atomic::Ordering::Relaxed),
        load(),
        started.elapsed().as_secs_f64()
    );
    bench.node.shutdown().await;
    Ok(())
}

/// Typical SQL texts of a gateway, by kind.
fn typical_sql() -> Vec<(&'static str, String)> {
    let wide = (0..40)
        .map(|i| format!("sum(CASE WHEN region = 'r{i}' THEN amount ELSE 0 END) AS r{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        (
            "one table",
            "SELECT count(*) FROM sales.orders WHERE day >= current_date - 7".into(),
        ),
        (
            "join, group, order",
            "SELECT c.region, sum(o.amount) AS revenue FROM sales.orders o JOIN customers c \
             ON o.customer_id = c.id WHERE o.day >= date '2026-01-01' GROUP BY c.region \
             ORDER BY revenue DESC LIMIT 10"
                .into(),
        ),
        (
            "CTE, sub-query, union",
            "WITH recent AS (SELECT * FROM sales.orders WHERE day > current_date - 30) \
             SELECT region, count(*) FROM recent WHERE customer_id IN (SELECT id FROM \
             customers WHERE vip) GROUP BY region UNION ALL SELECT 'all', count(*) FROM recent"
                .into(),
        ),
        (
            "wide (2 KB)",
            format!("SELECT {wide} FROM sales.orders GROUP BY day"),
        ),
        (
            "refused: two statements",
            "SELECT 1 FROM sales; DROP TABLE sales".into(),
        ),
    ]
}

/// Microseconds per [`read_query`] of each typical SQL text, `n` times each.
fn parse_cost(n: usize) -> Result<()> {
    use engram_actors::tenant::statement::read_query;
    println!(
        "## Reading a SQL text with the parser\n\n`read_query` (tokenise, reject comments, \
         parse with the generic dialect, walk the statement), {n} calls per text, one thread.\n"
    );
    println!("| SQL | bytes | tables | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|");
    for (kind, sql) in typical_sql() {
        let mut us = Vec::with_capacity(n);
        let mut tables = String::new();
        for _ in 0..n {
            let start = Instant::now();
            let read = std::hint::black_box(read_query(std::hint::black_box(&sql)));
            us.push(start.elapsed().as_secs_f64() * 1e6);
            tables = read.map_or_else(|why| format!("refused ({why:?})"), |t| t.len().to_string());
        }
        println!(
            "| {kind} | {} | {tables} | {:.1} | {:.1} |",
            sql.len(),
            percentile(&us, 0.5),
            percentile(&us, 0.99)
        );
    }
    println!();
    Ok(())
}

impl Bench {
    fn directory(&self) -> &Directory {
        &self.node.directory
    }

    /// Each pair in a domain of its own, looked up once at the least threshold in a tenant
    /// without the literal guard and once in a tenant with it.
    async fn accuracy(&mut self, pairs: &[Pair]) -> Result<()> {
        let (raw, guarded) = (UserKey::shared("acme-raw"), UserKey::shared("acme"));
        let directory = self.directory();
        configure(directory, &raw, 0.5, false).await?;
        configure(directory, &guarded, 0.5, true).await?;
        let started = Instant::now();
        let mut scored = Vec::with_capacity(pairs.len());
        for pair in pairs {
            let mut replies = Vec::with_capacity(2);
            for key in [&raw, &guarded] {
                let put = SqlPut {
                    request_id: format!("put-{}", pair.id),
                    question: pair.stored.clone(),
                    route: ROUTE.into(),
                    domain: pair.id.clone(),
                    sql: format!("SELECT '{}' AS pair FROM {}", pair.id, pair.domain),
                    vector: None,
                };
                directory.ask_admin(key, put).await?;
                let reply = directory
                    .ask_admin(key, lookup(&pair.asked, &pair.id))
                    .await?;
                ensure!(reply.fallback.is_none(), "{}: no vector", pair.id);
                ensure!(
                    (reply.threshold - 0.5).abs() < 1e-6,
                    "threshold {}",
                    reply.threshold
                );
                replies.push(reply.hit.map(|h| h.similarity));
            }
            let similarity = replies[0].unwrap_or(0.0);
            if let Some(s) = replies[1] {
                ensure!(
                    (s - similarity).abs() < 1e-4,
                    "{}: {s} with the guard, {similarity} without",
                    pair.id
                );
            }
            scored.push(Scored {
                pair,
                similarity,
                guard_passes: replies[1].is_some(),
            });
        }
        print_accuracy(pairs, &scored, started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Lookups among the pairs' entries (one per domain), at the default threshold.
    async fn pairs_latency(&mut self, pairs: &[Pair]) -> Result<()> {
        let key = UserKey::shared("acme");
        configure(self.directory(), &key, 0.92, true).await?;
        let n = WARM_UP + self.timed;
        let rng = &mut self.rng;
        let mut pick = |f: fn(&Pair) -> &String| -> Vec<(String, String)> {
            (0..n)
                .map(|_| {
                    let p = &pairs[rng.random_range(0..pairs.len())];
                    (f(p).clone(), p.id.clone())
                })
                .collect()
        };
        // The stored question as stored; the asked one, embedded by the accuracy run.
        let exact = pick(|p| &p.stored);
        let repeated = pick(|p| &p.asked);
        let stored: Vec<(String, String)> = pairs
            .iter()
            .map(|p| (p.stored.clone(), p.id.clone()))
            .collect();
        let fresh = fresh_questions(n, "p", &stored, &mut self.rng);
        let set = format!("{} entries, 1 per domain", pairs.len());
        self.time_cases(&key, &set, [exact, repeated, fresh]).await
    }

    /// `entries` synthetic entries in one domain of a tenant of their own.
    async fn large_set(&mut self, entries: usize) -> Result<()> {
        let key = UserKey::shared("scale");
        configure(self.directory(), &key, 0.92, true).await?;
        let questions = synthetic_questions(entries, "", 7);
        let started = Instant::now();
        for chunk in questions.chunks(CHUNK) {
            self.embedder.questions("scale", chunk).await?;
        }
        let embed_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        for (i, q) in questions.iter().enumerate() {
            let put = SqlPut {
                request_id: format!("scale-{i}"),
                question: q.clone(),
                route: ROUTE.into(),
                domain: "metrics".into(),
                sql: format!("SELECT {i} AS entry FROM facts"),
                vector: None,
            };
            self.directory().ask_admin(&key, put).await?;
        }
        let put_s = started.elapsed().as_secs_f64();
        let n = WARM_UP + self.timed;
        let stored: Vec<(String, String)> = questions
            .iter()
            .map(|q| (q.clone(), "metrics".to_owned()))
            .collect();
        let exact: Vec<_> = (0..n)
            .map(|_| stored[self.rng.random_range(0..stored.len())].clone())
            .collect();
        // Reworded stored questions, asked once untimed (the encoder fills the cache).
        let repeated: Vec<_> = (0..n)
            .map(|i| reworded(&stored, "r", i, &mut self.rng))
            .collect();
        for (q, d) in &repeated {
            self.directory().ask_admin(&key, lookup(q, d)).await?;
        }
        let fresh = fresh_questions(n, "s", &stored, &mut self.rng);
        let set = format!("{} entries in 1 domain", questions.len());
        self.time_cases(&key, &set, [exact, repeated, fresh])
            .await?;
        println!(
            "\nFilling the large set: {} questions embedded in batches ({CHUNK} per call) in \
             {embed_s:.1} s ({:.0}/s); then {} puts, their embeddings cached, in {put_s:.1} s \
             ({:.0}/s, one fenced SQLite transaction each).\n",
            questions.len(),
            questions.len() as f64 / embed_s,
            questions.len(),
            questions.len() as f64 / put_s
        );
        Ok(())
    }

    /// The encoder alone on `n` texts no one asked before, one call each (no actor): what a
    /// new question's lookup spends embedding it.
    async fn encoder_alone(&mut self, tag: &str) -> Result<Vec<f64>> {
        let texts = new_questions(WARM_UP + self.timed, tag, &mut self.rng);
        let mut ms = Vec::with_capacity(self.timed);
        for (i, text) in texts.into_iter().enumerate() {
            let started = Instant::now();
            self.embedder.questions("encoder", &[text]).await?;
            if i >= WARM_UP {
                ms.push(started.elapsed().as_secs_f64() * 1e3);
            }
        }
        Ok(ms)
    }

    /// Times the three cases of lookups, each `(question, domain)` list warm-up first.
    async fn time_cases(
        &mut self,
        key: &UserKey,
        set: &str,
        cases: [Vec<(String, String)>; 3],
    ) -> Result<()> {
        let names = [
            "exact normalised match",
            "repeated question (embedding cached)",
            "new question (encoder runs)",
        ];
        for (case, qs) in names.into_iter().zip(cases) {
            let (warm_up, timed) = qs.split_at(WARM_UP.min(qs.len()));
            let (ms, hits) = time_lookups(self.directory(), key, warm_up, timed).await?;
            latency_row(set, case, &ms, Some(hits));
        }
        let ms = self.encoder_alone(&set[..1]).await?;
        latency_row(set, "reference: the encoder alone on a new text", &ms, None);
        Ok(())
    }

    /// `examples` approved examples imported, then searches with limit 3.
    async fn few_shot(&mut self, examples: usize) -> Result<()> {
        let key = UserKey::shared("fewshot");
        let questions = synthetic_questions(examples, "show me ", 11);
        let started = Instant::now();
        let mut imported = 0;
        for (c, chunk) in questions.chunks(CHUNK).enumerate() {
            let import = ExampleImport {
                request_id: format!("import-{c}"),
                examples: chunk
                    .iter()
                    .enumerate()
                    .map(|(i, q)| PortableExample {
                        question: q.clone(),
                        sql: format!("SELECT {} AS example FROM facts", c * CHUNK + i),
                        route: ROUTE.into(),
                        confidence: 0.95,
                        status: ExampleStatus::Approved,
                        successes: 1,
                        fail_count: 0,
                    })
                    .collect(),
            };
            imported += self.directory().ask_admin(&key, import).await?.created;
        }
        let import_s = started.elapsed().as_secs_f64();
        let n = WARM_UP + self.timed;
        let stored: Vec<(String, String)> = questions
            .iter()
            .map(|q| (q.clone(), String::new()))
            .collect();
        // An example's own question (its vector cached by the import), and new questions.
        let repeated: Vec<String> = (0..n)
            .map(|_| questions[self.rng.random_range(0..questions.len())].clone())
            .collect();
        let fresh: Vec<String> = fresh_questions(n, "f", &stored, &mut self.rng)
            .into_iter()
            .map(|(q, _)| q)
            .collect();
        println!(
            "## Few-shot search latency (through the directory, limit 3)\n\n\
             {imported} approved examples imported in chunks of {CHUNK} in {import_s:.1} s \
             (embedding included). Each case: {WARM_UP} untimed searches, then {} timed. A \
             hit needs similarity 0.95.\n",
            self.timed
        );
        println!("| case | searches | with hits | p50 ms | p99 ms |");
        println!("|---|---|---|---|---|");
        for (case, qs) in [
            ("repeated question (embedding cached)", repeated),
            ("new question (encoder runs)", fresh),
        ] {
            let search = |q: &str| ExampleSearch {
                question: q.into(),
                route: ROUTE.into(),
                limit: 3,
                vector: None,
            };
            for q in qs.iter().take(WARM_UP) {
                self.directory().ask_admin(&key, search(q)).await?;
            }
            let mut ms = Vec::with_capacity(self.timed);
            let mut found = 0;
            for q in qs.iter().skip(WARM_UP) {
                let started = Instant::now();
                let reply = self.directory().ask_admin(&key, search(q)).await?;
                ms.push(started.elapsed().as_secs_f64() * 1e3);
                if reply.fallback.is_some() {
                    bail!("a search went without its vector");
                }
                found += usize::from(!reply.hits.is_empty());
            }
            println!(
                "| {case} | {} | {found} | {:.2} | {:.2} |",
                ms.len(),
                percentile(&ms, 0.5),
                percentile(&ms, 0.99)
            );
        }
        let ms = self.encoder_alone("e").await?;
        println!(
            "| reference: the encoder alone on a new text | {} | - | {:.2} | {:.2} |",
            ms.len(),
            percentile(&ms, 0.5),
            percentile(&ms, 0.99)
        );
        Ok(())
    }
}
