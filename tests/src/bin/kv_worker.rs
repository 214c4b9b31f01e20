//! A helper process for the storage suites: it opens the SQLite store at a path shared with
//! the test process and works on it, so tests can prove the semantics hold across processes
//! and across a SIGKILL.
//!
//! ```text
//! kv_worker conformance <path> <prefix>   run the conformance suite under <prefix>
//! kv_worker increment <path> <n> <tag>    n read-increment-write transactions on one counter
//! kv_worker hold <path> <millis>          hold the write lock for <millis>, then commit
//! kv_worker append <path> <n>             print "durable <bool>" (the store's commits survive a
//!                                         power loss), then commit keys acked/0..n, printing
//!                                         each index once acknowledged
//! kv_worker append-concurrent <path> <tasks> <n>
//!                                         <tasks> tokio tasks each commit keys acked-c/<task>/0..n
//!                                         through `Store::run` (group commit), printing
//!                                         "<task> <index>" once acknowledged and
//!                                         "stats <commits> <batches>" every 100 acknowledgements
//! kv_worker increment-concurrent <path> <tasks> <n> <tag>
//!                                         <tasks> tokio tasks each do n read-increment-write
//!                                         transactions on one counter through `Store::run`
//! ```

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use engram_storage::kv::decode_counter;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Store, TxnMode};
use engram_tests::storage_suite::CHECKS;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| {
        args.get(i)
            .with_context(|| format!("missing argument {i}: {args:?}"))
    };
    let store = Store::sqlite(Path::new(arg(1)?), SqliteOptions::default())?;
    let mut out = std::io::stdout().lock();
    match arg(0)?.as_str() {
        "conformance" => {
            for (name, check) in CHECKS {
                check(&store, arg(2)?.as_bytes());
                writeln!(out, "ok {name}")?;
            }
        }
        "increment" => {
            let n: u32 = arg(2)?.parse()?;
            let tag = arg(3)?;
            for i in 0..n {
                store.run_blocking(|txn| {
                    let seen = txn
                        .get(b"shared/counter")?
                        .map_or(0, |v| decode_counter(&v));
                    txn.set(b"shared/counter", &(seen + 1).to_le_bytes())?;
                    txn.set(format!("shared/{tag}/{i:06}").as_bytes(), b"1")
                })?;
            }
            writeln!(out, "done")?;
        }
        "hold" => {
            let millis: u64 = arg(2)?.parse()?;
            let mut txn = store.begin(TxnMode::Write)?;
            txn.set(b"held", b"1")?;
            writeln!(out, "locked")?;
            out.flush()?;
            std::thread::sleep(Duration::from_millis(millis));
            txn.commit()?;
            writeln!(out, "released")?;
        }
        "append" => {
            let n: u32 = arg(2)?.parse()?;
            // First line: how this process's store commits, for the SIGKILL test to check.
            writeln!(out, "durable {}", store.durable_commits()?)?;
            for i in 0..n {
                store.run_blocking(|txn| {
                    txn.set(format!("acked/{i:08}").as_bytes(), &i.to_le_bytes())
                })?;
                writeln!(out, "{i}")?;
                out.flush()?;
            }
        }
        "append-concurrent" => {
            let tasks: u32 = arg(2)?.parse()?;
            let n: u32 = arg(3)?.parse()?;
            drop(out);
            runtime()?.block_on(append_concurrent(store, tasks, n))?;
        }
        "increment-concurrent" => {
            let tasks: u32 = arg(2)?.parse()?;
            let n: u32 = arg(3)?.parse()?;
            let tag = arg(4)?.clone();
            runtime()?.block_on(increment_concurrent(store, tasks, n, tag))?;
            writeln!(out, "done")?;
        }
        other => bail!("unknown command {other}"),
    }
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Appends from `tasks` concurrent tasks, printing each acknowledgement as it arrives.
async fn append_concurrent(store: Store, tasks: u32, n: u32) -> anyhow::Result<()> {
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (store, acked) = (store.clone(), acked.clone());
            tokio::spawn(async move {
                for i in 0..n {
                    let key = format!("acked-c/{task:04}/{i:08}");
                    store
                        .run(move |txn| txn.set(key.as_bytes(), &i.to_le_bytes()))
                        .await?;
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{task} {i}")?;
                    if acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100 == 99 {
                        let stats = store.stats();
                        let load = |c: &std::sync::atomic::AtomicU64| {
                            c.load(std::sync::atomic::Ordering::Relaxed)
                        };
                        writeln!(
                            out,
                            "stats {} {}",
                            load(&stats.commits),
                            load(&stats.batches)
                        )?;
                    }
                    out.flush()?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    Ok(())
}

/// Increments the shared counter from `tasks` concurrent tasks, tagging each increment.
async fn increment_concurrent(store: Store, tasks: u32, n: u32, tag: String) -> anyhow::Result<()> {
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (store, tag) = (store.clone(), tag.clone());
            tokio::spawn(async move {
                for i in 0..n {
                    let mark = format!("shared/{tag}/{task:04}/{i:06}");
                    store
                        .run(move |txn| {
                            let seen = txn
                                .get(b"shared/counter")?
                                .map_or(0, |v| decode_counter(&v));
                            txn.set(b"shared/counter", &(seen + 1).to_le_bytes())?;
                            txn.set(mark.as_bytes(), b"1")
                        })
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for handle in handles {
        handle.await??;
    }
    Ok(())
}
