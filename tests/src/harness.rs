//! The harness that starts real `engram-node` processes for the integration, cluster and
//! chaos suites (Quickwit's `ClusterSandbox`, TiKV's `must_*` helpers).
//!
//! - [`Sandbox`]: a temporary directory that outlives every node started in it. Each node
//!   gets its own data directory and configuration file there, and either its own SQLite
//!   file ([`Sandbox::node`]) or the sandbox's shared one ([`Sandbox::shared_node`]: several
//!   processes on one file, as the local cluster runs).
//! - [`NodeSpec`]: what to start; any `cluster.toml` key can be set ([`NodeSpec::set`]).
//!   Every node of a sandbox shares the sandbox's cookie file (mode 0600, random);
//!   [`NodeSpec::https`] and [`NodeSpec::cluster_tls`] turn on TLS with the test's own files,
//!   and the node's clients then speak HTTPS trusting the test's CA.
//! - [`Node`]: a running process. Starting waits for the node's own "node started" log line
//!   (which names the bound `http=` address, since nodes listen on port 0) and then for
//!   `/ready` to answer 200, each with a deadline; nothing waits by sleeping. [`Node::kill`]
//!   sends SIGKILL, [`Node::terminate`] SIGTERM; [`Node::restart`] starts the same spec
//!   again, on the same data and, when it is still free, the same port. Dropping a node kills
//!   its process, and a node dropped while a test panics prints its log.
//!
//! Not here: anything about the product's semantics. Suites assert those; the harness only
//! starts, stops and talks to processes. A test process that is itself killed with SIGKILL
//! cannot kill its nodes (that would take `PR_SET_PDEATHSIG`, hence unsafe code): they keep
//! running, on loopback only, until someone stops them.

mod binary;
mod client;
mod connector;
mod python;
mod spec;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::StatusCode;

pub use self::binary::{NODE_BIN_ENV, node_binary, workspace_root};
pub use self::client::{HttpClient, HttpError, KeyRing, REQUEST_TIMEOUT, Reply, turn};
pub use self::python::{checked_python, venv_python};
pub use self::spec::{NodeSpec, Sandbox, write_secret};

/// How long a node may take from spawn to answering `/ready` (a debug build on a busy
/// 2-core machine included).
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a node may take to exit once sent SIGTERM (`http.shutdown-grace` is 10 s).
pub const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// Lines of a node's log printed when a test panics while the node is alive.
const LOG_TAIL: usize = 200;

/// A node process, started from a [`NodeSpec`]; killed when dropped.
#[derive(Debug)]
pub struct Node {
    spec: NodeSpec,
    process: Option<Child>,
    /// The address the last run bound, reused by [`Node::restart`].
    addr: SocketAddr,
    /// Every stderr line of every run.
    log: Arc<Mutex<Vec<String>>>,
    runs: usize,
    /// Whether a panic message already carried the log.
    log_shown: bool,
}

impl Node {
    /// Writes the spec's configuration, starts `engram-node run`, and returns once the node
    /// logged its address and answers `/ready`.
    ///
    /// # Panics
    /// If the binary cannot be found or built, the process exits or stays silent past
    /// [`START_DEADLINE`], or `/ready` does not answer 200 by then; with the node's log.
    pub async fn start(spec: NodeSpec) -> Node {
        let log = Arc::new(Mutex::new(Vec::new()));
        let unbound = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut node = Node {
            spec,
            process: None,
            addr: unbound,
            log,
            runs: 0,
            log_shown: false,
        };
        node.run(None).await;
        node
    }

    /// Starts the same spec again on the same data (after [`Node::kill`] or
    /// [`Node::terminate`]), on the previous port when it is still free.
    ///
    /// # Panics
    /// If the node is running, or as [`Node::start`].
    pub async fn restart(&mut self) {
        assert!(
            self.process.is_none(),
            "restart of node {} while it runs",
            self.spec.id()
        );
        let previous = self.addr.to_string();
        if let Err(log) = self.try_run(Some(&previous)).await {
            if log.iter().any(|l| l.contains("binding http.listen")) {
                self.run(Some("127.0.0.1:0")).await;
            } else {
                self.fail(&format!("did not restart on {previous}"));
            }
        }
    }

    async fn run(&mut self, listen: Option<&str>) {
        if self.try_run(listen).await.is_err() {
            self.fail("did not start");
        }
    }

    /// Spawns a run, listening on `listen` instead of the spec's `http.listen` when given;
    /// on failure returns that run's log lines.
    async fn try_run(&mut self, listen: Option<&str>) -> Result<(), Vec<String>> {
        let binary = node_binary().unwrap_or_else(|e| panic!("no engram-node to start: {e}"));
        self.runs += 1;
        let spec = match listen {
            Some(listen) => self.spec.clone().set("http.listen", listen),
            None => self.spec.clone(),
        };
        let config = spec.config_path();
        std::fs::create_dir_all(spec.data_dir()).expect("data directory");
        std::fs::write(&config, spec.toml()).expect("configuration written");
        let first_line = {
            let mut log = self.log.lock().expect("log lock");
            log.push(format!(
                "--- harness: run {} of node {} ({}) ---",
                self.runs,
                spec.id(),
                config.display()
            ));
            log.len()
        };
        let mut command = match spec.wrapper().split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .args(["run", "--config"])
            .arg(&config)
            .env_remove("RUST_LOG")
            .env_remove("ENGRAM_ADMIN_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ENGRAM__") {
                command.env_remove(key);
            }
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let log = self.log.clone();
        std::thread::spawn(move || read_log(stderr, &log, started_tx));
        let deadline = Instant::now() + START_DEADLINE;
        let addr = match tokio::time::timeout(START_DEADLINE, started_rx).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_)) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(self.log.lock().expect("log lock")[first_line..].to_vec());
            }
        };
        self.addr = addr;
        self.process = Some(child);
        self.wait_ready(deadline).await;
        Ok(())
    }

    /// Polls `/ready` until it answers 200 or the deadline passes.
    async fn wait_ready(&mut self, deadline: Instant) {
        let client = self.client();
        loop {
            match client.get("/ready").await {
                Ok(reply) if reply.status == StatusCode::OK => return,
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    if self.exited().is_some() {
                        self.fail("exited before it was ready");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(_) | Err(_) => self.fail("was not ready in time"),
            }
        }
    }

    /// The spec it runs.
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// The bound HTTP address of the current (or last) run.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, or `https://<addr>` when the spec serves HTTPS.
    pub fn url(&self) -> String {
        let scheme = match self.spec.gateway_ca() {
            Some(_) => "https",
            None => "http",
        };
        format!("{scheme}://{}", self.addr)
    }

    /// A pooled client of the current run's address (trusting the spec's gateway CA when it
    /// serves HTTPS), with the sandbox's keys (the root key for admin and cluster endpoints,
    /// a gateway key otherwise).
    pub fn client(&self) -> HttpClient {
        let client = match self.spec.gateway_ca() {
            Some(ca) => HttpClient::trusting(&self.url(), ca),
            None => HttpClient::new(&self.url()),
        };
        client.with_ring(self.spec.keys().clone(), self.spec.sqlite_path().to_owned())
    }

    /// Makes a key of `tenant` with `scope` (`gateway`, `operator` or `admin`) named `name`
    /// with the root key, asserting it was made; returns its token and id.
    pub async fn must_make_key(&self, tenant: &str, scope: &str, name: &str) -> (String, String) {
        let root = self
            .client()
            .with_key(self.spec.keys().root())
            .with_header("x-engram-tenant", tenant);
        let body = serde_json::json!({"tenant": tenant, "scope": scope, "name": name});
        let reply = root
            .post("/v1/admin/keys", &body)
            .await
            .unwrap_or_else(|e| panic!("making a {scope} key of {tenant}: {e}"));
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
        let made = reply.json();
        let field = |name: &str| {
            made[name]
                .as_str()
                .unwrap_or_else(|| panic!("a made key without {name}: {made}"))
                .to_owned()
        };
        (field("token"), field("key_id"))
    }

    /// Like [`Node::client`], opening a new connection for every request.
    pub fn fresh_client(&self) -> HttpClient {
        HttpClient::fresh_connections(&self.url())
            .with_ring(self.spec.keys().clone(), self.spec.sqlite_path().to_owned())
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.process.is_some() && self.exited().is_none()
    }

    /// Every log line so far, of every run.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// Sends `SIGKILL` and reaps the process.
    ///
    /// # Panics
    /// If the node is not running.
    pub fn kill(&mut self) {
        let mut child = self
            .process
            .take()
            .unwrap_or_else(|| panic!("kill of node {}, which is not running", self.spec.id()));
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Sends `signal` (`TERM`, `INT`, `STOP`, `CONT`, ...) with `kill(1)`, without waiting.
    ///
    /// # Panics
    /// If the node is not running or `kill` fails.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("signal to node {}, which is not running", self.spec.id()));
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}: {status}");
    }

    /// Pauses the process (SIGSTOP) and returns once every one of its threads is stopped:
    /// `kill` only queues the signal, and a thread running on another core goes on for a
    /// moment (long enough to take a lock its caller is about to release).
    ///
    /// # Panics
    /// If its threads are not all stopped within 10 s.
    pub fn pause(&self) {
        self.signal("STOP");
        let pid = self.pid().expect("a node just signalled is running");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "node {} was sent SIGSTOP but its threads did not all stop within 10 s",
                self.spec.id()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to `timeout` for the process to exit and returns its status.
    ///
    /// # Panics
    /// If it is still running at the deadline (it is then killed), with the log.
    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                self.process = None;
                return status;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "still running {timeout:?} after it was asked to stop"
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `SIGTERM` and waits for the exit (at most [`STOP_DEADLINE`]).
    pub async fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait_exit(STOP_DEADLINE).await
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.process.as_mut()?.try_wait().ok().flatten()
    }

    /// Kills the process (if any) and panics with `what` and the log.
    fn fail(&mut self, what: &str) -> ! {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.log_shown = true;
        panic!(
            "node {} {what}; its log:\n{}",
            self.spec.id(),
            self.log().join("\n")
        );
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() && !self.log_shown {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(LOG_TAIL)..];
            eprintln!(
                "--- log of node {} ({}) ---\n{}",
                self.spec.id(),
                self.spec.config_path().display(),
                tail.join("\n")
            );
        }
    }
}

/// Collects `stderr` into `log`; sends the address of the "node started" line once.
fn read_log(
    stderr: impl std::io::Read,
    log: &Mutex<Vec<String>>,
    started: tokio::sync::oneshot::Sender<SocketAddr>,
) {
    let mut started = Some(started);
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        if line.contains("node started")
            && let Some(addr) = field(&line, "http").and_then(|a| a.parse().ok())
            && let Some(tx) = started.take()
        {
            let _ = tx.send(addr);
        }
        log.lock().expect("log lock").push(line);
    }
}

/// The value of `name=value` in a text log line.
pub fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let needle = format!(" {name}=");
    let start = line.find(&needle)? + needle.len();
    let rest = &line[start..];
    Some(
        rest.split_whitespace()
            .next()
            .unwrap_or("")
            .trim_matches('"'),
    )
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            // The state follows the command name, which is in parentheses and may hold spaces.
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
            })
            .is_some_and(|state| state == 'T' || state == 't')
    })
}
