//! Starts the real `engram-node run` binary on a temporary SQLite store, stops it with a
//! signal, and checks that it exits 0 and leaves its membership row marked `Left`.
//!
//! Synchronisation is by condition with a deadline: the test waits for the node's own
//! "node started" log line before signalling, and for the process to exit afterwards.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{Member, MemberStatus};
use engram_storage::{Keyspace, Store, cluster};

/// How long a debug build may take to open its store and register.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a clean shutdown may take once signalled.
const STOP_DEADLINE: Duration = Duration::from_secs(20);
const ROOT_PREFIX: &str = "engram-test";

/// A node process whose stderr lines arrive on a channel; killed if the test fails early.
struct NodeProcess {
    child: Child,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl NodeProcess {
    fn start(config: &Path) -> NodeProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_engram-node"));
        command
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .env(
                "ENGRAM_ADMIN_KEY",
                "sigterm-test-admin-key-0123456789abcdef0123",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ENGRAM__") {
                command.env_remove(key);
            }
        }
        let mut child = command.spawn().expect("engram-node starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        NodeProcess {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits until a log line contains `needle`; panics with the log so far at the deadline
    /// or if the process closes its stderr first.
    fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "no {needle:?} within {timeout:?}; log:\n{}",
                        self.log.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "engram-node closed stderr before {needle:?} ({:?}); log:\n{}",
                    self.child.try_wait(),
                    self.log.join("\n")
                ),
            }
        }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed: {status}");
    }

    /// Waits for the process to exit, polling until the deadline.
    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.log.extend(self.lines.try_iter());
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "engram-node still running {timeout:?} after the signal; log:\n{}",
                self.log.join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Writes a configuration for `node_id` with its data under `dir`; returns its path and the
/// SQLite file it names.
fn write_config(dir: &Path, node_id: &str) -> (PathBuf, PathBuf) {
    let data_dir = dir.join("data");
    let cookie = dir.join("cookie");
    write_secret(&cookie, "sigterm-test-cookie-0123456789");
    let config = format!(
        r#"[node]
id = "{node_id}"
data-dir = "{data_dir}"

[http]
listen = "127.0.0.1:0"

[cluster]
listen = "127.0.0.1:0"
cookie-file = "{cookie}"
shards = 64

[distillation]
# Signals, not the generative model (2 GB of weights to load).
model = false

[storage]
root-prefix = "{ROOT_PREFIX}"

[storage.sqlite]
path = "node.sqlite"
"#,
        data_dir = data_dir.display(),
        cookie = cookie.display(),
    );
    let path = dir.join("node.toml");
    std::fs::write(&path, config).expect("config written");
    (path, data_dir.join("node.sqlite"))
}

/// Writes `text` to `path`, readable by its owner only (as the node requires of secrets).
fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("secret written");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

fn read_member(sqlite: &Path, node_id: &str) -> Member {
    let store = Store::sqlite(sqlite, SqliteOptions::default()).expect("store opens");
    let keyspace = Keyspace::new(ROOT_PREFIX);
    store
        .read_blocking(|txn| cluster::member(txn, &keyspace, node_id))
        .expect("member row reads")
        .expect("member row exists")
}

/// Starts a node, stops it with `signal`, and checks the clean exit and the `Left` row.
fn stops_cleanly_on(signal: &str, node_id: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, sqlite) = write_config(dir.path(), node_id);

    let mut node = NodeProcess::start(&config);
    node.wait_for_log("node started", START_DEADLINE);
    let running = read_member(&sqlite, node_id);
    assert_eq!(
        running.status,
        MemberStatus::Active,
        "registered while running"
    );
    assert!(
        running.http_addr.starts_with("127.0.0.1:") && !running.http_addr.ends_with(":0"),
        "the row names the bound address, not port 0: {}",
        running.http_addr
    );

    node.signal(signal);
    let status = node.wait_exit(STOP_DEADLINE);
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        node.log.join("\n")
    );
    assert!(
        node.log.iter().any(|line| line.contains("node stopped")),
        "no \"node stopped\" in the log:\n{}",
        node.log.join("\n")
    );

    let left = read_member(&sqlite, node_id);
    assert_eq!(left.status, MemberStatus::Left);
    assert_eq!(
        left.started_at, running.started_at,
        "the same registration, updated"
    );
    assert!(left.heartbeat_at >= running.heartbeat_at);
}

#[test]
fn sigterm_exits_zero_and_marks_the_member_left() {
    stops_cleanly_on("TERM", "sigterm-node");
}

#[test]
fn ctrl_c_exits_zero_and_marks_the_member_left() {
    stops_cleanly_on("INT", "sigint-node");
}
