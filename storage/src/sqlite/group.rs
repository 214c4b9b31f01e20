//! Group commit: one writer thread per engine runs the write transactions that
//! [`crate::Store::run`] submits, many to one SQLite transaction, and makes them durable with
//! one `COMMIT` (one fsync of the WAL under `synchronous = FULL`).
//!
//! A batch: the thread takes the first queued job, locks the engine's writer connection (the
//! mutex that [`crate::Store::begin`] and `run_blocking` take too), opens `BEGIN IMMEDIATE`
//! (SQLite's write lock, shared with other processes through the busy timeout), and runs each
//! job inside its own `SAVEPOINT`. A job that fails or panics is rolled back to its savepoint,
//! which discards its writes and nothing else. While jobs are queued and the batch is within
//! its bounds, the thread keeps taking them; then it commits once, unlocks the connection, and
//! only then answers the jobs, so an acknowledged write is durable. If `BEGIN` or `COMMIT`
//! fails, or SQLite rolls the whole transaction back after an error, every job of the batch
//! gets the error and nothing of theirs is visible; retryable errors (busy, conflict) are
//! retried by the store's loop.
//!
//! The jobs of a batch run one after another and see the writes of those before them, so a
//! batch is the same as running them serially in that order, with all or none committed.
//! Nothing waits for more work: a batch is what queued while the previous one was committing
//! (a lone writer's job is a batch of one). Every job goes through the queue, so that the
//! submitting task awaits its answer on the async runtime: no thread blocks in between (a
//! submitter that committed by itself when the writer thread was idle cost a blocking thread,
//! and two thread switches, for every write under load).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::Mutex;
use rusqlite::Connection;

use super::checkpoint;
use super::txn::{Conn, SqliteTxn, WriterGuard};
use super::{GroupCommit, exec};
use crate::error::{Error, Result};
use crate::kv::{Figure, SharedCommit, WriteJob};

/// The name of an engine's writer thread.
pub(super) const WRITER_THREAD: &str = "engram-sqlite-writer";

/// The writer thread of one engine and the queue in front of it. Dropping it lets the thread
/// finish the queued jobs and waits for it to close the connection.
pub(super) struct GroupWriter {
    shared: Arc<Shared>,
    queue: Option<mpsc::Sender<Queued>>,
    thread: Option<JoinHandle<()>>,
}

/// A job and when it was queued.
type Queued = (Instant, Box<dyn WriteJob>);

/// What the writer thread and the submitters share.
struct Shared {
    conn: Arc<Mutex<Connection>>,
    bounds: GroupCommit,
    /// Jobs in the queue.
    queued: AtomicUsize,
    /// The writer thread is running a batch or answering its jobs (the tests watch it).
    busy: AtomicBool,
    /// Successful commits so far.
    seq: AtomicU64,
    /// Where the writer thread's time goes, for the operator: [`GroupWriter::figures`].
    timings: Timings,
}

/// Totals of the writer thread's work since the engine opened, in nanoseconds where timed.
#[derive(Default)]
struct Timings {
    /// Jobs taken from the queue.
    jobs: AtomicU64,
    /// Time jobs waited in the queue, summed over jobs.
    waited: AtomicU64,
    /// Time in `COMMIT` (writing the WAL, and its fsync under `synchronous = FULL`).
    committing: AtomicU64,
    /// Time the thread spent on batches, from taking the first job to the commit.
    busy: AtomicU64,
}

/// Adds the nanoseconds since `since` to `total`.
fn add_since(total: &AtomicU64, since: Instant) {
    let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    total.fetch_add(nanos, Ordering::Relaxed);
}

/// A job of the current batch and its own outcome (`Ok`: it ran and awaits the commit).
type Ran = (Box<dyn WriteJob>, Result<()>);

impl GroupWriter {
    /// Starts the writer thread of `conn`; its commits report the WAL's growth to `watch`
    /// (the engine's checkpoint thread), if any.
    pub(super) fn start(
        conn: Arc<Mutex<Connection>>,
        bounds: GroupCommit,
        watch: Option<Arc<checkpoint::State>>,
    ) -> Result<Self> {
        let (queue, jobs) = mpsc::channel();
        let shared = Arc::new(Shared {
            conn,
            bounds,
            queued: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            timings: Timings::default(),
        });
        let writer = Writer {
            shared: Arc::clone(&shared),
            jobs,
        };
        let thread = std::thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || {
                if let Some(state) = watch {
                    checkpoint::watch(state);
                }
                writer.run();
            })
            .map_err(|e| Error::Open(format!("cannot start the sqlite writer thread: {e}")))?;
        Ok(GroupWriter {
            shared,
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues `job` for the writer thread's next batch (never blocks).
    pub(super) fn submit(&self, job: Box<dyn WriteJob>) {
        let shared = &self.shared;
        shared.queued.fetch_add(1, Ordering::SeqCst);
        let sent = match &self.queue {
            Some(queue) => queue
                .send((Instant::now(), job))
                .map_err(|unsent| unsent.0.1),
            None => Err(job),
        };
        if let Err(job) = sent {
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            job.finish(Err(Error::Task(
                "the sqlite writer thread has stopped".into(),
            )));
        }
    }

    /// Jobs waiting for the writer thread.
    pub(super) fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::SeqCst)
    }

    /// The writer thread's totals: jobs, their wait in the queue, time committing and time
    /// busy. The writer thread is the one stage every write passes through: its busy time
    /// over wall time is how close the node's writes are to what one thread commits.
    pub(super) fn figures(&self) -> [Figure; 4] {
        let t = &self.shared.timings;
        let seconds = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        [
            Figure::counter(
                "engram_sqlite_writer_jobs_total",
                "Write transactions the group-commit writer thread took from its queue",
                t.jobs.load(Ordering::Relaxed) as f64,
            ),
            Figure::counter(
                "engram_sqlite_writer_wait_seconds_total",
                "Time write transactions waited in the writer thread's queue, summed",
                seconds(&t.waited),
            ),
            Figure::counter(
                "engram_sqlite_commit_seconds_total",
                "Time the writer thread spent in COMMIT (the WAL written and fsynced)",
                seconds(&t.committing),
            ),
            Figure::counter(
                "engram_sqlite_writer_busy_seconds_total",
                "Time the writer thread spent on batches, from taking the first job to the commit",
                seconds(&t.busy),
            ),
        ]
    }

    /// Whether the writer thread is running a batch (or waiting for the connection to).
    #[cfg(test)]
    pub(super) fn busy(&self) -> bool {
        self.shared.busy.load(Ordering::SeqCst)
    }
}

impl Drop for GroupWriter {
    fn drop(&mut self) {
        // The thread ends once it has drained the queue.
        self.queue.take();
        let Some(thread) = self.thread.take() else {
            return;
        };
        // The engine's last handle may be dropped by a job on the writer thread itself (a job
        // whose caller has gone held it); that thread then ends on its own.
        if thread.thread().id() != std::thread::current().id() && thread.join().is_err() {
            tracing::error!("the sqlite writer thread panicked");
        }
    }
}

/// The writer thread.
struct Writer {
    shared: Arc<Shared>,
    jobs: mpsc::Receiver<Queued>,
}

impl Writer {
    fn run(&self) {
        let shared = &self.shared;
        while let Ok((queued, first)) = self.jobs.recv() {
            // Busy before the queue looks empty, so that no observer takes it for idle.
            shared.busy.store(true, Ordering::SeqCst);
            let started = Instant::now();
            shared.took(queued);
            let conn = Rc::new(shared.conn.lock_arc());
            let mut ran = Vec::new();
            let outcome = shared.batch(&conn, first, &mut || self.next(), &mut ran);
            // Unlock before answering: the next batch, or a direct writer, may start while
            // the callers wake up.
            drop(conn);
            add_since(&shared.timings.busy, started);
            shared.answer(ran, outcome);
            shared.busy.store(false, Ordering::SeqCst);
        }
    }

    /// The next queued job, if any.
    fn next(&self) -> Option<Box<dyn WriteJob>> {
        let (queued, job) = self.jobs.try_recv().ok()?;
        self.shared.took(queued);
        Some(job)
    }
}

impl Shared {
    /// Counts a job queued at `queued` out of the queue.
    fn took(&self, queued: Instant) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
        self.timings.jobs.fetch_add(1, Ordering::Relaxed);
        add_since(&self.timings.waited, queued);
    }

    /// Runs `first` and the jobs that `more` gives, within the bounds, in one transaction and
    /// commits it. `ran` receives every job taken, with its own outcome; the result is the
    /// commit's.
    fn batch(
        &self,
        conn: &Rc<WriterGuard>,
        first: Box<dyn WriteJob>,
        more: &mut dyn FnMut() -> Option<Box<dyn WriteJob>>,
        ran: &mut Vec<Ran>,
    ) -> Result<()> {
        if let Err(err) = exec(conn, "BEGIN IMMEDIATE") {
            // Another process holds the lock past the busy timeout, or the file is unusable:
            // the queued jobs would wait as long, so they all fail now and back off.
            ran.push((first, Ok(())));
            while ran.len() < self.bounds.max_jobs
                && let Some(job) = more()
            {
                ran.push((job, Ok(())));
            }
            return Err(err);
        }
        let mut bytes = 0;
        let mut job = first;
        loop {
            let (own, fatal) = run_one(conn, job.as_mut());
            if let Ok(written) = &own {
                bytes += written;
            }
            ran.push((job, own.map(drop)));
            if let Some(err) = fatal {
                rollback(conn);
                return Err(err);
            }
            if ran.len() >= self.bounds.max_jobs || bytes >= self.bounds.max_bytes {
                break;
            }
            match more() {
                Some(next) => job = next,
                None => break,
            }
        }
        if ran.iter().all(|(_, own)| own.is_err()) {
            // Nothing to make durable.
            rollback(conn);
            return Ok(());
        }
        let committing = Instant::now();
        let committed = exec(conn, "COMMIT").inspect_err(|_| rollback(conn));
        add_since(&self.timings.committing, committing);
        committed
    }

    /// Finishes every job of a batch: with the commit if both it and the job succeeded.
    fn answer(&self, ran: Vec<Ran>, outcome: Result<()>) {
        let jobs = ran.iter().filter(|(_, own)| own.is_ok()).count();
        let failed = outcome.err();
        let seq = match &failed {
            // Busy (another process holds the lock) is expected, and retried by the store.
            Some(err) if err.is_retryable() => {
                tracing::debug!(jobs = ran.len(), error = %err, "group commit failed");
                0
            }
            Some(err) => {
                tracing::warn!(jobs = ran.len(), error = %err, "group commit failed");
                0
            }
            None if jobs > 0 => self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            None => 0,
        };
        let commit = SharedCommit { seq, jobs };
        for (job, own) in ran {
            let result = match (own, &failed) {
                (Err(err), _) => Err(err),
                (Ok(()), Some(err)) => Err(copy_of(err)),
                (Ok(()), None) => Ok(commit),
            };
            job.finish(result);
        }
    }
}

/// Runs one job in its own savepoint. Returns the job's outcome (bytes written) and, if the
/// shared transaction is lost, the error that ends the batch.
fn run_one(conn: &Rc<WriterGuard>, job: &mut dyn WriteJob) -> (Result<usize>, Option<Error>) {
    if let Err(err) = exec(conn, "SAVEPOINT job") {
        return (Err(copy_of(&err)), Some(err));
    }
    let txn = Box::new(SqliteTxn::new(Conn::Shared(Rc::clone(conn))));
    let outcome = catch_unwind(AssertUnwindSafe(|| job.run(txn))).unwrap_or_else(|panic| {
        Err(Error::Task(format!(
            "a write transaction panicked: {}",
            panic_message(panic.as_ref())
        )))
    });
    if conn.is_autocommit() {
        // SQLite rolled the whole transaction back, as it may after an I/O error, a full disk
        // or running out of memory: the jobs before this one are lost too.
        let fatal = match &outcome {
            Err(err) => copy_of(err),
            Ok(_) => Error::Task("the shared transaction ended inside a job".into()),
        };
        let own = outcome.and_then(|_| Err(copy_of(&fatal)));
        return (own, Some(fatal));
    }
    match outcome {
        Ok(written) => match exec(conn, "RELEASE job") {
            Ok(()) => (Ok(written), None),
            Err(err) => (Err(copy_of(&err)), Some(err)),
        },
        Err(err) => match exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job")) {
            Ok(()) => (Err(err), None),
            Err(fatal) => (Err(err), Some(fatal)),
        },
    }
}

/// Ends the open transaction, if SQLite has not already.
fn rollback(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(err) = conn.execute_batch("ROLLBACK")
    {
        tracing::warn!(error = %err, "sqlite rollback failed");
    }
}

/// A copy of `err` for another job of the same batch (errors are not `Clone`): the same
/// retryable variant, the same full or failing disk, the same SQLite failure, or a storage
/// task error naming it.
fn copy_of(err: &Error) -> Error {
    if let Error::Sqlite(rusqlite::Error::SqliteFailure(code, message)) = err {
        return Error::Sqlite(rusqlite::Error::SqliteFailure(*code, message.clone()));
    }
    if matches!(err, Error::Busy) {
        return Error::Busy;
    }
    if matches!(err, Error::Conflict) {
        return Error::Conflict;
    }
    if let Error::Full(why) = err {
        return Error::Full(why.clone());
    }
    if let Error::Io(why) = err {
        return Error::Io(why.clone());
    }
    Error::Task(format!("the shared transaction failed: {err}"))
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::tests::{file_store, occupy_writer, spawn_queued};
    use crate::kv::Engine;

    /// The writer thread's figures count each job it takes; a job queued behind a held batch
    /// counts at least the time it was held as its wait, and the thread as busy; the commit
    /// is timed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_threads_figures_count_its_jobs_their_wait_and_its_busy_time() {
        let (engine, store, _path, _dir) = file_store();
        let (blocker, release) = occupy_writer(&engine, &store);
        let queued = spawn_queued(&engine, &store, |txn| txn.set(b"k", b"v"));
        let queued_by = Instant::now();
        while queued_by.elapsed().is_zero() {
            std::hint::spin_loop();
        }
        let held = queued_by.elapsed().as_secs_f64();
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        queued.await.unwrap().unwrap();
        let figures = engine.figures();
        let figure = |name: &str| figures.iter().find(|f| f.name == name).unwrap().value;
        assert_eq!(figure("engram_sqlite_writer_jobs_total"), 2.0);
        assert!(figure("engram_sqlite_writer_wait_seconds_total") >= held);
        assert!(figure("engram_sqlite_writer_busy_seconds_total") >= held);
        assert!(figure("engram_sqlite_commit_seconds_total") > 0.0);
    }
}
