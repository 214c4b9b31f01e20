//! Checkpoints of the WAL on a thread of their own.
//!
//! SQLite's automatic checkpoint runs on the connection that committed, right after its
//! commit: on the group-commit writer thread every write waits while a checkpoint copies the
//! WAL into the database file and fsyncs it, and the longer the WAL is let grow (fewer copies
//! of the pages many transactions change), the longer that wait. With group commit the
//! writer's connection does not checkpoint by itself: its WAL hook, which SQLite calls after
//! every commit with the WAL's size in pages, wakes this thread once the WAL holds
//! `wal_autocheckpoint` pages more than at the last checkpoint. The thread runs a `PASSIVE`
//! checkpoint on a connection of its own: it copies what no reader still needs without taking
//! the write lock, so commits go on meanwhile.
//!
//! The WAL starts again from its beginning only when a write transaction begins with all of
//! it copied, which commits made during the thread's checkpoint prevent under a steady load:
//! the WAL would grow without end, and with it the cost of finding a page in it. So the
//! writer thread's first commit after each of the thread's checkpoints copies the few frames
//! committed meanwhile itself, in its WAL hook as SQLite's own automatic checkpoint does, and
//! its next transaction starts the WAL again. The last connection to close checkpoints what
//! is left, as without this thread.
//!
//! The hook is a plain function: it finds this thread's state through a thread-local that the
//! writer thread sets when it starts, so commits on the writer's connection from other threads
//! (`run_blocking`, [`crate::Store::begin`]) do nothing there; the writer thread's next commit
//! sees the WAL's whole size. The WAL reaches about twice the interval at most when a restart
//! races with the end of a checkpoint.

use std::cell::RefCell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use rusqlite::Connection;
use rusqlite::hooks::Wal;

use super::{SqliteOptions, map_err, open_connection};
use crate::error::{Error, Result};
use crate::kv::Figure;

/// The name of an engine's checkpoint thread.
pub(super) const CHECKPOINT_THREAD: &str = "engram-sqlite-checkpoint";

/// The checkpoint thread of one engine. Dropping it stops the thread and closes its
/// connection.
pub(super) struct Checkpointer {
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

/// What the writer thread's WAL hook and the checkpoint thread share.
pub(super) struct State {
    /// WAL pages between two checkpoints.
    every: i64,
    /// The WAL's size at which the next checkpoint is due.
    next_at: AtomicI64,
    /// The WAL's size after the writer thread's last commit.
    last: AtomicI64,
    signal: Mutex<Signal>,
    wake: Condvar,
    /// Checkpoints run by the thread.
    runs: AtomicU64,
    /// Those that failed.
    failures: AtomicU64,
    /// Microseconds the thread spent checkpointing.
    busy_micros: AtomicU64,
    /// `runs` when the writer thread last copied what its commits added during a checkpoint.
    tails: AtomicU64,
    /// Times the hook saw the WAL start again from its beginning.
    restarts: AtomicU64,
    /// The largest WAL the writer thread's commits left, in pages.
    peak: AtomicI64,
}

#[derive(Default)]
struct Signal {
    due: bool,
    closed: bool,
}

thread_local! {
    /// The checkpoint state of the engine whose writer thread this is.
    static WATCHED: RefCell<Option<Arc<State>>> = const { RefCell::new(None) };
}

impl Checkpointer {
    /// Opens a connection to the store at `path` and starts the thread, which checkpoints
    /// every `options.wal_autocheckpoint` pages of WAL.
    pub(super) fn start(path: &Path, options: &SqliteOptions) -> Result<Self> {
        let conn = open_connection(path, options)?;
        let every = i64::from(options.wal_autocheckpoint.max(1));
        let state = Arc::new(State {
            every,
            next_at: AtomicI64::new(every),
            last: AtomicI64::new(0),
            signal: Mutex::new(Signal::default()),
            wake: Condvar::new(),
            runs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            busy_micros: AtomicU64::new(0),
            tails: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            peak: AtomicI64::new(0),
        });
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name(CHECKPOINT_THREAD.into())
            .spawn(move || shared.run(&conn))
            .map_err(|e| Error::Open(format!("cannot start the sqlite checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            state,
            thread: Some(thread),
        })
    }

    /// What the writer thread installs with [`watch`].
    pub(super) fn state(&self) -> Arc<State> {
        Arc::clone(&self.state)
    }

    /// What the thread and the writer's hook have seen, for metrics.
    pub(super) fn figures(&self) -> [Figure; 6] {
        let s = &self.state;
        let count = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64;
        let pages = |n: &AtomicI64| n.load(Ordering::Relaxed).max(0) as f64;
        [
            Figure::counter(
                "engram_sqlite_checkpoints_total",
                "WAL checkpoints run by the checkpoint thread",
                count(&s.runs),
            ),
            Figure::counter(
                "engram_sqlite_checkpoint_failures_total",
                "WAL checkpoints that failed (each logged)",
                count(&s.failures),
            ),
            Figure::counter(
                "engram_sqlite_checkpoint_seconds_total",
                "Time the checkpoint thread spent copying the WAL into the database file",
                count(&s.busy_micros) / 1e6,
            ),
            Figure::counter(
                "engram_sqlite_wal_restarts_total",
                "Times the WAL started again from its beginning after a complete checkpoint",
                count(&s.restarts),
            ),
            Figure::gauge(
                "engram_sqlite_wal_pages",
                "Pages in the WAL after the writer thread's last commit",
                pages(&s.last),
            ),
            Figure::gauge(
                "engram_sqlite_wal_pages_peak",
                "The most pages the WAL held after a commit of the writer thread",
                pages(&s.peak),
            ),
        ]
    }

    /// Checkpoints run so far.
    #[cfg(test)]
    pub(super) fn runs(&self) -> u64 {
        self.state.runs.load(Ordering::SeqCst)
    }

    /// Times the WAL started again from its beginning, as the writer thread's commits saw.
    #[cfg(test)]
    pub(super) fn restarts(&self) -> u64 {
        self.state.restarts.load(Ordering::SeqCst)
    }

    /// The largest WAL the writer thread's commits left, in pages.
    #[cfg(test)]
    pub(super) fn peak(&self) -> i64 {
        self.state.peak.load(Ordering::SeqCst)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.state.signal.lock().closed = true;
        self.state.wake.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the sqlite checkpoint thread panicked");
        }
    }
}

/// Turns the automatic checkpoint of `conn` (the writer's) off and hands the WAL's growth to
/// the checkpoint thread of whichever writer thread commits on it.
pub(super) fn hook(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(map_err)?;
    conn.wal_hook(Some(wal_grew));
    Ok(())
}

/// Rewrites `conn`'s store so that nothing committed transactions cleared stays in any of its
/// files: `VACUUM` rebuilds the database from its live rows only (`secure_delete` zeroes
/// deleted cells, but balancing the b-tree leaves copies of moved cells in the unused space of
/// pages, and those may be a cleared user's), then the WAL, which holds the old pages as well
/// as the new, is copied into the database file and truncated to nothing
/// (`PRAGMA wal_checkpoint(TRUNCATE)`). Each step that another process's writer or readers of
/// an older snapshot keep from finishing is tried again until `timeout`.
///
/// # Errors
/// [`Error::Busy`] if a step never finished within `timeout`.
pub(super) fn erase_cleared(conn: &Connection, timeout: std::time::Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match conn.execute_batch("VACUUM").map_err(map_err) {
            Ok(()) => break,
            Err(Error::Busy) if Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(err) => return Err(err),
        }
    }
    truncate_wal(conn, deadline)
}

/// Copies the whole WAL of `conn`'s store into the database file and truncates it to
/// nothing, trying again until `deadline` while readers or another process keep it busy.
fn truncate_wal(conn: &Connection, deadline: Instant) -> Result<()> {
    loop {
        let blocked = match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            row.get::<_, i64>(0)
        }) {
            Ok(blocked) => blocked != 0,
            Err(err) => {
                let err = map_err(err);
                if !matches!(err, Error::Busy) {
                    return Err(err);
                }
                true
            }
        };
        if !blocked {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Busy);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Makes the calling thread (an engine's writer thread) report its commits to `state`.
pub(super) fn watch(state: Arc<State>) {
    WATCHED.with(|watched| *watched.borrow_mut() = Some(state));
}

/// The writer connection's WAL hook: called after each commit with the WAL's size in pages.
/// It never fails: an error here would fail the statement of a commit that has happened.
fn wal_grew(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WATCHED.with(|watched| {
        if let Some(state) = watched.borrow().as_ref() {
            state.grew(wal, i64::from(pages));
        }
    });
    Ok(())
}

impl State {
    fn grew(&self, wal: &Wal, pages: i64) {
        self.peak.fetch_max(pages, Ordering::SeqCst);
        if pages < self.last.swap(pages, Ordering::SeqCst) {
            // The WAL started again from its beginning after a complete checkpoint.
            self.restarts.fetch_add(1, Ordering::SeqCst);
            self.next_at.store(self.every, Ordering::SeqCst);
        }
        let runs = self.runs.load(Ordering::SeqCst);
        if self.tails.swap(runs, Ordering::SeqCst) != runs
            && let Err(err) = wal.checkpoint()
        {
            // Busy while the thread has begun its next checkpoint: that one copies it.
            tracing::debug!(error = %err, "wal checkpoint after a commit failed");
        }
        if pages >= self.next_at.load(Ordering::SeqCst) {
            let mut signal = self.signal.lock();
            if !signal.due {
                signal.due = true;
                self.wake.notify_one();
            }
        }
    }

    fn run(&self, conn: &Connection) {
        loop {
            {
                let mut signal = self.signal.lock();
                while !signal.due && !signal.closed {
                    self.wake.wait(&mut signal);
                }
                if signal.closed {
                    return;
                }
                signal.due = false;
            }
            let started = Instant::now();
            let outcome = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                row.get::<_, i64>(1)
            });
            let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.busy_micros.fetch_add(took, Ordering::Relaxed);
            self.runs.fetch_add(1, Ordering::SeqCst);
            let wal = match outcome {
                Ok(wal) => wal,
                Err(err) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    // Another process checkpointing the same file, for one: try again once
                    // the WAL has grown by another interval.
                    tracing::warn!(error = %err, "wal checkpoint failed");
                    self.last.load(Ordering::SeqCst)
                }
            };
            self.next_at
                .store(wal.max(0) + self.every, Ordering::SeqCst);
        }
    }
}
