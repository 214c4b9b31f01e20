//! `prewarm`: pre-warm at login on a real node process. Seeds `--users` users with
//! `--records` memory records and a few intents each, restarts the node (every user cold),
//! then times `POST /v1/users/{user}/prewarm` once per user (cold: the actor starts and loads
//! the user's index) and `--warm-rounds` more times per user (warm), and prints p50/p99 of
//! each as a markdown table.
//!
//! ```text
//! cargo run --release -p engram-tests --bin prewarm
//! cargo run --release -p engram-tests --bin prewarm -- --users 40 --records 1000 --embed
//! ```
//!
//! `--embed` runs the node with its encoder, so cold loads read 1,000 vectors too (seeding
//! then waits for the pipeline).

use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use engram_tests::harness::{HttpClient, Sandbox};
use engram_tests::load::{memory_body, user_id};
use hyper::StatusCode;
use serde_json::json;

/// Pre-warm latency of cold and warm users.
#[derive(Debug, Parser)]
#[command(name = "prewarm", about)]
struct Args {
    /// Users (each measured cold once).
    #[arg(long, default_value_t = 30)]
    users: usize,
    /// Memory records per user.
    #[arg(long, default_value_t = 1000)]
    records: usize,
    /// Warm calls per user after the cold one.
    #[arg(long, default_value_t = 20)]
    warm_rounds: usize,
    /// Run the node with its encoder (records get vectors; cold loads read them).
    #[arg(long)]
    embed: bool,
    /// Requests in flight while seeding.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

fn percentile(mut xs: Vec<f64>, p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() as f64 - 1.0) * p).round() as usize]
}

async fn timed_prewarm(http: &HttpClient, user: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    let reply = http
        .post(&format!("/v1/users/{}/prewarm", user_id(user)), &json!({}))
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    if reply.status != StatusCode::OK {
        bail!("prewarm answered {}: {}", reply.status, reply.text());
    }
    if reply.json()["intents"].as_array().map_or(0, Vec::len) != 3 {
        bail!("prewarm did not answer three intents: {}", reply.text());
    }
    Ok(ms)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.users == 0 || args.records == 0 {
        bail!("--users and --records must be at least 1");
    }
    let sandbox = Sandbox::new();
    let mut node = sandbox
        .node("prewarm")
        .set("inference.enabled", args.embed)
        .set("inference.background-priority", "normal")
        // Seeding writes 20,000 records as fast as the node takes them: past a key's rate.
        .set("security.rate-limit", 0)
        .start()
        .await;
    let http = node.client();
    let started = Instant::now();
    let total = args.users * args.records;
    let mut next = 0;
    while next < total {
        let batch: Vec<_> = (next..(next + args.concurrency).min(total))
            .map(|k| {
                let (http, user, i) = (http.clone(), k % args.users, k / args.users);
                tokio::spawn(async move {
                    let body = memory_body(&format!("seed-{user}-{i}"), i);
                    http.must_post(&format!("/v1/users/{}/memories", user_id(user)), &body)
                        .await
                })
            })
            .collect();
        for call in batch {
            call.await.context("seeding")?;
        }
        next += args.concurrency;
    }
    for user in 0..args.users {
        for (n, message) in [
            "帮我预约明天上午的体检",
            "我要投诉，快递一周了还没到",
            "帮我把视频会员续费一年",
        ]
        .iter()
        .enumerate()
        {
            let body = json!({"user_id": user_id(user), "request_id": format!("i-{user}-{n}"), "message": message});
            http.must_post("/write", &body).await;
        }
    }
    if args.embed {
        http.must_drain_pipeline().await;
    }
    let seeded = started.elapsed();
    node.terminate().await;
    node.restart().await;
    let http = node.client();
    let mut cold = Vec::with_capacity(args.users);
    for user in 0..args.users {
        cold.push(timed_prewarm(&http, user).await?);
    }
    let mut warm = Vec::with_capacity(args.users * args.warm_rounds);
    for _ in 0..args.warm_rounds {
        for user in 0..args.users {
            warm.push(timed_prewarm(&http, user).await?);
        }
    }
    println!(
        "## prewarm on a {} build\n",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!(
        "{} users, {} records each (seeded in {:.1} s), encoder {}\n",
        args.users,
        args.records,
        seeded.as_secs_f64(),
        if args.embed { "on" } else { "off" }
    );
    println!("| user | calls | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    for (name, xs) in [("cold (actor starts, index loads)", cold), ("warm", warm)] {
        println!(
            "| {name} | {} | {:.1} | {:.1} |",
            xs.len(),
            percentile(xs.clone(), 0.5),
            percentile(xs, 0.99)
        );
    }
    Ok(())
}
