//! The SQLite transaction: statements of the key-value seam on one connection, whichever
//! way that connection is held.
//!
//! A transaction holds the writer connection (a write transaction of its own, or a read
//! transaction of the in-memory store), a pooled read connection, or a share of the writer
//! thread's batch during a group commit. In the last case the writer thread owns the SQLite
//! transaction and the job's savepoint: the job's transaction neither commits nor rolls back.

use std::rc::Rc;

use parking_lot::RawMutex;
use parking_lot::lock_api::ArcMutexGuard;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Pooled, exec, map_err};
use crate::error::{Error, Result};
use crate::kv::{EngineTxn, KeyValue, RangeOptions};

/// The writer connection, locked.
pub(super) type WriterGuard = ArcMutexGuard<RawMutex, Connection>;

pub(super) enum Conn {
    /// The writer connection, for a transaction of its own.
    Writer(WriterGuard),
    /// A read connection from the pool.
    Reader(Pooled),
    /// The writer connection during a group commit, shared by the batch's jobs in turn.
    Shared(Rc<WriterGuard>),
}

impl Conn {
    pub(super) fn get(&self) -> &Connection {
        match self {
            Conn::Writer(guard) => guard,
            Conn::Shared(guard) => guard,
            Conn::Reader(pooled) => pooled
                .conn
                .as_ref()
                .expect("a pooled connection is present until drop"),
        }
    }
}

pub(super) struct SqliteTxn {
    conn: Conn,
}

impl SqliteTxn {
    /// A transaction on `conn`, which has already begun it.
    pub(super) fn new(conn: Conn) -> Self {
        SqliteTxn { conn }
    }
}

impl Drop for SqliteTxn {
    fn drop(&mut self) {
        if let Conn::Shared(_) = self.conn {
            // The writer thread rolls the job back to its savepoint if it failed.
            return;
        }
        let conn = self.conn.get();
        if !conn.is_autocommit()
            && let Err(err) = conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %err, "sqlite rollback failed");
        }
    }
}

/// A range in key order, and in reverse: begin, end, limit (-1 for none).
pub(super) const RANGE_ASC: &str =
    "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k ASC LIMIT ?3";
const RANGE_DESC: &str = "SELECT k, v FROM kv WHERE k >= ?1 AND k < ?2 ORDER BY k DESC LIMIT ?3";

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
        let sql = if opts.reverse { RANGE_DESC } else { RANGE_ASC };
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
        if let Conn::Shared(_) = self.conn {
            return Err(Error::Task(
                "a job of a group commit cannot commit on its own".into(),
            ));
        }
        // On failure the transaction stays open and `Drop` rolls it back.
        exec(self.conn.get(), "COMMIT")
    }
}
