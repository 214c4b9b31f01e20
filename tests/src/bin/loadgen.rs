//! `loadgen`: drives a running node over HTTP with a mix of turn appends and context reads
//! from many users, and prints throughput and p50/p99 latency per operation as a markdown
//! table.
//!
//! ```text
//! cargo run --release -p engram-tests --bin loadgen -- --spawn                 # one-command benchmark
//! loadgen --url http://127.0.0.1:8080 --users 10000 --zipf 1.1 --read-ratio 0.2 --seconds 60
//! loadgen --spawn --users 1 --records-per-user 1000 --read-ratio 1 --concurrency 1
//! loadgen --spawn --inference false --set security.audit-reads=durable --read-ratio 0.9
//! loadgen --spawn --read-ratio 0 --rate 30 --concurrency 8                      # pipeline lag
//! ```
//!
//! Each of `--concurrency` workers sends one request at a time (a closed loop) until
//! `--seconds` have passed: a context read with probability `--read-ratio`, else a turn with
//! a request id unique to this run, for a user drawn uniformly or by `--zipf <s>`. With
//! `--records-per-user N` every user first gets N active memory records (timed separately),
//! for measuring context reads over many records. `--spawn` starts a node of the same build
//! profile through the test harness on a temporary SQLite store (`--synchronous`, default
//! `full`) and stops it afterwards. `--rate` paces the requests (an open-loop rate, as long as
//! the node keeps up). With a pipeline, the run samples the oldest pending embedding's age
//! every 250 ms, reports it, and waits for the pipeline to drain. Every context read asks a
//! question never asked before in the run (`engram_tests::load::questions`: varied shapes and
//! lengths, built from `--seed`), so the node's query cache answers none;
//! `--repeated-queries` asks from a small set of 30 short queries instead. The summary says
//! how many reads were ranked with their query's vector and why the others were not (the
//! replies' `fallback`). The load generator shares the machine with the node it measures: on
//! a small machine its own CPU use is part of the figures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use engram_tests::harness::{HttpClient, Node, Sandbox};
use engram_tests::load::questions::Questions;
use engram_tests::load::{
    Distribution, Op, Stats, UserPicker, append_body, context_body, memory_body, user_id,
};
use hyper::StatusCode;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde_json::Value;

/// Load generator for an Engram node's HTTP gateway.
#[derive(Debug, Parser)]
#[command(name = "loadgen", about)]
struct Args {
    /// Base URL of a running node.
    #[arg(long, required_unless_present = "spawn", conflicts_with = "spawn")]
    url: Option<String>,
    /// The gateway API key to send to `--url` (a spawned node gets one made for it).
    #[arg(long, env = "ENGRAM_API_KEY")]
    api_key: Option<String>,
    /// Start a node on a temporary SQLite store instead (stopped at the end).
    #[arg(long)]
    spawn: bool,
    /// `storage.sqlite.synchronous` of the spawned node: full, normal or off.
    #[arg(long, default_value = "full", requires = "spawn")]
    synchronous: String,
    /// `inference.enabled` of the spawned node: whether it embeds turns, memories and queries.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, requires = "spawn")]
    inference: bool,
    /// Seal the spawned node's user values at rest (a fresh master key file).
    #[arg(long, requires = "spawn")]
    sealed: bool,
    /// `security.audit` of the spawned node: whether every request is recorded in the audit
    /// trail (off only to measure its cost).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, requires = "spawn")]
    audit: bool,
    /// Any other setting of the spawned node, as `section.key=value` (repeatable); the
    /// value is read as JSON when it parses (numbers, booleans), else as a string.
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "spawn")]
    settings: Vec<String>,
    /// Users in the population.
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    /// Zipf exponent of user popularity; uniform when absent.
    #[arg(long)]
    zipf: Option<f64>,
    /// Length of the measured run.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Requests in flight (one closed-loop worker each).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Share of context reads (the rest are turn appends), 0 to 1.
    #[arg(long, default_value_t = 0.5)]
    read_ratio: f64,
    /// Active memory records written to every user before the run.
    #[arg(long, default_value_t = 0)]
    records_per_user: usize,
    /// Seed of the workers' random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests per second in all, paced evenly over the workers (absent: as fast as the
    /// node answers).
    #[arg(long)]
    rate: Option<f64>,
    /// Ask the small set of repeated context queries (30 texts, answered by the node's query
    /// cache once asked) instead of a question never asked before on every read.
    #[arg(long)]
    repeated_queries: bool,
    /// How long to wait after the run for the node's pipeline to drain, in seconds.
    #[arg(long, default_value_t = 60)]
    drain_wait: u64,
    /// Before the run, wait until the node's generative model is loaded (with
    /// `--set distillation.model=true`: a node serves while its decoder loads, and the load
    /// takes the CPU for seconds to a minute), at most this many seconds.
    #[arg(long, value_name = "SECONDS")]
    await_model: Option<u64>,
}

/// What context reads said of their query's embedding.
#[derive(Debug, Default, Clone)]
struct Ranked {
    /// Reads whose query was embedded and used.
    embedded: u64,
    /// Reads ranked without it, by the reason the reply's `fallback` gave.
    fallbacks: BTreeMap<String, u64>,
    /// Reads that said neither: nothing to rank (a user with no memories yet), or a node
    /// that does not embed.
    unsaid: u64,
}

impl Ranked {
    fn merge(&mut self, other: Ranked) {
        self.embedded += other.embedded;
        self.unsaid += other.unsaid;
        for (why, n) in other.fallbacks {
            *self.fallbacks.entry(why).or_default() += n;
        }
    }

    fn note(&mut self, reply: &Value) {
        match reply["fallback"].as_str() {
            Some(why) => *self.fallbacks.entry(why.to_owned()).or_default() += 1,
            None if reply["query_embedded"] == true => self.embedded += 1,
            None => self.unsaid += 1,
        }
    }

    /// `context reads ranked with their query's vector: 97.0% (970 of the 1000 with memories
    /// to rank); without it: deadline 2.5%, overloaded 0.5%; 40 reads had nothing to rank`.
    fn report(&self) -> Option<String> {
        let ranked = self.embedded + self.fallbacks.values().sum::<u64>();
        if ranked + self.unsaid == 0 {
            return None;
        }
        let share = |n: u64| 100.0 * n as f64 / ranked.max(1) as f64;
        let mut line = format!(
            "context reads ranked with their query's vector: {:.1}% ({} of the {ranked} with \
             memories to rank)",
            share(self.embedded),
            self.embedded
        );
        if !self.fallbacks.is_empty() {
            let reasons: Vec<String> = self
                .fallbacks
                .iter()
                .map(|(why, n)| format!("{why} {:.1}%", share(*n)))
                .collect();
            line.push_str(&format!("; without it: {}", reasons.join(", ")));
        }
        if self.unsaid > 0 {
            line.push_str(&format!(
                "; {} reads had nothing to rank (a user with no memories yet, or a node that \
                 does not embed)",
                self.unsaid
            ));
        }
        Some(line)
    }
}

/// The value of the unlabelled metric `name` in a `/metrics` text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
}

/// Waits until the node's metrics say its generative model is loaded, at most `limit`; fails
/// at the first failed load (the node retries it later; its log says why).
async fn await_model(http: &HttpClient, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let reply = http.get("/metrics").await.context("reading /metrics")?;
        let text = reply.text();
        let value = |name: &str| metric(&text, name);
        let failures = value("engram_generation_model_load_failures_total").unwrap_or(0.0);
        match value("engram_generation_model_loaded") {
            Some(v) if v >= 1.0 => return Ok(()),
            None => bail!("the node reports no generative model (--set distillation.model=true)"),
            Some(_) if failures > 0.0 => {
                bail!("the generative model failed to load (the node's log says why)")
            }
            Some(_) if Instant::now() >= deadline => {
                bail!(
                    "the generative model did not load within {} s",
                    limit.as_secs()
                )
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The pipeline as the spawned node reported it during the run.
#[derive(Debug, Default)]
struct Backlog {
    samples: Vec<(f64, f64)>,
}

impl Backlog {
    /// Samples (users with pending entries, oldest age in seconds) from the node's metrics
    /// (cheap, unlike counting the entries) every 250 ms until `deadline`.
    async fn watch(http: HttpClient, deadline: Instant) -> Backlog {
        let mut backlog = Backlog::default();
        while Instant::now() < deadline {
            if let Ok(reply) = http.get("/metrics").await {
                let text = reply.text();
                let value = |name: &str| metric(&text, name);
                if let (Some(users), Some(age)) = (
                    value("engram_pipeline_pending_users"),
                    value("engram_pipeline_oldest_pending_seconds"),
                ) {
                    backlog.samples.push((users, age));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        backlog
    }

    fn report(&self) -> String {
        let mut ages: Vec<f64> = self.samples.iter().map(|s| s.1).collect();
        ages.sort_by(f64::total_cmp);
        let max_users = self.samples.iter().map(|s| s.0).fold(0.0, f64::max);
        let pick = |q: f64| {
            ages.get(((ages.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        format!(
            "pipeline during the run ({} samples): oldest pending entry p50 {:.2} s, max {:.2} s; \
             users with pending entries at most {max_users:.0}",
            ages.len(),
            pick(0.5),
            pick(1.0)
        )
    }
}

/// (pending entries, age of the oldest in seconds) of the node's pipeline, when it has one.
async fn pipeline(http: &HttpClient) -> Option<(f64, f64)> {
    let reply = http.get("/v1/cluster/pipeline").await.ok()?;
    if reply.status != StatusCode::OK {
        return None;
    }
    let v = reply.json();
    if v["enabled"] != true {
        return None;
    }
    Some((
        v["pending_entries"].as_f64()?,
        v["oldest_pending_age_ms"].as_f64()? / 1000.0,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !(0.0..=1.0).contains(&args.read_ratio) {
        bail!("--read-ratio {} is not between 0 and 1", args.read_ratio);
    }
    if args.users == 0 || args.concurrency == 0 {
        bail!("--users and --concurrency must be at least 1");
    }
    let distribution = match args.zipf {
        Some(s) if !(s.is_finite() && s >= 0.0) => bail!("--zipf {s} must be a finite number >= 0"),
        Some(s) => Distribution::Zipf(s),
        None => Distribution::Uniform,
    };
    let mut node = match &args.url {
        Some(_) => None,
        None => Some(spawn(&args).await?),
    };
    let url = match (&node, &args.url) {
        (Some(node), _) => node.url(),
        (None, Some(url)) => url.clone(),
        (None, None) => unreachable!("clap requires --url or --spawn"),
    };
    let http = match (&node, &args.api_key) {
        (Some(node), _) => node.client(),
        (None, Some(key)) => HttpClient::new(&url).with_key(key),
        (None, None) => bail!("--url needs --api-key (or ENGRAM_API_KEY): a gateway key"),
    };
    let ready = http
        .get("/ready")
        .await
        .with_context(|| format!("{url} does not answer"))?;
    if ready.status != StatusCode::OK {
        bail!("{url}/ready answered {}", ready.status);
    }
    if let Some(limit) = args.await_model {
        let waited = Instant::now();
        await_model(&http, Duration::from_secs(limit)).await?;
        eprintln!(
            "the generative model was loaded after {:.1} s",
            waited.elapsed().as_secs_f64()
        );
    }
    // Request ids unique to this run, so a rerun against the same node writes, not replays.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());

    println!("## loadgen against {url}\n");
    println!(
        "users {}, {}, concurrency {}, read ratio {}, {} s, records per user {}, queries {}, node {}\n",
        args.users,
        match distribution {
            Distribution::Uniform => "uniform".to_owned(),
            Distribution::Zipf(s) => format!("zipf s={s}"),
        },
        args.concurrency,
        args.read_ratio,
        args.seconds,
        args.records_per_user,
        if args.repeated_queries {
            "repeated (30 texts)"
        } else {
            "fresh (each read a question never asked before)"
        },
        match &node {
            Some(_) => format!(
                "spawned ({} build, synchronous {}, inference {}, sealed {}, audit {}{}{})",
                profile(),
                args.synchronous,
                if args.inference { "on" } else { "off" },
                if args.sealed { "yes" } else { "no" },
                if args.audit { "on" } else { "off" },
                if args.settings.is_empty() { "" } else { ", " },
                args.settings.join(", ")
            ),
            None => "external".to_owned(),
        },
    );
    if args.records_per_user > 0 {
        let (stats, took) = seed(&http, &args, run).await;
        println!(
            "seeding {} records in {:.1} s:\n\n{}",
            stats.count(Op::Seed),
            took.as_secs_f64(),
            stats.table(took)
        );
    }
    let picker = Arc::new(UserPicker::new(args.users, &distribution));
    let node_pid = node.as_ref().and_then(Node::pid);
    let cpu_before = (
        node_pid.and_then(cpu_seconds),
        cpu_seconds(std::process::id()),
    );
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let watcher = tokio::spawn(Backlog::watch(http.clone(), deadline));
    // Each worker's share of the rate: one request every `interval`.
    let interval = args
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(args.concurrency as f64 / r));
    // Fresh questions are numbered across the workers: no two reads of the run ask the same.
    let questions = Questions::new(args.seed);
    let asked = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let (http, picker) = (http.clone(), picker.clone());
        let (read_ratio, seed, repeated) = (
            args.read_ratio,
            args.seed.wrapping_mul(1_000_003).wrapping_add(w as u64),
            args.repeated_queries,
        );
        let asked = asked.clone();
        workers.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut stats = Stats::default();
            let mut ranked = Ranked::default();
            let mut n = 0u64;
            let mut next = Instant::now();
            while Instant::now() < deadline {
                if let Some(interval) = interval {
                    tokio::time::sleep_until(next.into()).await;
                    next += interval;
                }
                n += 1;
                let user = user_id(picker.pick(&mut rng));
                if rand::Rng::random::<f64>(&mut rng) < read_ratio {
                    let mut body = context_body(&mut rng);
                    if !repeated {
                        body["query"] = questions.get(asked.fetch_add(1, Ordering::Relaxed)).into();
                    }
                    let path = format!("/v1/users/{user}/context");
                    if let Some(reply) = timed(&http, &mut stats, Op::Context, &path, &body).await {
                        ranked.note(&reply);
                    }
                } else {
                    let body = append_body(&format!("lg-{run}-{w}-{n}"), &mut rng);
                    let path = format!("/v1/users/{user}/turns");
                    timed(&http, &mut stats, Op::Append, &path, &body).await;
                }
            }
            (stats, ranked)
        }));
    }
    let mut stats = Stats::default();
    let mut ranked = Ranked::default();
    for worker in workers {
        let (s, r) = worker.await?;
        stats.merge(&s);
        ranked.merge(r);
    }
    let elapsed = started.elapsed();
    let cpu_after = (
        node_pid.and_then(cpu_seconds),
        cpu_seconds(std::process::id()),
    );
    println!(
        "mixed run, {:.1} s:\n\n{}",
        elapsed.as_secs_f64(),
        stats.table(elapsed)
    );
    let requests = stats.count(Op::Append) + stats.count(Op::Context);
    if requests > 0 {
        let per_request = |before: Option<f64>, after: Option<f64>| match (before, after) {
            (Some(b), Some(a)) => format!("{:.0} µs", 1e6 * (a - b) / requests as f64),
            _ => "n/a".to_owned(),
        };
        // CPU time per request is steadier than requests/s on a shared machine: it does not
        // count the time another process held the cores.
        println!(
            "CPU time per request (user + system): node {}, load generator {}\n",
            per_request(cpu_before.0, cpu_after.0),
            per_request(cpu_before.1, cpu_after.1)
        );
    }
    if let Some(line) = ranked.report() {
        println!("{line}\n");
    }
    let backlog = watcher.await?;
    if !backlog.samples.is_empty() {
        println!("{}\n", backlog.report());
        let waited = Instant::now();
        let mut left = 0.0;
        // Counting the entries reads them all: once a second.
        while let Some((pending, _)) = pipeline(&http).await {
            left = pending;
            if pending == 0.0 || waited.elapsed() >= Duration::from_secs(args.drain_wait) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if left == 0.0 {
            println!(
                "pipeline drained {:.1} s after the run\n",
                waited.elapsed().as_secs_f64()
            );
        } else {
            println!(
                "pipeline: {left:.0} embeddings still pending {:.0} s after the run (storage holds them)\n",
                waited.elapsed().as_secs_f64()
            );
        }
    }
    if let Some(node) = &mut node {
        let status = node.terminate().await;
        if !status.success() {
            bail!("the spawned node exited with {status}");
        }
    }
    Ok(())
}

/// The CPU time (user + system) a process has used so far, from `/proc/<pid>/stat`; `None`
/// where that cannot be read.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields of the line (the 12th and 13th here).
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // Ticks of USER_HZ, which is 100 on every Linux architecture this builds for.
    Some(ticks / 100.0)
}

/// Sends one request and records its latency, or counts it as an error; returns the body of
/// a successful reply.
async fn timed(
    http: &HttpClient,
    stats: &mut Stats,
    op: Op,
    path: &str,
    body: &Value,
) -> Option<Value> {
    let start = Instant::now();
    match http.post(path, body).await {
        Ok(reply) if reply.status == StatusCode::OK => {
            stats.record(op, start.elapsed());
            Some(reply.json())
        }
        Ok(_) | Err(_) => {
            stats.error(op);
            None
        }
    }
}

/// Writes `records_per_user` memory records to every user, `concurrency` at a time.
async fn seed(http: &HttpClient, args: &Args, run: u128) -> (Stats, Duration) {
    let total = args.users * args.records_per_user;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..args.concurrency {
        let (http, next, users) = (http.clone(), next.clone(), args.users);
        workers.push(tokio::spawn(async move {
            let mut stats = Stats::default();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= total {
                    return stats;
                }
                // Users round-robin, so the workers spread over users' actors.
                let (user, i) = (k % users, k / users);
                let body = memory_body(&format!("seed-{run}-{user}-{i}"), i);
                let _ = timed(
                    &http,
                    &mut stats,
                    Op::Seed,
                    &format!("/v1/users/{}/memories", user_id(user)),
                    &body,
                )
                .await;
            }
        }));
    }
    let mut stats = Stats::default();
    for worker in workers {
        if let Ok(s) = worker.await {
            stats.merge(&s);
        }
    }
    (stats, started.elapsed())
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Starts a node of this build's profile (or `ENGRAM_NODE_BIN`) on a temporary store.
async fn spawn(args: &Args) -> anyhow::Result<Node> {
    let sandbox = Sandbox::new();
    let mut spec = sandbox.node("loadgen");
    if args.sealed {
        let keys = sandbox.path().join("master.keys");
        engram_tests::harness::write_secret(&keys, &format!("1 {}\n", "5a".repeat(32)));
        spec = spec.set(
            "security.master-key-file",
            keys.to_string_lossy().into_owned(),
        );
    }
    let mut spec = spec
        .set("storage.sqlite.synchronous", args.synchronous.as_str())
        .set("security.rate-limit", 0)
        .set("security.audit", args.audit)
        .set("inference.enabled", args.inference)
        .set("log.level", "warn,engram_node=info");
    for setting in &args.settings {
        let Some((key, value)) = setting.split_once('=') else {
            bail!("--set {setting:?}: expected section.key=value");
        };
        if !key.contains('.') {
            bail!("--set {setting:?}: expected section.key=value");
        }
        let value = serde_json::from_str::<Value>(value)
            .ok()
            .filter(|v| !matches!(v, Value::Object(_) | Value::Null))
            .unwrap_or_else(|| Value::String(value.to_owned()));
        spec = spec.set(key, value);
    }
    eprintln!(
        "starting engram-node ({}) in {}",
        profile(),
        spec.data_dir().display()
    );
    Ok(spec.start().await)
}
