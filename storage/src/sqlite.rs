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
//! Commits are durable with `synchronous = FULL` (the default). The in-memory mode has a
//! single connection and exists for unit tests of the layers above.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use parking_lot::lock_api::ArcMutexGuard;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::kv::{Engine, EngineTxn, KeyValue, RangeOptions, TxnMode};

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
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            read_pool: 8,
        }
    }
}

/// The SQLite engine. Open it with [`SqliteEngine::open`] or [`SqliteEngine::in_memory`] and
/// wrap it in a [`crate::Store`].
pub struct SqliteEngine {
    writer: Arc<Mutex<Connection>>,
    readers: Option<Arc<ReaderPool>>,
}

struct ReaderPool {
    path: PathBuf,
    options: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
}

impl SqliteEngine {
    /// Opens (creating if needed) the store file at `path`.
    pub fn open(path: &Path, options: SqliteOptions) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Open(format!("cannot create {}: {e}", dir.display())))?;
        }
        let writer = open_connection(path, &options)?;
        init_schema(&writer)?;
        let readers = ReaderPool {
            path: path.to_owned(),
            options,
            idle: Mutex::new(Vec::new()),
        };
        Ok(SqliteEngine {
            writer: Arc::new(Mutex::new(writer)),
            readers: Some(Arc::new(readers)),
        })
    }

    /// A private in-memory store with one connection, for unit tests.
    pub fn in_memory() -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(map_err)?;
        init_schema(&conn)?;
        Ok(SqliteEngine {
            writer: Arc::new(Mutex::new(conn)),
            readers: None,
        })
    }
}

fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| Error::Open(format!("{}: {e}", path.display())))?;
    conn.busy_timeout(options.busy_timeout).map_err(map_err)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(map_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Open(format!(
            "{}: cannot switch to WAL (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(map_err)?;
    Ok(conn)
}

fn init_schema(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID",
    )
    .map_err(map_err)
}

/// Maps SQLite's lock errors to the retryable variants and keeps the rest.
fn map_err(err: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(e, _) = &err {
        if e.extended_code == rusqlite::ffi::SQLITE_BUSY_SNAPSHOT {
            return Error::Conflict;
        }
        if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked {
            return Error::Busy;
        }
    }
    Error::Sqlite(err)
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
        conn.get().execute_batch(begin).map_err(map_err)?;
        Ok(Box::new(SqliteTxn { conn }))
    }

    fn name(&self) -> &'static str {
        "sqlite"
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

enum Conn {
    Writer(ArcMutexGuard<parking_lot::RawMutex, Connection>),
    Reader(Pooled),
}

impl Conn {
    fn get(&self) -> &Connection {
        match self {
            Conn::Writer(guard) => guard,
            Conn::Reader(pooled) => pooled
                .conn
                .as_ref()
                .expect("a pooled connection is present until drop"),
        }
    }
}

struct SqliteTxn {
    conn: Conn,
}

impl Drop for SqliteTxn {
    fn drop(&mut self) {
        let conn = self.conn.get();
        if !conn.is_autocommit()
            && let Err(err) = conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %err, "sqlite rollback failed");
        }
    }
}

impl EngineTxn for SqliteTxn {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let conn = self.conn.get();
        let mut stmt = conn
            .prepare_cached("SELECT v FROM kv WHERE k = ?1")
            .map_err(map_err)?;
        stmt.query_row([key], |row| row.get(0))
            .optional()
            .map_err(map_err)
    }

    fn get_range(&mut self, begin: &[u8], end: &[u8], opts: RangeOptions) -> Result<Vec<KeyValue>> {
        let sql = if opts.reverse {
            "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k DESC LIMIT ?3"
        } else {
            "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k ASC LIMIT ?3"
        };
        let limit = if opts.limit == 0 {
            -1
        } else {
            i64::try_from(opts.limit).unwrap_or(i64::MAX)
        };
        let conn = self.conn.get();
        let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
        let rows = stmt
            .query_map(params![begin, end, limit], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .map_err(map_err)?;
        rows.collect::<rusqlite::Result<Vec<KeyValue>>>()
            .map_err(map_err)
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let conn = self.conn.get();
        let mut stmt = conn
            .prepare_cached("INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
            .map_err(map_err)?;
        stmt.execute(params![key, value]).map_err(map_err)?;
        Ok(())
    }

    fn clear(&mut self, key: &[u8]) -> Result<()> {
        let conn = self.conn.get();
        let mut stmt = conn
            .prepare_cached("DELETE FROM kv WHERE k = ?1")
            .map_err(map_err)?;
        stmt.execute([key]).map_err(map_err)?;
        Ok(())
    }

    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()> {
        let conn = self.conn.get();
        let mut stmt = conn
            .prepare_cached("DELETE FROM kv WHERE k >= ?1 AND k < ?2")
            .map_err(map_err)?;
        stmt.execute(params![begin, end]).map_err(map_err)?;
        Ok(())
    }

    fn atomic_add(&mut self, key: &[u8], delta: i64) -> Result<()> {
        let current = self.get(key)?.map_or(0, |v| crate::kv::decode_counter(&v));
        self.set(key, &current.wrapping_add(delta).to_le_bytes())
    }

    fn commit(self: Box<Self>) -> Result<()> {
        // On failure the transaction stays open and `Drop` rolls it back.
        self.conn.get().execute_batch("COMMIT").map_err(map_err)
    }
}
