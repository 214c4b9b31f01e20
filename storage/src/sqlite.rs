//! The SQLite backend: one file in WAL mode holding a `WITHOUT ROWID` table of
//! `(k BLOB PRIMARY KEY, v BLOB)`, whose memcmp order equals FoundationDB's key order.
//!
//! Writers are pessimistic: a write transaction holds this process's writer connection and
//! SQLite's write lock (`BEGIN IMMEDIATE`) from its first statement to its commit, so write
//! transactions never see a stale snapshot. Within a process they queue on a mutex; across
//! processes sharing the file they queue on SQLite's lock with a busy timeout, and a timeout
//! surfaces as [`Error::Busy`] for [`crate::Store::run`] to retry. Read transactions use a small
//! pool of connections and run concurrently with the writer.
//!
//! Commits are durable with `synchronous = FULL` (the default). With [`GroupCommit`] (on by
//! default), the transactions of [`crate::Store::run`] that arrive while another commits go
//! to a writer thread that commits all those waiting at once, so concurrent writers share one
//! fsync (see the `group` module); `run_blocking` and [`crate::Store::begin`] commit on their
//! own. With group commit the WAL is checkpointed by a thread of its own, not by the writer
//! after its commits (see the `checkpoint` module). The in-memory mode has a single connection
//! and exists for unit tests of the layers above.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::{Error, Result};
use crate::kv::{Engine, EngineTxn, Figure, TxnMode, WriteJob};

mod backup;
mod checkpoint;
mod group;
mod reserve;
mod txn;

pub use backup::{Backup, backup};

use checkpoint::Checkpointer;
use group::GroupWriter;
use txn::{Conn, SqliteTxn};

/// How hard SQLite works to make a commit durable (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync the WAL on every commit: no acknowledged write is lost, even on power loss.
    #[default]
    Full,
    /// fsync at checkpoints only: survives process crashes, may lose the last commits on
    /// power loss or an OS crash.
    Normal,
    /// Never fsync. For bulk loads in benchmarks only.
    Off,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }
}

/// Settings of the SQLite backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// Durability of commits.
    pub synchronous: Synchronous,
    /// How long a statement waits for another process's lock before failing with busy.
    pub busy_timeout: Duration,
    /// Idle read connections kept open.
    pub read_pool: usize,
    /// WAL pages after which the WAL is checkpointed into the database file (SQLite's default
    /// is 1,000). With group commit a thread of its own checkpoints (the `checkpoint` module);
    /// without, the commit that reaches it does (`PRAGMA wal_autocheckpoint`). A page written
    /// by many transactions between two checkpoints is copied once: fewer, larger checkpoints
    /// copy fewer pages an append, for a larger WAL file and a longer recovery after a crash.
    pub wal_autocheckpoint: u32,
    /// Bytes kept free on the store's filesystem for the node's own writes once the disk
    /// fills (a file beside the database, the `reserve` module); 0 keeps none.
    pub reserve: u64,
}

/// The room kept by default for the node's own writes once the disk fills: 16 MiB.
pub const DEFAULT_RESERVE: u64 = 16 << 20;

/// SQLite's own default for `wal_autocheckpoint`, in pages.
pub const SQLITE_WAL_AUTOCHECKPOINT: u32 = 1_000;

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_pool: 8,
            wal_autocheckpoint: SQLITE_WAL_AUTOCHECKPOINT,
            reserve: DEFAULT_RESERVE,
        }
    }
}

/// Group commit: whether [`crate::Store::run`] transactions share commits, and how large a
/// shared commit may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommit {
    /// Hand `Store::run` transactions to the engine's writer thread, which commits all those
    /// waiting at once. Off, each commits on its own (one fsync each), as `run_blocking` does.
    pub enabled: bool,
    /// Most transactions in one commit.
    pub max_jobs: usize,
    /// Take no more transactions into a commit once they have written this many bytes.
    pub max_bytes: usize,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            enabled: true,
            max_jobs: 256,
            max_bytes: 4 << 20,
        }
    }
}

impl GroupCommit {
    /// No group commit: every transaction commits on its own.
    pub fn off() -> Self {
        GroupCommit {
            enabled: false,
            ..GroupCommit::default()
        }
    }
}

/// The SQLite engine. Open it with [`SqliteEngine::open`] or [`SqliteEngine::in_memory`] and
/// wrap it in a [`crate::Store`].
pub struct SqliteEngine {
    writer: Arc<Mutex<Connection>>,
    readers: Option<Arc<ReaderPool>>,
    group: Option<GroupWriter>,
    /// With group commit, the thread that checkpoints the WAL (the writer thread does not).
    /// Last: it stops after the writer thread has.
    checkpointer: Option<Checkpointer>,
    /// Room kept for the node's own writes once the disk fills (file stores only).
    reserve: Option<reserve::Reserve>,
}

struct ReaderPool {
    path: PathBuf,
    options: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
}

impl SqliteEngine {
    /// Opens (creating if needed) the store file at `path`, with group commit.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<Self> {
        Self::open_with(path, options, GroupCommit::default())
    }

    /// Opens (creating if needed) the store file at `path`, with the given group commit.
    pub fn open_with(path: &Path, options: SqliteOptions, group: GroupCommit) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Open(format!("cannot create {}: {e}", dir.display())))?;
        }
        let writer = open_connection(path, &options)?;
        retry_busy(options.busy_timeout, || init_schema(&writer))?;
        let checkpointer = if group.enabled {
            checkpoint::hook(&writer)?;
            Some(Checkpointer::start(path, &options)?)
        } else {
            None
        };
        let reserve = reserve::Reserve::keep(path, options.reserve);
        let readers = ReaderPool {
            path: path.to_owned(),
            options,
            idle: Mutex::new(Vec::new()),
        };
        let mut engine = Self::assemble(writer, Some(Arc::new(readers)), group, checkpointer)?;
        engine.reserve = reserve;
        Ok(engine)
    }

    /// A private in-memory store with one connection and group commit, for unit tests.
    pub fn in_memory() -> Result<Self> {
        Self::in_memory_with(GroupCommit::default())
    }

    /// A private in-memory store with one connection and the given group commit.
    pub fn in_memory_with(group: GroupCommit) -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(map_err)?;
        init_schema(&conn)?;
        Self::assemble(conn, None, group, None)
    }

    fn assemble(
        writer: Connection,
        readers: Option<Arc<ReaderPool>>,
        group: GroupCommit,
        checkpointer: Option<Checkpointer>,
    ) -> Result<Self> {
        let writer = Arc::new(Mutex::new(writer));
        let group = if group.enabled {
            let bounds = GroupCommit {
                max_jobs: group.max_jobs.max(1),
                ..group
            };
            let watch = checkpointer.as_ref().map(Checkpointer::state);
            Some(GroupWriter::start(Arc::clone(&writer), bounds, watch)?)
        } else {
            None
        };
        Ok(SqliteEngine {
            writer,
            readers,
            group,
            checkpointer,
            reserve: None,
        })
    }

    /// The `synchronous` level of the connection every commit goes through (the writer's, which
    /// the group-commit thread shares), read back from SQLite. EXTRA, stronger than FULL, reads
    /// as [`Synchronous::Full`].
    pub fn synchronous(&self) -> Result<Synchronous> {
        let level: i64 = self
            .writer
            .lock()
            .query_row("PRAGMA synchronous", [], |row| row.get(0))
            .map_err(map_err)?;
        Ok(match level {
            ..=0 => Synchronous::Off,
            1 => Synchronous::Normal,
            2.. => Synchronous::Full,
        })
    }

    /// Write transactions waiting for the writer thread (0 without group commit).
    pub fn queued_jobs(&self) -> usize {
        self.group.as_ref().map_or(0, GroupWriter::queued)
    }
}

fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| Error::Open(format!("{}: {e}", path.display())))?;
    conn.busy_timeout(options.busy_timeout).map_err(map_err)?;
    let mode: String = retry_busy(options.busy_timeout, || {
        conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(map_err)
    })?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Open(format!(
            "{}: cannot switch to WAL (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(map_err)?;
    conn.pragma_update(None, "wal_autocheckpoint", options.wal_autocheckpoint)
        .map_err(map_err)?;
    // Deleted content is overwritten with zeros, so a forgotten user's keys (which hold their
    // ids) do not linger in free pages of the file.
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(map_err)?;
    // The query planner's stability guarantee: without it, a cached statement whose plan a
    // bound value might change (a range scan's `LIMIT ?3`) is compiled again whenever that
    // value changes, about 2% of a node's CPU under appends. The kv table has one plan for
    // each statement whatever the values.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(map_err)?;
    Ok(conn)
}

/// Runs `step` again while it fails with busy, until `timeout` has passed. While another
/// process opens the same new file, switching it to WAL or creating the table can fail with
/// busy at once, without waiting in SQLite's busy handler.
fn retry_busy<T>(timeout: Duration, mut step: impl FnMut() -> Result<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let result = step();
        if !matches!(result, Err(Error::Busy)) || Instant::now() >= deadline {
            return result;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn init_schema(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID",
    )
    .map_err(map_err)
}

/// Maps SQLite's lock errors to the retryable variants, a full disk and failing I/O to their
/// own, and keeps the rest.
fn map_err(err: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(e, _) = &err {
        if e.extended_code == rusqlite::ffi::SQLITE_BUSY_SNAPSHOT {
            return Error::Conflict;
        }
        if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked {
            return Error::Busy;
        }
        if e.code == ErrorCode::DiskFull {
            return Error::Full(err.to_string());
        }
        if e.code == ErrorCode::SystemIoFailure {
            return Error::Io(err.to_string());
        }
    }
    Error::Sqlite(err)
}

/// Runs one statement without parameters or rows, prepared once per connection: `BEGIN`,
/// `COMMIT` and savepoints run for every transaction, and parsing them each time showed in
/// the write path's profile.
fn exec(conn: &Connection, sql: &str) -> Result<()> {
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    stmt.execute([]).map_err(map_err)?;
    Ok(())
}

impl Engine for SqliteEngine {
    fn begin(&self, mode: TxnMode) -> Result<Box<dyn EngineTxn>> {
        let conn = match (mode, &self.readers) {
            (TxnMode::Read, Some(pool)) => Conn::Reader(pool.checkout()?),
            (TxnMode::Read, None) | (TxnMode::Write, _) => Conn::Writer(self.writer.lock_arc()),
        };
        let begin = match mode {
            TxnMode::Read => "BEGIN DEFERRED",
            TxnMode::Write => "BEGIN IMMEDIATE",
        };
        exec(conn.get(), begin)?;
        Ok(Box::new(SqliteTxn::new(conn)))
    }

    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn figures(&self) -> Vec<Figure> {
        let mut figures = vec![Figure::gauge(
            "engram_sqlite_write_queue",
            "Write transactions waiting for the group-commit writer thread",
            self.queued_jobs() as f64,
        )];
        if let Some(group) = &self.group {
            figures.extend(group.figures());
        }
        if let Some(checkpointer) = &self.checkpointer {
            figures.extend(checkpointer.figures());
        }
        if let Some(reserve) = &self.reserve {
            figures.push(Figure::gauge(
                "engram_sqlite_reserve_released",
                "1 while the store's reserve is released for a full disk and clients' writes \
                 are refused (507)",
                if reserve.released() { 1.0 } else { 0.0 },
            ));
        }
        figures
    }

    fn durable_commits(&self) -> Result<bool> {
        // The in-memory mode has no file to be durable in.
        Ok(self.readers.is_some() && self.synchronous()? == Synchronous::Full)
    }

    fn group_commit(&self) -> bool {
        self.group.is_some()
    }

    fn disk_filled(&self) -> bool {
        self.reserve.as_ref().is_some_and(reserve::Reserve::release)
    }

    fn disk_full(&self) -> bool {
        self.reserve.as_ref().is_some_and(reserve::Reserve::full)
    }

    fn erase_history(&self) -> Result<()> {
        let Some(pool) = &self.readers else {
            // In memory: no file holds anything.
            return Ok(());
        };
        // On the writer's connection, under its lock: no commit of this process runs while the
        // store is rebuilt and its WAL truncated.
        checkpoint::erase_cleared(&self.writer.lock(), pool.options.busy_timeout)
    }

    fn submit(&self, job: Box<dyn WriteJob>) {
        match &self.group {
            Some(group) => group.submit(job),
            None => job.finish(Err(Error::Task(
                "group commit is off for this sqlite store".into(),
            ))),
        }
    }
}

impl ReaderPool {
    fn checkout(self: &Arc<Self>) -> Result<Pooled> {
        let idle = self.idle.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => open_connection(&self.path, &self.options)?,
        };
        Ok(Pooled {
            conn: Some(conn),
            pool: Arc::clone(self),
        })
    }
}

struct Pooled {
    conn: Option<Connection>,
    pool: Arc<ReaderPool>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let mut idle = self.pool.idle.lock();
            if idle.len() < self.pool.options.read_pool {
                idle.push(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests;
