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
//! promtool (Debian's prometheus) and python3-kubernetes come from `.ci/setup`: under CI
//! (`CI=true`) a test without them fails; elsewhere it says what it skipped and passes.
//! `systemd-analyze` comes with systemd, which .ci/setup does not install: without it the
//! unit is only parsed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use engram_tests::harness::{under_ci, workspace_root};

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

/// Whether `what` is on this machine; when it is not, fails under CI (which installs
/// `package`) and otherwise prints that `test` was skipped.
fn available(what: &str, found: bool, package: &str, test: &str) -> bool {
    if !found {
        assert!(
            !under_ci(),
            "CI=true but {what} is missing; .ci/setup installs {package}"
        );
        println!("skipped {test}: {what} is missing (apt-get install {package})");
    }
    found
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

/// Whether promtool is here (see [`available`]).
fn promtool(test: &str) -> bool {
    let found = runs("promtool", &["--version"]);
    available("promtool", found, "prometheus", test)
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
