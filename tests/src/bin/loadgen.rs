//! `loadgen`: drives a running node over HTTP with a mix of turn appends and context reads
//! from many users, and prints throughput and p50/p99 latency per operation as a markdown
//! table.
//!
//! ```text
//! cargo run --release -p engram-tests --bin loadgen -- --spawn                 # one-command benchmark
//! loadgen --url http://127.0.0.1:8080 --users 10000 --zipf 1.1 --read-ratio 0.2 --seconds 60
//! loadgen --spawn --users 1 --records-per-user 1000 --read-ratio 1 --concurrency 1
//! loadgen --spawn --inference false --set security.audit-reads=durable --read-ratio 0.9
//! ```
//!
//! Each of `--concurrency` workers sends one request at a time (a closed loop) until
//! `--seconds` have passed: a context read with probability `--read-ratio`, else a turn with
//! a request id unique to this run, for a user drawn uniformly or by `--zipf <s>`. With
//! `--records-per-user N` every user first gets N active memory records (timed separately),
//! for measuring context reads over many records. `--spawn` starts a node of the same build
//! profile through the test harness on a temporary SQLite store (`--synchronous`, default
//! `full`) and stops it afterwards. The load generator shares the machine with the node it
//! measures: on a small machine its own CPU use is part of the figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Parser;
use engram_tests::harness::{HttpClient, Node, Sandbox};
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
    // Request ids unique to this run, so a rerun against the same node writes, not replays.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());

    println!("## loadgen against {url}\n");
    println!(
        "users {}, {}, concurrency {}, read ratio {}, {} s, records per user {}, node {}\n",
        args.users,
        match distribution {
            Distribution::Uniform => "uniform".to_owned(),
            Distribution::Zipf(s) => format!("zipf s={s}"),
        },
        args.concurrency,
        args.read_ratio,
        args.seconds,
        args.records_per_user,
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
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let (http, picker) = (http.clone(), picker.clone());
        let (read_ratio, seed) = (
            args.read_ratio,
            args.seed.wrapping_mul(1_000_003).wrapping_add(w as u64),
        );
        workers.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut stats = Stats::default();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let user = user_id(picker.pick(&mut rng));
                let (op, path, body) = if rand::Rng::random::<f64>(&mut rng) < read_ratio {
                    (
                        Op::Context,
                        format!("/v1/users/{user}/context"),
                        context_body(&mut rng),
                    )
                } else {
                    n += 1;
                    (
                        Op::Append,
                        format!("/v1/users/{user}/turns"),
                        append_body(&format!("lg-{run}-{w}-{n}"), &mut rng),
                    )
                };
                timed(&http, &mut stats, op, &path, &body).await;
            }
            stats
        }));
    }
    let mut stats = Stats::default();
    for worker in workers {
        stats.merge(&worker.await?);
    }
    let elapsed = started.elapsed();
    println!(
        "mixed run, {:.1} s:\n\n{}",
        elapsed.as_secs_f64(),
        stats.table(elapsed)
    );
    if let Some(node) = &mut node {
        let status = node.terminate().await;
        if !status.success() {
            bail!("the spawned node exited with {status}");
        }
    }
    Ok(())
}

/// Sends one request and records its latency, or counts it as an error.
async fn timed(http: &HttpClient, stats: &mut Stats, op: Op, path: &str, body: &Value) {
    let start = Instant::now();
    match http.post(path, body).await {
        Ok(reply) if reply.status == StatusCode::OK => stats.record(op, start.elapsed()),
        Ok(_) | Err(_) => stats.error(op),
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
                timed(
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
        std::fs::write(&keys, format!("1 {}\n", "5a".repeat(32))).expect("key file");
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
