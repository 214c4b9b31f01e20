//! The FoundationDB backend (cargo feature `fdb`): a thin adapter of `foundationdb` 0.11 with
//! the 7.3 API to [`Engine`] / [`EngineTxn`]. All logic, including the retry loop, lives above
//! the seam and is the same as for SQLite.
//!
//! The client network thread is booted once per process on first open and stopped by
//! [`shutdown`]. Futures are awaited with `futures::executor::block_on` because
//! [`crate::Store`] already runs each transaction on a blocking thread; FoundationDB's own
//! network thread resolves them. Each transaction carries FoundationDB's timeout and retry
//! limit options so that none outlives the 5 s FoundationDB allows.
//!
//! `commit_unknown_result` is retried like any retryable error: every client write carries a
//! request id checked in the same transaction, so a retried commit that had in fact landed
//! writes nothing twice.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foundationdb::api::NetworkAutoStop;
use foundationdb::options::{MutationType, StreamingMode, TransactionOption};
use foundationdb::{Database, FdbError, RangeOption, Transaction};
use futures::executor::block_on;

use crate::error::{Error, Result};
use crate::kv::{Engine, EngineTxn, KeyValue, RangeOptions, TxnMode};

/// FoundationDB's `not_committed`: a conflict with another transaction.
const NOT_COMMITTED: i32 = 1020;

/// Settings of the FoundationDB backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdbOptions {
    /// Cluster file; `None` uses FoundationDB's default lookup (`FDB_CLUSTER_FILE`, then
    /// `/etc/foundationdb/fdb.cluster`).
    pub cluster_file: Option<PathBuf>,
    /// Per-transaction timeout (FoundationDB kills transactions after 5 s regardless).
    pub timeout: Duration,
    /// Per-transaction retry limit passed to FoundationDB.
    pub retry_limit: u32,
}

impl Default for FdbOptions {
    fn default() -> Self {
        FdbOptions {
            cluster_file: None,
            timeout: Duration::from_secs(5),
            retry_limit: 50,
        }
    }
}

static NETWORK: Mutex<Option<NetworkAutoStop>> = Mutex::new(None);

/// Boots the client network thread unless this process already did.
#[allow(unsafe_code)]
fn boot_once() -> Result<()> {
    let mut network = NETWORK
        .lock()
        .map_err(|_| Error::Open("fdb network lock poisoned".into()))?;
    if network.is_none() {
        let builder = foundationdb::api::FdbApiBuilder::default()
            .build()
            .map_err(|e| Error::Open(format!("fdb api: {e}")))?;
        // SAFETY: the network is booted once per process (guarded by NETWORK) and stopped by
        // `shutdown` before exit, as the crate requires.
        let stop =
            unsafe { builder.boot() }.map_err(|e| Error::Open(format!("fdb network: {e}")))?;
        *network = Some(stop);
    }
    Ok(())
}

/// Stops the client network thread; call once before the process exits.
pub fn shutdown() {
    if let Ok(mut network) = NETWORK.lock() {
        network.take();
    }
}

/// The FoundationDB engine.
pub struct FdbEngine {
    db: Arc<Database>,
    options: FdbOptions,
}

impl FdbEngine {
    /// Connects to the cluster named by `options`.
    pub fn open(options: FdbOptions) -> Result<Self> {
        boot_once()?;
        let path = options
            .cluster_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        let db = Database::new(path.as_deref()).map_err(|e| Error::Open(format!("fdb: {e}")))?;
        Ok(FdbEngine {
            db: Arc::new(db),
            options,
        })
    }
}

fn map_err(err: FdbError) -> Error {
    if err.code() == NOT_COMMITTED {
        Error::Conflict
    } else if err.is_retryable() {
        Error::Busy
    } else {
        Error::Fdb(format!("{err} (code {})", err.code()))
    }
}

impl Engine for FdbEngine {
    fn begin(&self, _mode: TxnMode) -> Result<Box<dyn EngineTxn>> {
        let trx = self.db.create_trx().map_err(map_err)?;
        let timeout_ms = i32::try_from(self.options.timeout.as_millis()).unwrap_or(i32::MAX);
        trx.set_option(TransactionOption::Timeout(timeout_ms))
            .map_err(map_err)?;
        let retry_limit = i32::try_from(self.options.retry_limit).unwrap_or(i32::MAX);
        trx.set_option(TransactionOption::RetryLimit(retry_limit))
            .map_err(map_err)?;
        Ok(Box::new(FdbTxn { trx }))
    }

    fn name(&self) -> &'static str {
        "fdb"
    }
}

struct FdbTxn {
    trx: Transaction,
}

impl EngineTxn for FdbTxn {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let value = block_on(self.trx.get(key, false)).map_err(map_err)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn get_range(&mut self, begin: &[u8], end: &[u8], opts: RangeOptions) -> Result<Vec<KeyValue>> {
        let mut range = RangeOption::from((begin, end));
        range.reverse = opts.reverse;
        range.limit = (opts.limit > 0).then_some(opts.limit);
        range.mode = StreamingMode::WantAll;
        let mut out = Vec::new();
        let mut next = Some(range);
        while let Some(range) = next {
            let values = block_on(self.trx.get_range(&range, 1, false)).map_err(map_err)?;
            out.extend(
                values
                    .iter()
                    .map(|kv| (kv.key().to_vec(), kv.value().to_vec())),
            );
            next = range.next_range(&values);
        }
        Ok(out)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.trx.set(key, value);
        Ok(())
    }

    fn clear(&mut self, key: &[u8]) -> Result<()> {
        self.trx.clear(key);
        Ok(())
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        self.trx.clear_range(begin, end);
        Ok(())
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) -> Result<()> {
        self.trx
            .atomic_op(key, &delta.to_le_bytes(), MutationType::Add);
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<()> {
        block_on(self.trx.commit())
            .map(drop)
            .map_err(|e| map_err(*e))
    }
}
