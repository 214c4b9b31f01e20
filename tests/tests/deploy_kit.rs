//! The operator kit in `deploy/`, checked by the tools that read it and against a real node:
//!
//! - the alert rules pass `promtool check rules` and their unit tests (`promtool test
//!   rules`), the scrape configuration `promtool check config`, and every alert has a
//!   `for:`, a severity and its two annotations;
//! - every query of the Grafana dashboard parses as PromQL (`promtool check rules` over them
//!   as recording rules), and every panel reads the datasource variable;
//! - every metric the dashboard and the rules name is exported by a real node (embedding
//!   pool, pipeline, generation pool and leases included), with the labels and label values
//!   their selectors ask for, in an exposition `promtool check metrics` accepts;
//! - the systemd unit passes `systemd-analyze verify` and scores at most 2.0 on
//!   `systemd-analyze security`, and gives the node time for its shutdown;
//! - the Kubernetes manifests fit the API models of python3-kubernetes
//!   (`deploy/kubernetes/validate.py`), the StatefulSet mounts every file the configuration
//!   names from the right secret, probes `/ready` and `/health`, sets each pod's id and
//!   cluster address, covers its drain and shutdown, and its ConfigMap's cluster.toml
//!   passes `engram-node check-config` with the pods' environment.
//!
//! promtool (Debian's prometheus), python3-kubernetes (with python3-yaml, under Debian's
//! /usr/bin/python3) and `systemd-analyze` (Debian's systemd) come from `.ci/setup`. A test
//! whose tool is missing fails, naming the tool and the package `.ci/setup` installs it
//! with, on any machine, under CI or not: no test here skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use engram_tests::harness::workspace_root;

#[path = "deploy_kit/kubernetes.rs"]
mod kubernetes;
#[path = "deploy_kit/prometheus.rs"]
mod prometheus;
#[path = "deploy_kit/promql.rs"]
mod promql;
#[path = "deploy_kit/systemd.rs"]
mod systemd;

/// A file of the kit, `deploy/<path>`.
fn deploy(path: &str) -> PathBuf {
    workspace_root().join("deploy").join(path)
}

/// The text of `path`.
fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fails the test unless `what` was `found` on this machine, naming the Debian `package`
/// that `.ci/setup` installs it with.
#[track_caller]
fn require(what: &str, found: bool, package: &str) {
    assert!(
        found,
        "{what} is missing, so this test cannot run: .ci/setup installs it with Debian's \
         {package} (or: apt-get install {package})"
    );
}

/// Whether `program args` runs and exits 0.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails the test unless promtool runs here (see [`require`]).
#[track_caller]
fn require_promtool() {
    require("promtool", runs("promtool", &["--version"]), "prometheus");
}

/// Runs `command` and returns its output, panicking when it cannot start.
fn output(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

/// Runs `command`, which must exit 0; returns its stdout.
fn must_run(command: &mut Command) -> String {
    let out = output(command);
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Seconds of a duration as the kit writes them: `10s`, `60s`, `5min`, `2m`.
fn seconds(text: &str) -> u64 {
    let text = text.trim().trim_matches('"');
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} is not a duration"));
    match &text[digits.len()..] {
        "" | "s" => n,
        "m" | "min" => n * 60,
        unit => panic!("{text:?}: unexpected unit {unit:?}"),
    }
}

/// Steps of a node's stop after SIGTERM that `http.shutdown-grace` bounds each: the
/// gateway's drain, leaving the cluster, the embedding pool's shutdown, joining the
/// inference threads (`node/src/lifecycle.rs`).
const GRACE_STEPS: u64 = 4;
