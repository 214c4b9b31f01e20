//! Rests of the idle-class threads (the embedding pool's background lanes, the decoder): while
//! the rest of the machine is busy, such a thread rests after each unit of its work for long
//! enough that its work takes at most a share of the time, and a rest ends as soon as the
//! machine is quiet. What it reads: the machine's CPU time (`/proc/stat`) and its own threads'
//! (`schedstat`, intra-op threads included).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::lanes::BackgroundPriority;

/// How long threads have run on a CPU and waited in a run queue for one, as the kernel counts
/// them (`/proc/self/task/<tid>/schedstat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SchedTimes {
    pub(crate) run: Duration,
    pub(crate) wait: Duration,
}

impl SchedTimes {
    /// The calling thread's and those of every other thread of the process with its name,
    /// summed: libtorch's intra-op threads, started by a lane's thread, inherit its name and do
    /// part of each batch. `None` where the kernel does not say.
    pub(crate) fn of_this_threads_name() -> Option<SchedTimes> {
        #[cfg(target_os = "linux")]
        {
            let name = std::fs::read_to_string("/proc/thread-self/comm").ok()?;
            let mut sum = SchedTimes::default();
            for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
                let dir = task.path();
                if std::fs::read_to_string(dir.join("comm")).ok().as_ref() != Some(&name) {
                    continue;
                }
                // A thread that ended meanwhile is left out.
                if let Some(times) = std::fs::read_to_string(dir.join("schedstat"))
                    .ok()
                    .and_then(|text| SchedTimes::parse(&text))
                {
                    sum.run += times.run;
                    sum.wait += times.wait;
                }
            }
            Some(sum)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// `run wait slices`, in nanoseconds.
    fn parse(text: &str) -> Option<SchedTimes> {
        let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
        let run = fields.next()?.ok()?;
        let wait = fields.next()?.ok()?;
        Some(SchedTimes {
            run: Duration::from_nanos(run),
            wait: Duration::from_nanos(wait),
        })
    }

    /// What passed from `earlier` to `self`.
    pub(crate) fn since(self, earlier: SchedTimes) -> SchedTimes {
        SchedTimes {
            run: self.run.saturating_sub(earlier.run),
            wait: self.wait.saturating_sub(earlier.wait),
        }
    }
}

/// The longest rest one background batch owes ([`busy_pause`]): a bound against a misreading,
/// not the usual length (a rest ends as soon as the machine is quiet, [`Rest`]).
pub(crate) const MAX_BUSY_PAUSE: Duration = Duration::from_secs(30);

/// How long a rest sleeps between two looks at the machine ([`Rest`]).
const REST_SLICE: Duration = Duration::from_millis(100);

/// The share of the machine's CPU time that must have been idle over the last
/// [`QUIET_WINDOW`] for a rest to end: the machine has room again.
const QUIET_PERCENT: u64 = 50;

/// How far back a rest looks to tell a quiet machine from a busy one. One slice is too short:
/// a load bound by its round trips and fsyncs leaves the machine idle 40-45% of the time on
/// average, and a tenth of a second of it is often over the quiet line, which ended the rests
/// of a busy machine within a few slices (docs/benchmarks.md, "Rests that look a second back").
const QUIET_WINDOW: Duration = Duration::from_secs(1);

/// The share of the machine's CPU time that threads other than a lane's must have taken during
/// its batch for the lane to rest after it: the machine is serving a load (half a core of two).
/// Lower than the quiet line, so under a moderate load a rest ends within its first second and
/// under a heavy one it runs its course.
const BUSY_PERCENT: u64 = 25;

/// Whether background work of `priority` rests after each batch or step while the machine is
/// busy: in the idle class, on the CPU. Work on a GPU owes no rest: it takes the device, not
/// the CPU time a rest leaves to requests (resting there held the vectors minutes behind the
/// writes under load: docs/benchmarks.md, "On a GPU"). The embedding pool's background worker
/// and the decoder both follow it.
pub(crate) fn rests(priority: BackgroundPriority, on_cpu: bool) -> bool {
    priority == BackgroundPriority::Idle && on_cpu
}

/// How long an idle-class lane rests after a batch that took `wall` on the clock, given what
/// the machine and the lane's threads did meanwhile (`load`, [`Load::since`]), so that while
/// the rest of the machine is busy its batches take at most `share_percent` of the time:
/// nothing when threads other than the lane's took less than [`BUSY_PERCENT`] of the
/// machine's CPU time (it had room), or when the kernel does not say; else `wall * (100 - share) / share`, at most
/// [`MAX_BUSY_PAUSE`].
///
/// The idle class alone does not keep a busy machine's requests from paying for background
/// batches: the batches run in every gap a blocked request thread leaves (an fsync, a network
/// round trip) and take the caches, the memory bandwidth and a hyperthread's sibling with
/// them. Measured: an idle-class matrix-multiply loop beside a write-heavy load cost 13% of
/// its appends, and a latency-bound load leaves a quarter of the machine idle, so a lane's
/// threads seldom wait for a CPU longer than they run (docs/benchmarks.md).
pub(crate) fn busy_pause(wall: Duration, load: Option<Load>, share_percent: u8) -> Duration {
    let share = u32::from(share_percent.clamp(1, 100));
    match load {
        Some(load) if share < 100 && load.others_busy() => {
            (wall * (100 - share) / share).min(MAX_BUSY_PAUSE)
        }
        _ => Duration::ZERO,
    }
}

/// What the machine and a lane's threads did: readings of both, or (from [`Load::since`]) what
/// passed between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    machine: CpuTimes,
    lane: SchedTimes,
}

impl Load {
    /// Now, for the calling thread's lane ([`SchedTimes::of_this_threads_name`]), or `None`
    /// where the kernel does not say.
    pub(crate) fn now() -> Option<Load> {
        Some(Load {
            machine: CpuTimes::now()?,
            lane: SchedTimes::of_this_threads_name()?,
        })
    }

    /// What passed from `earlier` to `self`.
    pub(crate) fn since(self, earlier: Load) -> Load {
        Load {
            machine: CpuTimes {
                idle: self.machine.idle.saturating_sub(earlier.machine.idle),
                total: self.machine.total.saturating_sub(earlier.machine.total),
            },
            lane: self.lane.since(earlier.lane),
        }
    }

    /// Whether threads other than the lane's took at least [`BUSY_PERCENT`] of the machine's
    /// CPU time (the machine's busy time less the lane's run time).
    fn others_busy(self) -> bool {
        let busy = self.machine.total.saturating_sub(self.machine.idle);
        let lane = self.lane.run.as_nanos() * u128::from(ticks_per_second()) / 1_000_000_000;
        let others = u128::from(busy).saturating_sub(lane);
        self.machine.total > 0
            && others * 100 >= u128::from(self.machine.total) * u128::from(BUSY_PERCENT)
    }
}

/// The kernel's clock ticks a second, the unit of `/proc/stat` (`USER_HZ`, 100 where it does
/// not say).
fn ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: sysconf reads a constant of the system; no memory is passed.
            #[allow(unsafe_code)]
            let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
            u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
        }
        #[cfg(not(target_os = "linux"))]
        {
            100
        }
    })
}

/// The machine's CPU time, all CPUs together, as the kernel counts it (the first line of
/// `/proc/stat`, in clock ticks): how much of it was idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    idle: u64,
    total: u64,
}

impl CpuTimes {
    /// Now, or `None` where the kernel does not say.
    pub(crate) fn now() -> Option<CpuTimes> {
        #[cfg(target_os = "linux")]
        {
            let text = std::fs::read_to_string("/proc/stat").ok()?;
            CpuTimes::parse(text.lines().next()?)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// `cpu  user nice system idle iowait irq softirq steal ...`: idle is idle plus iowait
    /// (a CPU waiting for a disk could run a batch), the total is the first eight fields.
    fn parse(line: &str) -> Option<CpuTimes> {
        let mut fields = line.split_ascii_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let ticks: Vec<u64> = fields
            .take(8)
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        let total = ticks.iter().sum();
        Some(CpuTimes {
            idle: *ticks.get(3)? + ticks.get(4).copied().unwrap_or(0),
            total,
        })
    }

    /// Whether at least [`QUIET_PERCENT`] of the CPU time from `earlier` to `self` was idle
    /// (not when no tick passed).
    fn quiet_since(self, earlier: CpuTimes) -> bool {
        let total = self.total.saturating_sub(earlier.total);
        let idle = self.idle.saturating_sub(earlier.idle);
        total > 0 && idle * 100 >= total * QUIET_PERCENT
    }
}

/// A rest a lane owes ([`busy_pause`]), taken in slices of [`REST_SLICE`]: it ends when its
/// time is up, when the pool closes, or as soon as the machine has been quiet over the last
/// [`QUIET_WINDOW`] (at least [`QUIET_PERCENT`] of its CPU time idle), so a machine that has
/// just become quiet waits about a second for the next batch. The encoder's background
/// workers sleep its slices on their async task, the decoder on its thread.
pub(crate) struct Rest {
    started: Instant,
    until: Instant,
    /// The machine's CPU times at each slice of the last [`QUIET_WINDOW`], and the newest one
    /// older than it.
    readings: VecDeque<(Instant, CpuTimes)>,
}

impl Rest {
    pub(crate) fn new(pause: Duration) -> Rest {
        Rest::starting_at(Instant::now(), pause)
    }

    /// A rest of `pause` that started at `started`.
    fn starting_at(started: Instant, pause: Duration) -> Rest {
        Rest {
            started,
            until: started + pause,
            readings: VecDeque::new(),
        }
    }

    /// The next slice to sleep, or `None` once the rest is over.
    pub(crate) fn next_slice(&mut self, closed: bool) -> Option<Duration> {
        self.next_slice_at(Instant::now(), CpuTimes::now(), closed)
    }

    fn next_slice_at(
        &mut self,
        now: Instant,
        cpu: Option<CpuTimes>,
        closed: bool,
    ) -> Option<Duration> {
        let left = self.until.saturating_duration_since(now);
        if closed || left.is_zero() {
            return None;
        }
        if let Some(cpu) = cpu {
            while self
                .readings
                .get(1)
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= QUIET_WINDOW)
            {
                self.readings.pop_front();
            }
            if let Some((at, earlier)) = self.readings.front()
                && now.saturating_duration_since(*at) >= QUIET_WINDOW
                && cpu.quiet_since(*earlier)
            {
                return None;
            }
            self.readings.push_back((now, cpu));
        }
        Some(left.min(REST_SLICE))
    }

    /// How long it has rested so far.
    pub(crate) fn rested(&self) -> Duration {
        self.started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A load in which the machine's CPUs had `total` ticks, `idle` of them idle, and the
    /// lane's threads ran `lane_ms` (100 ticks a second).
    fn load(idle: u64, total: u64, lane_ms: u64) -> Option<Load> {
        Some(Load {
            machine: CpuTimes { idle, total },
            lane: SchedTimes {
                run: Duration::from_millis(lane_ms),
                wait: Duration::ZERO,
            },
        })
    }

    #[test]
    fn a_background_batch_rests_only_while_other_threads_keep_the_machine_busy() {
        assert_eq!(ticks_per_second(), 100, "USER_HZ on Linux");
        let ms = Duration::from_millis;
        // One second on two CPUs (200 ticks). Room: the lane alone used the machine, or others
        // a fifth of it.
        assert_eq!(
            busy_pause(ms(1_000), load(0, 200, 2_000), 10),
            Duration::ZERO
        );
        assert_eq!(busy_pause(ms(1_000), load(160, 200, 0), 10), Duration::ZERO);
        // Others took 20% (the lane 50%): room left, no rest.
        assert_eq!(
            busy_pause(ms(1_000), load(60, 200, 1_000), 10),
            Duration::ZERO
        );
        // Others took a quarter or more: the batch's time is at most the share of batch and
        // rest.
        assert_eq!(busy_pause(ms(1_000), load(60, 200, 900), 10), ms(9_000));
        assert_eq!(busy_pause(ms(1_000), load(60, 200, 400), 10), ms(9_000));
        assert_eq!(busy_pause(ms(100), load(2, 20, 10), 25), ms(300));
        assert_eq!(busy_pause(ms(100), load(2, 20, 10), 50), ms(100));
        // 100% is no limit; a long batch rests at most the bound; no reading, no rest.
        assert_eq!(busy_pause(ms(100), load(2, 20, 10), 100), Duration::ZERO);
        assert_eq!(
            busy_pause(ms(10_000), load(0, 2_000, 0), 10),
            MAX_BUSY_PAUSE
        );
        assert_eq!(busy_pause(ms(100), None, 10), Duration::ZERO);
        // Readings subtract.
        let (a, b) = (load(10, 100, 100).unwrap(), load(30, 300, 600).unwrap());
        assert_eq!(Some(b.since(a)), load(20, 200, 500));
    }

    #[test]
    fn the_machines_idle_time_is_read_from_the_first_line_of_proc_stat() {
        let line = "cpu  100 5 50 800 40 3 2 0 7 0";
        assert_eq!(
            CpuTimes::parse(line),
            Some(CpuTimes {
                idle: 840,
                total: 1_000
            })
        );
        assert_eq!(CpuTimes::parse("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 x 4"), None);
        #[cfg(target_os = "linux")]
        assert!(CpuTimes::now().is_some(), "the kernel says");
    }

    /// Feeds a rest of `pause` one slice after another, each with `idle` of its 20 ticks (two
    /// CPUs, a tenth of a second) idle, and returns how long it rested: until it ended, or
    /// until the slices ran out (`None`).
    fn rested_over(pause: Duration, idle: impl IntoIterator<Item = u64>) -> Option<Duration> {
        let t0 = Instant::now();
        let mut rest = Rest::starting_at(t0, pause);
        let (mut now, mut cpu) = (t0, CpuTimes { idle: 0, total: 0 });
        for slice_idle in std::iter::once(0).chain(idle) {
            cpu.idle += slice_idle;
            cpu.total += if now == t0 { 0 } else { 20 };
            match rest.next_slice_at(now, Some(cpu), false) {
                Some(slice) => now += slice,
                None => return Some(now - t0),
            }
        }
        None
    }

    #[test]
    fn a_rest_ends_when_its_time_is_up_the_pool_closes_or_the_machine_is_quiet_for_a_second() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let rest = |pause| Rest::starting_at(t0, pause);
        // A busy machine (10% idle): slices until the time is up, the last one shorter.
        assert_eq!(rested_over(ms(1_050), [2; 20]), Some(ms(1_050)));
        // A load bound by its round trips: 45% idle on average, a slice in two over the quiet
        // line. The rest runs its course (one quiet slice used to end it).
        assert_eq!(
            rested_over(ms(5_000), [12, 6].into_iter().cycle().take(60)),
            Some(ms(5_000))
        );
        // The load stops after two seconds: the rest ends once the last second is half idle,
        // within a second.
        let ended = rested_over(
            ms(5_000),
            [12, 6]
                .into_iter()
                .cycle()
                .take(20)
                .chain(std::iter::repeat_n(20, 40)),
        )
        .expect("ends");
        assert!(ended > ms(2_000) && ended <= ms(3_000), "{ended:?}");
        // A quiet machine: the rest ends once it has looked a whole second back.
        assert_eq!(rested_over(ms(5_000), [20; 40]), Some(QUIET_WINDOW));
        // The pool closes; the kernel does not say (the rest runs its time).
        assert_eq!(rest(ms(1_000)).next_slice_at(t0, None, true), None);
        let mut unknown = rest(ms(1_000));
        assert!(unknown.next_slice_at(t0, None, false).is_some());
        assert!(unknown.next_slice_at(t0 + ms(100), None, false).is_some());
    }

    /// On a thread of a name of its own: a test thread's name is cut to 15 characters, which
    /// the other tests of this module share, and one of them ending between two readings takes
    /// its times out of the sum. It computes until its run time has grown (or ten seconds
    /// pass): a bound on the clock would also count what the machine's other work, or its
    /// hypervisor, took from the thread.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_threads_run_time_grows_while_it_computes() {
        let (spent, elapsed) = std::thread::Builder::new()
            .name("rest-computes".into())
            .spawn(|| {
                let before = SchedTimes::of_this_threads_name().expect("the kernel counts");
                let started = std::time::Instant::now();
                let mut x = 0u64;
                loop {
                    for _ in 0..100_000 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                    let spent = SchedTimes::of_this_threads_name().unwrap().since(before);
                    if spent.run >= Duration::from_millis(25)
                        || started.elapsed() > Duration::from_secs(10)
                    {
                        break (spent, started.elapsed());
                    }
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(
            spent.run >= Duration::from_millis(25),
            "{spent:?} in {elapsed:?}"
        );
        // Never more than the clock (the kernel's counts move at scheduling events).
        assert!(
            spent.run <= elapsed + Duration::from_millis(10),
            "{spent:?} in {elapsed:?}"
        );
    }

    /// While a thread sleeps, another of its name computes (as libtorch's intra-op threads do
    /// part of a lane's batch): the sleeping thread's reading counts that time.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_run_time_of_a_threads_name_counts_the_threads_that_inherit_it() {
        let spent = std::thread::Builder::new()
            .name("lanes-twins".into())
            .spawn(|| {
                let before = SchedTimes::of_this_threads_name().expect("the kernel says");
                // The twin stays alive until read, as intra-op threads do (an ended thread
                // leaves `/proc`).
                let (done, computed) = mpsc::channel();
                let (read, leave) = mpsc::channel::<()>();
                let twin = std::thread::spawn(move || {
                    let started = std::time::Instant::now();
                    let mut x = 0u64;
                    while started.elapsed() < Duration::from_millis(60) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                    done.send(()).unwrap();
                    let _ = leave.recv();
                });
                computed.recv().unwrap();
                let spent = SchedTimes::of_this_threads_name().unwrap().since(before);
                drop(read);
                twin.join().unwrap();
                spent
            })
            .unwrap()
            .join()
            .unwrap();
        // Well under the twin's 60 ms on the clock, well over what the sleeper itself ran.
        assert!(spent.run >= Duration::from_millis(10), "{spent:?}");
    }
}
