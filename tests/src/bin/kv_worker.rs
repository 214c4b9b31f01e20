//! A helper process for the storage suites: it opens the SQLite store at a path shared with
//! the test process and works on it, so tests can prove the semantics hold across processes
//! and across a SIGKILL.
//!
//! ```text
//! kv_worker conformance <path> <prefix>   run the conformance suite under <prefix>
//! kv_worker increment <path> <n> <tag>    n read-increment-write transactions on one counter
//! kv_worker hold <path> <millis>          hold the write lock for <millis>, then commit
//! kv_worker append <path> <n>             commit keys acked/0..n, printing each index once acknowledged
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
            for i in 0..n {
                store.run_blocking(|txn| {
                    txn.set(format!("acked/{i:08}").as_bytes(), &i.to_le_bytes())
                })?;
                writeln!(out, "{i}")?;
                out.flush()?;
            }
        }
        other => bail!("unknown command {other}"),
    }
    Ok(())
}
