//! The ordered key-value seam, modelled on FoundationDB's transaction API.
//!
//! Backends implement [`Engine`] and [`EngineTxn`] (thin adapters, no logic); everything
//! above them talks to [`Txn`], which enforces FoundationDB's size limits identically for
//! every backend. Retries live in [`crate::Store`], not here.
//!
//! A backend may also commit several write transactions at once ([`Engine::group_commit`]):
//! [`crate::Store`] then submits each attempt as a [`WriteJob`], which the backend runs in
//! its own part of a shared transaction and acknowledges once the shared commit is durable.

use crate::error::{Error, Result};

/// A key and its value, as returned by range reads.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// Whether a transaction may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnMode {
    /// Reads only; any write fails with [`Error::ReadOnly`].
    Read,
    /// Reads and writes.
    Write,
}

/// Options of a range read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeOptions {
    /// At most this many pairs; 0 means no limit.
    pub limit: usize,
    /// Descending key order (the last `limit` keys of the range).
    pub reverse: bool,
}

impl RangeOptions {
    /// The first `limit` pairs in ascending order.
    pub fn first(limit: usize) -> Self {
        RangeOptions {
            limit,
            reverse: false,
        }
    }

    /// The last `limit` pairs, in descending order.
    pub fn last(limit: usize) -> Self {
        RangeOptions {
            limit,
            reverse: true,
        }
    }
}

/// FoundationDB's limits, enforced for every backend so that code tested on SQLite
/// cannot exceed them in production.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest key in bytes (FoundationDB: 10,000).
    pub max_key: usize,
    /// Largest value in bytes (FoundationDB: 100,000).
    pub max_value: usize,
    /// Largest total of mutation bytes in one transaction (FoundationDB: 10,000,000).
    pub max_txn: usize,
    /// Above this many mutation bytes a transaction logs a warning (FoundationDB advises 1 MB).
    pub warn_txn: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key: 10_000,
            max_value: 100_000,
            max_txn: 10_000_000,
            warn_txn: 1_000_000,
        }
    }
}

/// One figure a backend reports of itself, for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    /// The metric's name (`engram_sqlite_...`).
    pub name: &'static str,
    /// What it counts or measures.
    pub help: &'static str,
    /// A counter (only grows) rather than a gauge.
    pub counter: bool,
    /// Its value now.
    pub value: f64,
}

impl Figure {
    /// A counter: a total that only grows.
    pub fn counter(name: &'static str, help: &'static str, value: f64) -> Self {
        Figure {
            name,
            help,
            counter: true,
            value,
        }
    }

    /// A gauge: a value now, up or down.
    pub fn gauge(name: &'static str, help: &'static str, value: f64) -> Self {
        Figure {
            name,
            help,
            counter: false,
            value,
        }
    }
}

/// A storage backend: something that opens transactions.
pub trait Engine: Send + Sync + 'static {
    /// Opens one transaction attempt.
    fn begin(&self, mode: TxnMode) -> Result<Box<dyn EngineTxn>>;

    /// A short name for logs and metrics ("sqlite", "fdb").
    fn name(&self) -> &'static str;

    /// The backend's own figures for metrics (SQLite's WAL and checkpoints); none by default.
    fn figures(&self) -> Vec<Figure> {
        Vec::new()
    }

    /// Whether an acknowledged commit is on stable storage, as the backend is set up now
    /// (read back from it, not from the options it was given). FoundationDB's commits are
    /// durable once acknowledged, hence the default; SQLite answers from the `synchronous`
    /// pragma of the connection every commit goes through.
    fn durable_commits(&self) -> Result<bool> {
        Ok(true)
    }

    /// Makes what committed transactions cleared unrecoverable from the backend's own files,
    /// before it returns: a forgotten user must not be read back from a write-ahead log or a
    /// journal or from unused space in pages that still holds copies of it. SQLite rebuilds
    /// its database file from the live rows (`VACUUM`, which costs time in proportion to the
    /// store's size) and truncates its WAL to nothing. FoundationDB keeps no file this process
    /// could scrub, hence the default: its storage servers reuse the pages of cleared ranges
    /// in their own time (see docs/security.md).
    ///
    /// # Errors
    /// [`Error::Busy`] when the backend could not finish within its busy timeout (readers of
    /// an older snapshot in another process, say): the caller should fail and be retried.
    fn erase_history(&self) -> Result<()> {
        Ok(())
    }

    /// Called when a write transaction failed because the disk is full ([`Error::Full`]):
    /// the backend may release room it kept for the node's own writes; whether it released
    /// some now (the transaction is then tried again, once). Nothing by default.
    fn disk_filled(&self) -> bool {
        false
    }

    /// Whether clients' writes are to be refused for want of room ([`Error::Full`]) without
    /// being tried: the disk filled and has not room enough again. False by default.
    fn disk_full(&self) -> bool {
        false
    }

    /// Whether this backend commits write transactions in groups. If so, [`crate::Store::run`]
    /// hands each attempt to [`Engine::submit`] instead of opening its own transaction.
    fn group_commit(&self) -> bool {
        false
    }

    /// Queues one attempt of a write transaction for the backend's next group commit, without
    /// blocking (it is called from async tasks, which then await the answer). The backend
    /// calls [`WriteJob::finish`] exactly once, and with `Ok` only once the commit holding the
    /// job's writes is durable. Only called when [`Engine::group_commit`] is true; the default
    /// fails the job.
    fn submit(&self, job: Box<dyn WriteJob>) {
        job.finish(Err(Error::Task(format!(
            "the {} backend has no group commit",
            self.name()
        ))));
    }
}

/// One attempt of a write transaction handed to [`Engine::submit`]: the backend runs it inside
/// a transaction it shares with other jobs, then commits them all at once.
pub trait WriteJob: Send {
    /// Runs the attempt against `txn`, the job's own part of the shared transaction (it sees
    /// the writes of jobs that ran before it in the same commit). Returns the mutation bytes
    /// written. On an error the backend discards everything this attempt wrote and nothing
    /// else.
    fn run(&mut self, txn: Box<dyn EngineTxn>) -> Result<usize>;

    /// Delivers the outcome: the shared commit once it is durable, or why the attempt failed
    /// (its own error, or the shared commit's, in which case nothing of the job is visible).
    fn finish(self: Box<Self>, outcome: Result<SharedCommit>);
}

/// The commit that made a [`WriteJob`] durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedCommit {
    /// Numbers the backend's commits, increasing (per engine, from 1).
    pub seq: u64,
    /// Jobs whose writes this commit made durable.
    pub jobs: usize,
}

/// One attempt of a transaction in a backend. Dropping it without [`EngineTxn::commit`]
/// rolls it back: nothing it wrote becomes visible. A transaction stays on the thread that
/// opened it.
///
/// Keys and values are opaque bytes ordered by unsigned byte comparison.
pub trait EngineTxn {
    /// The value at `key`, seeing this transaction's own writes.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Pairs with `begin <= key < end`, seeing this transaction's own writes.
    fn get_range(&mut self, begin: &[u8], end: &[u8], opts: RangeOptions) -> Result<Vec<KeyValue>>;
    /// Sets `key` to `value`.
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key`.
    fn clear(&mut self, key: &[u8]) -> Result<()>;
    /// Removes every key with `begin <= key < end`.
    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()>;
    /// Adds `delta` to the little-endian 64-bit integer at `key` (absent counts as 0;
    /// shorter values are zero-extended, longer ones truncated, as FoundationDB's ADD does).
    fn atomic_add(&mut self, key: &[u8], delta: i64) -> Result<()>;
    /// Makes every write of this transaction durable and visible, or fails with nothing visible.
    fn commit(self: Box<Self>) -> Result<()>;
}

/// The transaction handed to [`crate::Store::run`] closures: a backend transaction plus the
/// size accounting and read-only guard that every backend shares.
pub struct Txn {
    inner: Box<dyn EngineTxn>,
    mode: TxnMode,
    limits: Limits,
    written: usize,
    warned: bool,
}

impl Txn {
    pub(crate) fn new(inner: Box<dyn EngineTxn>, mode: TxnMode, limits: Limits) -> Self {
        Txn {
            inner,
            mode,
            limits,
            written: 0,
            warned: false,
        }
    }

    /// The value at `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        self.inner.get(key)
    }

    /// Pairs with `begin <= key < end` in the order and number `opts` asks for.
    pub fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        opts: RangeOptions,
    ) -> Result<Vec<KeyValue>> {
        self.check_key(begin)?;
        self.check_key(end)?;
        if begin >= end {
            return Ok(Vec::new());
        }
        self.inner.get_range(begin, end, opts)
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_key(key)?;
        if value.len() > self.limits.max_value {
            return Err(Error::ValueTooLarge {
                len: value.len(),
                limit: self.limits.max_value,
            });
        }
        self.account(key.len() + value.len())?;
        self.inner.set(key, value)
    }

    /// Removes `key`.
    pub fn clear(&mut self, key: &[u8]) -> Result<()> {
        self.check_key(key)?;
        self.account(key.len())?;
        self.inner.clear(key)
    }

    /// Removes every key with `begin <= key < end`.
    pub fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        self.check_key(begin)?;
        self.check_key(end)?;
        if begin >= end {
            return Ok(());
        }
        self.account(begin.len() + end.len())?;
        self.inner.clear_range(begin, end)
    }

    /// Adds `delta` to the little-endian 64-bit counter at `key`.
    pub fn atomic_add(&mut self, key: &[u8], delta: i64) -> Result<()> {
        self.check_key(key)?;
        self.account(key.len() + 8)?;
        self.inner.atomic_add(key, delta)
    }

    /// Mutation bytes written so far, as FoundationDB would count them (keys plus values).
    pub fn size(&self) -> usize {
        self.written
    }

    /// Commits this attempt: every write becomes durable and visible, or none does.
    /// Only for transactions opened with [`crate::Store::begin`].
    pub fn commit(self) -> Result<()> {
        self.inner.commit()
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.len() > self.limits.max_key {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                limit: self.limits.max_key,
            });
        }
        Ok(())
    }

    fn account(&mut self, bytes: usize) -> Result<()> {
        if self.mode == TxnMode::Read {
            return Err(Error::ReadOnly);
        }
        self.written += bytes;
        if self.written > self.limits.max_txn {
            return Err(Error::TransactionTooLarge {
                size: self.written,
                limit: self.limits.max_txn,
            });
        }
        if self.written > self.limits.warn_txn && !self.warned {
            self.warned = true;
            tracing::warn!(
                size = self.written,
                advised = self.limits.warn_txn,
                "transaction exceeds the advised size"
            );
        }
        Ok(())
    }
}

/// Decodes a counter written by [`Txn::atomic_add`].
pub fn decode_counter(value: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    let n = value.len().min(8);
    bytes[..n].copy_from_slice(&value[..n]);
    i64::from_le_bytes(bytes)
}
