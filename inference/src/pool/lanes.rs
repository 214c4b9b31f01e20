//! The threads a worker's forward passes run on: one for batches someone waits for, at the
//! process's normal priority, and one for background-only batches, in Linux's `SCHED_IDLE`
//! class when [`BackgroundPriority::Idle`] (the default), so that the pipeline's embeddings
//! take only CPU time that requests leave unused and never slow the writes they follow.
//!
//! The encoder moves to the thread of each batch and back (one batch at a time, so it is never
//! shared). libtorch's intra-op threads are created by the thread that first runs a parallel
//! operator and inherit its scheduling class, so each lane has its own, of its own class.
//!
//! A lane's thread ends once its lane is dropped and its last job has returned. Every lane of
//! a pool registers its thread in the pool's [`Threads`], which a stopping pool joins: a
//! process must not exit while one of these threads is inside libtorch, since `exit` runs
//! libtorch's static destructors under it (a segmentation fault at the end of a clean stop).

use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

/// The scheduling class of background-only batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackgroundPriority {
    /// `SCHED_IDLE` on Linux (run only when the CPU is otherwise idle); normal elsewhere.
    #[default]
    Idle,
    /// The process's normal priority, like interactive batches.
    Normal,
}

type Job = Box<dyn FnOnce() + Send>;

/// The threads a pool started, to join when it stops.
#[derive(Clone, Default)]
pub(crate) struct Threads(Arc<Mutex<Vec<JoinHandle<()>>>>);

impl Threads {
    pub(crate) fn push(&self, thread: JoinHandle<()>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(thread);
    }

    /// Waits, off the async threads, until every thread registered so far has ended.
    pub(crate) async fn join(&self) {
        let threads: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        if threads.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                // A thread that panicked has ended too.
                let _ = thread.join();
            }
        })
        .await;
    }
}

/// One thread that runs jobs in order.
pub(crate) struct Lane {
    jobs: mpsc::Sender<Job>,
}

impl Lane {
    /// Starts a thread named `name`, in the idle class when `idle` (it logs, and runs at normal
    /// priority, where the class cannot be set), its libtorch operators on `intra_op_threads`
    /// threads (`None`: libtorch's default), registered in `threads`.
    pub(crate) fn start(
        name: String,
        idle: bool,
        intra_op_threads: Option<usize>,
        threads: &Threads,
    ) -> std::io::Result<Lane> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            if idle {
                lower_priority();
            }
            if let Some(n) = intra_op_threads {
                // The setting is the calling thread's own (OpenMP's), so each lane sets its own.
                tch::set_num_threads(i32::try_from(n.max(1)).unwrap_or(1));
            }
            for job in queue {
                job();
            }
        })?;
        threads.push(thread);
        Ok(Lane { jobs })
    }

    /// Runs `f` on the lane's thread; `None` when the thread is gone (a job panicked).
    pub(crate) async fn run<T, F>(&self, f: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .ok()?;
        rx.await.ok()
    }
}

#[cfg(target_os = "linux")]
pub(crate) fn lower_priority() {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    if let Err(err) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle)
    {
        tracing::warn!(error = ?err, "background inference runs at normal priority: SCHED_IDLE refused");
    }
}

/// Moves every thread of this process that is in the idle class back to the normal class at
/// nice 0, and returns how many it moved. A node calls it when it has stopped: a background
/// forward pass still running in the idle class gets almost no CPU on a busy machine, and
/// the last thread of a process to exit frees its memory, so the exit itself would crawl.
/// Leaving the idle class takes `CAP_SYS_NICE` (or a `RLIMIT_NICE` that allows nice 0);
/// without it the threads stay where they are and the error says so.
#[cfg(target_os = "linux")]
// The scheduling calls by thread id have no safe wrapper in the crates at hand.
#[allow(unsafe_code)]
pub fn leave_idle_class() -> std::io::Result<usize> {
    let mut moved = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Ok(tid) = entry?.file_name().to_string_lossy().parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: a query by thread id; a thread that has exited meanwhile gives an error.
        if unsafe { libc::sched_getscheduler(tid) } != libc::SCHED_IDLE {
            continue;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` lives across the call, which only reads it.
        let set = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
        // SAFETY: plain integer arguments.
        if set != 0 || unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        moved += 1;
    }
    Ok(moved)
}

/// Ends the process with `code` at once, without running `atexit` handlers or static
/// destructors (libtorch's among them), after flushing standard output and error. For a
/// process whose inference threads may still be inside libtorch: a normal exit would destroy
/// libtorch's globals under them. Everything durable must be closed before.
// `_exit` has no safe wrapper in the standard library.
#[allow(unsafe_code)]
pub fn exit_without_teardown(code: i32) -> ! {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` takes a plain integer and never returns; it skips only user-space
    // teardown, which is what is wanted here.
    unsafe { libc::_exit(code) }
}

/// Nothing runs in an idle class on this platform.
#[cfg(not(target_os = "linux"))]
pub fn leave_idle_class() -> std::io::Result<usize> {
    Ok(0)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn lower_priority() {
    tracing::info!("background inference runs at normal priority on this platform");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lane_runs_jobs_in_order_on_its_thread_and_reports_a_dead_thread() {
        let threads = Threads::default();
        let lane = Lane::start("lane-test".into(), true, None, &threads).unwrap();
        let name = lane
            .run(|| std::thread::current().name().map(str::to_owned))
            .await;
        assert_eq!(name, Some(Some("lane-test".to_owned())));
        #[cfg(target_os = "linux")]
        {
            let policy = lane.run(thread_priority::thread_schedule_policy).await;
            assert_eq!(
                policy.map(|p| p.ok()),
                Some(Some(thread_priority::ThreadSchedulePolicy::Normal(
                    thread_priority::NormalThreadSchedulePolicy::Idle
                ))),
                "the background lane runs in the idle class"
            );
        }
        let panicked = lane.run(|| -> u8 { panic!("a failed forward pass") }).await;
        assert_eq!(panicked, None);
        assert_eq!(lane.run(|| 1).await, None, "the lane is gone");
        threads.join().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn joining_waits_for_a_dropped_lanes_running_job() {
        let threads = Threads::default();
        let lane = Lane::start("lane-join".into(), false, None, &threads).unwrap();
        let (started_tx, started) = std::sync::mpsc::channel();
        let (finish, finish_rx) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let job = tokio::spawn(async move {
            lane.run(move || {
                started_tx.send(()).unwrap();
                finish_rx.recv().unwrap();
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            })
            .await
        });
        started.recv().unwrap();
        // The lane goes with its task while its job still runs, as when a worker is killed.
        job.abort();
        let _ = job.await;
        let joined = tokio::spawn({
            let threads = threads.clone();
            async move { threads.join().await }
        });
        tokio::task::yield_now().await;
        assert!(!joined.is_finished(), "joined while the job was running");
        finish.send(()).unwrap();
        joined.await.unwrap();
        assert!(
            done.load(std::sync::atomic::Ordering::SeqCst),
            "the job ran to its end before the join returned"
        );
    }
}
