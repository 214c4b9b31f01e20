//! The Python client (`clients/python`) against real node processes: this test starts two
//! nodes and runs the client's own pytest suite against them, which must pass with nothing
//! skipped. The suite covers every method family of the sync and async clients, the API's
//! errors as exceptions, a write whose answer is lost applied once on retry, and the
//! client waiting out the node's 429 `Retry-After` (see `clients/python/tests`).
//!
//! One node is plain; the other lets a key make 1 request a second in bursts of 3, so the
//! suite can drive a key over its rate. Both run without the embedding pool (searches rank by
//! words, which is what the suite looks for) and start at once.
//!
//! The interpreter is the project's virtual environment,
//! `${ENGRAM_CACHE:-~/.cache/engram}/venv/bin/python`, where `.ci/setup` installs the client
//! (editable) and its test tools. The suite imports the client from this checkout's
//! `clients/python/src`, whatever checkout the editable install points to. A missing
//! interpreter or package fails the test, naming it and what `.ci/setup` installs, on any
//! machine, under CI or not: the test never skips.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use engram_tests::harness::{Sandbox, checked_python, workspace_root};

/// How long the suite may take (about 10 s on an idle machine; a busy 2-core one is slower).
const SUITE_DEADLINE: Duration = Duration::from_secs(300);

/// The packages the suite needs, as the interpreter must import them.
const IMPORT_CHECK: &str = "import importlib.metadata as m, httpx, pytest, pytest_asyncio; \
                            m.version('engram-client')";

/// The interpreter, when it has the client and the test tools; otherwise why not.
fn python() -> Result<PathBuf, String> {
    checked_python(IMPORT_CHECK, "the client or its test tools")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_passes_its_suite_against_real_nodes() {
    let python =
        python().unwrap_or_else(|why| panic!("the Python client's suite cannot run: {why}"));
    let started = Instant::now();
    let sandbox = Sandbox::new();
    let plain = sandbox
        .node("py")
        .set("inference.enabled", false)
        // The reranker loads at the first rerank: the test is about the answer, not latency.
        .set("reranker.deadline", "60s");
    let limited = sandbox
        .node("py-rate")
        .set("inference.enabled", false)
        .set("security.rate-limit", 1)
        .set("security.rate-burst", 3);
    let (node, rate_node) = tokio::join!(plain.start(), limited.start());
    eprintln!("nodes ready in {:?}", started.elapsed());

    let root = workspace_root();
    let log_path = sandbox.path().join("pytest.log");
    let log = std::fs::File::create(&log_path).expect("pytest log file");
    let mut child = Command::new(&python)
        .args(["-m", "pytest", "clients/python/tests", "-q", "-rs"])
        // No cache directory or bytecode written into the checkout.
        .args(["-p", "no:cacheprovider"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONPATH", root.join("clients/python/src"))
        .env("ENGRAM_URL", node.url())
        .env("ENGRAM_RATE_URL", rate_node.url())
        .env("ENGRAM_ADMIN_KEY", sandbox.keys().root())
        .env_remove("ENGRAM_API_KEY")
        .env_remove("PYTEST_ADDOPTS")
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("pytest log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));

    let suite = Instant::now();
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait().expect("waiting for pytest") {
            break status;
        }
        if suite.elapsed() > SUITE_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("pytest still running after {SUITE_DEADLINE:?}; its output:\n{output}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let output = std::fs::read_to_string(&log_path).expect("pytest log");
    println!("{output}");
    eprintln!("pytest took {:?}", suite.elapsed());
    assert!(status.success(), "pytest failed ({status}):\n{output}");
    let summary = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    assert!(
        summary.contains(" passed") && !summary.contains("skipped"),
        "every test of the suite must run against the nodes: {summary}"
    );
}
