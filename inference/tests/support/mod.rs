//! What the pool and generation tests share: this process's threads as `/proc` shows them
//! (name, scheduling policy, time waited for a CPU), waiting for a condition, and keeping
//! every core busy until a thread has waited for one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};

/// Linux's `SCHED_IDLE`, as `/proc` reports a thread's policy.
pub const SCHED_IDLE: u32 = 5;

/// Waits until `check` holds, or fails after `limit`.
pub async fn wait_for(limit: Duration, what: &str, check: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !check() {
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// This process's threads named `name`, each with its scheduling policy (field 41 of its
/// `stat`, counted after the parenthesised name).
pub fn threads_named(name: &str) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let policy = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(38)?.parse().ok());
        if let (true, Some(policy)) = (comm.trim() == name, policy) {
            found.push((entry.file_name().to_string_lossy().into_owned(), policy));
        }
    }
    found
}

/// Waits until a thread named `name` is in the idle class (a lane puts itself there as it
/// starts), or fails after a minute.
pub async fn wait_until_idle_class(name: &str) -> Result<()> {
    wait_for(
        Duration::from_secs(60),
        &format!("{name} in the idle class"),
        || {
            threads_named(name)
                .iter()
                .any(|(_, policy)| *policy == SCHED_IDLE)
        },
    )
    .await
}

/// How long the threads named `name` have waited in a run queue for a CPU, summed (the second
/// field of each one's `schedstat`).
fn run_queue_wait(name: &str) -> Duration {
    threads_named(name)
        .iter()
        .filter_map(|(tid, _)| {
            let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
            text.split_whitespace().nth(1)?.parse().ok()
        })
        .map(Duration::from_nanos)
        .sum()
}

/// Normal-priority busy loops on every core, for as long as the threads named `name` take to
/// wait a given time for a CPU (an idle-class thread with work waits all along).
pub struct BusyCores {
    name: String,
    waited_before: Duration,
    busy: Arc<AtomicBool>,
    spinners: Vec<JoinHandle<()>>,
}

impl BusyCores {
    /// Starts the loops.
    pub fn start(name: &str) -> BusyCores {
        let busy = Arc::new(AtomicBool::new(true));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let spinners = (0..cores)
            .map(|_| {
                let busy = Arc::clone(&busy);
                std::thread::spawn(move || {
                    while busy.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyCores {
            name: name.to_owned(),
            waited_before: run_queue_wait(name),
            busy,
            spinners,
        }
    }

    /// Stops the loops once the threads named as at the start have waited `waited` for a CPU
    /// since then (or after five minutes, an error: a thread that rests up to 30 s after each
    /// unit of work on a busy machine waits for a CPU only while it works).
    pub async fn until_waited(self, waited: Duration) -> Result<()> {
        let (name, before) = (self.name.clone(), self.waited_before);
        let result = wait_for(
            Duration::from_secs(300),
            &format!("{name} to wait {waited:?} for a CPU"),
            || run_queue_wait(&name) >= before + waited,
        )
        .await;
        drop(self);
        result
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Relaxed);
        for spinner in self.spinners.drain(..) {
            let _ = spinner.join();
        }
    }
}
