//! The disk and clock faults of the random schedule (see the header of `fault_schedule.rs`):
//! the store on a tmpfs the test mounts, filled with a ballast file; each node's fsyncs
//! switched with libfiu (`fiu-run`, `fiu-ctrl`); each node's wall-clock offset in a file
//! libfaketime reads again at every call; and the check, through the heartbeat ages of
//! `/v1/cluster/status`, that a clock jump takes effect on a running node. Without libfaketime,
//! libfiu or root (to mount the tmpfs) the test fails with the reason.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use engram_tests::chaos::status;
use engram_tests::harness::{HttpClient, Node, Sandbox, node_binary};
use engram_tests::lab_cluster::ms;
use engram_tests::netns::{Lab, run};

/// Where Debian's `faketime` package puts the preloaded library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// The size of the tmpfs the random schedule's store lives on, MiB: room for the store and its
/// WAL (a few MiB) and its reserve (16 MiB); a full disk fills the rest with a ballast file.
pub const STORE_MIB: u32 = 256;
/// The margin of clock skew between any two nodes, ms: S = min(lease timeout,
/// suspect-confirm) / 2 (docs/cluster.md, "Clock skew").
pub const MARGIN_MS: i32 = 500;

/// Sends a libfiu control command to process `pid`, started under `fiu-run -x` with its
/// control pipes named `pipes`-PID. `fiu-ctrl` exits 0 even when it finds no control pipe of
/// `pid` or the process refuses the command, saying so on stderr only: anything on stderr is a
/// failure here.
fn fiu(pipes: &Path, pid: u32, command: &str) {
    let out = Command::new("fiu-ctrl")
        .arg("-f")
        .arg(pipes)
        .args(["-c", command, &pid.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("fiu-ctrl cannot run here ({e}): .ci/setup installs fiu-utils"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "fiu-ctrl -c {command:?} {pid}: {} {stderr}",
        out.status
    );
}

/// The files whose names start with `shared.sqlite-` (the WAL and its index) that this
/// process has open while it has the sandbox's shared store open by its path.
pub fn wal_files_open_through(sandbox: &Sandbox) -> Vec<PathBuf> {
    tokio::task::block_in_place(|| {
        let store = engram_storage::Store::sqlite(
            &sandbox.shared_sqlite(),
            engram_storage::sqlite::SqliteOptions::default(),
        )
        .unwrap();
        let open = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|file| file.to_string_lossy().contains("shared.sqlite-"))
            .collect();
        drop(store);
        open
    })
}

/// The disk and clock faults of the random schedule, and which of them are in force: the
/// store on a tmpfs the test mounts, filled with a ballast file; each node's wall-clock offset
/// in a file libfaketime reads again at every call; each node's fsyncs switched with libfiu.
/// The tmpfs is unmounted on drop.
pub struct DiskAndClocks {
    /// The tmpfs.
    pub mount: PathBuf,
    /// What the nodes' libfiu control pipes are named, the pid appended: in the sandbox, so
    /// that they go with it (a killed process leaves them behind).
    pipes: PathBuf,
    /// Each node's clock file (libfaketime's `FAKETIME_TIMESTAMP_FILE`).
    clocks: Vec<PathBuf>,
    /// Each node's wall-clock offset now, ms.
    offsets: Vec<i32>,
    /// Nodes whose fsyncs fail now.
    failing: BTreeSet<usize>,
    /// The ballast's size in bytes, while the disk is full.
    ballast: Option<u64>,
}

impl DiskAndClocks {
    /// Mounts the tmpfs in the sandbox, links the sandbox's shared SQLite file to the store on
    /// it, and sets the clocks of `nodes` nodes to +0.
    ///
    /// The nodes open the store by its path on the tmpfs, so that its reserve (a file beside
    /// the path named) is there too. The link is for what opens the shared file by the
    /// sandbox's path, this test's pause and its checks of the store: SQLite resolves links and
    /// keeps the WAL and its index beside the file linked to, with the nodes'.
    pub fn set_up(sandbox: &Sandbox, nodes: usize) -> DiskAndClocks {
        assert!(
            Path::new(LIBFAKETIME).is_file(),
            "{LIBFAKETIME} is missing: the random schedule jumps nodes' wall clocks with \
             libfaketime; install the Debian package faketime (.ci/setup does)"
        );
        run("fiu-run", &["-n", "true"]).unwrap_or_else(|why| {
            panic!(
                "the random schedule fails nodes' fsyncs with libfiu, whose fiu-run cannot run \
                 here ({why}): install fiu-utils (.ci/setup does)"
            )
        });
        let mount = sandbox.path().join("store");
        std::fs::create_dir_all(&mount).unwrap();
        let size = format!("size={STORE_MIB}m");
        let at = mount.to_string_lossy();
        run("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", &at]).unwrap_or_else(|why| {
            panic!("the random schedule keeps its store on a tmpfs it mounts (root only): {why}")
        });
        let mut faults = DiskAndClocks {
            clocks: (0..nodes)
                .map(|i| sandbox.path().join(format!("clock-{i}")))
                .collect(),
            offsets: vec![0; nodes],
            failing: BTreeSet::new(),
            ballast: None,
            mount,
            pipes: sandbox.path().join("fiu-ctrl"),
        };
        std::os::unix::fs::symlink(faults.store(), sandbox.shared_sqlite()).unwrap();
        for i in 0..nodes {
            faults.jump(i, 0);
        }
        faults
    }

    /// The store's file, on the tmpfs.
    pub fn store(&self) -> PathBuf {
        self.mount.join("shared.sqlite")
    }

    /// The command prefix that starts the lab's node `i`: in its namespace, under libfiu's
    /// POSIX preload (`fiu-run -x`) and under libfaketime, which reads the node's clock file at
    /// every call (`FAKETIME_NO_CACHE`) and leaves its monotonic clock real. `fiu-run` sets
    /// `LD_PRELOAD` to libfiu's libraries; a shell adds libfaketime and execs the node.
    pub fn wrapper(&self, lab: &Lab, i: usize) -> Vec<String> {
        let mut wrapper = lab.exec(i);
        wrapper.extend([
            "fiu-run".to_owned(),
            "-x".to_owned(),
            "-f".to_owned(),
            self.pipes.display().to_string(),
            "env".to_owned(),
            format!("FAKETIME_TIMESTAMP_FILE={}", self.clocks[i].display()),
            "FAKETIME_NO_CACHE=1".to_owned(),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".to_owned(),
            "sh".to_owned(),
            "-c".to_owned(),
            format!("LD_PRELOAD=\"$LD_PRELOAD {LIBFAKETIME}\" exec \"$@\""),
            "sh".to_owned(),
        ]);
        wrapper
    }

    /// Checks that `node`'s process id is the node's own, at the end of the chain of programs
    /// it is started under (`ip netns exec`, `fiu-run`, `env` and `sh` each exec the next), and
    /// that libfiu's control pipe of that process answers.
    pub fn check_started(&self, node: &Node) {
        let pid = node.pid().expect("a node just started runs");
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let binary =
            node_binary().and_then(|b| std::fs::canonicalize(b).map_err(|e| e.to_string()));
        assert_eq!(
            Ok(exe),
            binary,
            "process {pid} of node {} is not the node itself",
            node.spec().id()
        );
        // A failure point nothing checks, enabled and disabled again: the pipe answers both.
        fiu(&self.pipes, pid, "enable name=engram/tests/probe");
        fiu(&self.pipes, pid, "disable name=engram/tests/probe");
    }

    /// Sets node `i`'s wall clock `ms` off the machine's, through a file renamed over its clock
    /// file (no read sees half of one). No two clocks may end up [`MARGIN_MS`] apart.
    pub fn jump(&mut self, i: usize, ms: i32) {
        let next = self.clocks[i].with_extension("next");
        std::fs::write(&next, format!("{:+}\n", f64::from(ms) / 1000.0)).unwrap();
        std::fs::rename(&next, &self.clocks[i]).unwrap();
        self.offsets[i] = ms;
        let (least, most) = (self.offsets.iter().min(), self.offsets.iter().max());
        let apart = most.zip(least).map_or(0, |(most, least)| most - least);
        assert!(
            apart < MARGIN_MS,
            "clocks {apart} ms apart: {:?}",
            self.offsets
        );
    }

    /// Fails (`fail`) or restores every fsync and fdatasync of node `i`, process `pid`.
    pub fn fsyncs(&mut self, i: usize, pid: u32, fail: bool) {
        let verb = if fail { "enable" } else { "disable" };
        for call in ["fdatasync", "fsync"] {
            fiu(
                &self.pipes,
                pid,
                &format!("{verb} name=posix/io/sync/{call}"),
            );
        }
        if fail {
            self.failing.insert(i);
        } else {
            self.failing.remove(&i);
        }
    }

    /// Bytes free on the tmpfs (`stat -f`: free blocks times their size).
    fn free(&self) -> u64 {
        let out = Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(&self.mount)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let figures: Vec<u64> = text
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        assert_eq!(figures.len(), 2, "stat -f of the tmpfs printed {text:?}");
        figures[0] * figures[1]
    }

    /// Fills the tmpfs with a ballast file: all but a MiB of the free room allocated at once
    /// (`fallocate`; writing 200 MiB takes seconds on a busy 2-core machine, and where the
    /// nodes took room meanwhile it fails and allocates nothing), then written until the
    /// filesystem has no room left (ENOSPC). Returns the ballast's size in bytes.
    pub fn fill(&mut self) -> u64 {
        let path = self.mount.join("ballast");
        let most = self.free().saturating_sub(1 << 20).to_string();
        let _ = run("fallocate", &["-l", &most, &path.to_string_lossy()]);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let block = vec![0x5a_u8; 1 << 16];
        tokio::task::block_in_place(|| {
            loop {
                match file.write(&block) {
                    Ok(n) if n > 0 => {}
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    other => panic!("writing the ballast: {other:?}"),
                }
            }
        });
        let size = file.metadata().unwrap().len();
        self.ballast = Some(size);
        size
    }

    /// Deletes the ballast: the room is back.
    pub fn empty(&mut self) {
        std::fs::remove_file(self.mount.join("ballast")).unwrap();
        self.ballast = None;
    }

    /// The files on the tmpfs (the store, its WAL and index, its reserve, the ballast if any)
    /// with their sizes in KiB, in words.
    pub fn store_files(&self) -> String {
        let mut files: Vec<String> = std::fs::read_dir(&self.mount)
            .unwrap()
            .flatten()
            .filter_map(|f| Some((f.file_name(), f.metadata().ok()?.len())))
            .map(|(name, len)| format!("{} {} KiB", name.to_string_lossy(), len >> 10))
            .collect();
        files.sort();
        files.join(", ")
    }

    /// What is faulty of the disk and the clocks now, in words (for the log).
    pub fn in_force(&self, ids: &[&str]) -> String {
        let mut all: Vec<String> = self
            .failing
            .iter()
            .map(|&i| format!("{} fsyncs failing", ids[i]))
            .collect();
        for (i, offset) in self.offsets.iter().enumerate() {
            if *offset != 0 {
                all.push(format!("{} clock {offset:+} ms", ids[i]));
            }
        }
        if let Some(size) = self.ballast {
            all.push(format!("disk full ({} MiB of ballast)", size >> 20));
        }
        if all.is_empty() {
            "none".to_owned()
        } else {
            all.join(", ")
        }
    }

    /// Removes whatever is still in force: deletes the ballast, makes every failing node's
    /// fsyncs work, sets every clock to +0.
    pub fn restore(&mut self, nodes: &[Node]) {
        if self.ballast.is_some() {
            self.empty();
        }
        for i in self.failing.clone() {
            let pid = nodes[i].pid().expect("a node whose fsyncs fail runs");
            self.fsyncs(i, pid, false);
        }
        for i in 0..self.offsets.len() {
            self.jump(i, 0);
        }
    }
}

impl Drop for DiskAndClocks {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", &self.mount.to_string_lossy()]);
    }
}

/// Bounds (ms) on how far `node`'s wall clock is ahead of `reference`'s, from the heartbeat
/// ages each reports of the other now. An age is the reporter's clock minus the other's last
/// stamp, read after it was made, so `-age(of node, by reference) <= offset` (the node's
/// offset when it stamped) and `offset <= age(of reference, by node)` (its offset now).
async fn offset_bounds(
    node: (&str, &HttpClient),
    reference: (&str, &HttpClient),
) -> Option<(i64, i64)> {
    let age = |view: &serde_json::Value, member: &str| -> Option<i64> {
        view["members"]
            .as_array()?
            .iter()
            .find(|m| m["node_id"] == member)?["heartbeat_age_ms"]
            .as_i64()
    };
    let of_node = age(&status(reference.1).await?, node.0)?;
    let of_reference = age(&status(node.1).await?, reference.0)?;
    Some((-of_node, of_reference))
}

/// What a clock jump showed: how long after it the heartbeat ages showed it, and the bounds
/// on the offset they gave afterwards (ms).
pub struct Shown {
    pub after: Duration,
    pub at_least: i64,
    pub at_most: i64,
}

/// Jumps node `i`'s clock to `to` ms and samples the heartbeat ages it and `reference` (at
/// +0) report of each other until they show the jump: the bound on the jump's side past the
/// midpoint between the offsets before and after, which the clock before the jump cannot
/// show (the bounds hold the true offset). Then bounds the new offset with 20 samples of
/// stamps made after the jump (three heartbeats later), so that both are tight.
pub async fn jump_shows(
    faults: &mut DiskAndClocks,
    (i, node): (usize, (&str, &HttpClient)),
    reference: (&str, &HttpClient),
    to: i32,
) -> Shown {
    let from = faults.offsets[i];
    let midpoint = i64::from(from + to) / 2;
    let past = |(least, most): (i64, i64)| {
        if to > from {
            least > midpoint
        } else {
            most < midpoint
        }
    };
    faults.jump(i, to);
    let started = Instant::now();
    while !offset_bounds(node, reference).await.is_some_and(past) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a jump of {}'s wall clock from {from:+} to {to:+} ms did not show in its \
             heartbeat ages and {}'s within 10 s",
            node.0,
            reference.0
        );
        tokio::time::sleep(ms(25)).await;
    }
    let after = started.elapsed();
    tokio::time::sleep(ms(750)).await;
    let (mut at_least, mut at_most) = (i64::MIN, i64::MAX);
    for _ in 0..20 {
        if let Some((least, most)) = offset_bounds(node, reference).await {
            at_least = at_least.max(least);
            at_most = at_most.min(most);
        }
        tokio::time::sleep(ms(25)).await;
    }
    Shown {
        after,
        at_least,
        at_most,
    }
}
