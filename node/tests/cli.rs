//! The `engram-node` command line as an operator meets it: `check-config` on the reference
//! file and on broken ones, and `run` refusing to start with a clear message and a non-zero
//! status when the configuration or the store is unusable.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The root admin key the nodes of these tests run with (from the environment).
const ADMIN_KEY: &str = "cli-tests-admin-key-0123456789abcdef0123456789";

fn engram_node(args: &[&str], config: &Path) -> Output {
    engram_node_with(args, config, Some(ADMIN_KEY))
}

fn engram_node_with(args: &[&str], config: &Path, admin_key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_engram-node"));
    command
        .args(args)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .env_remove("ENGRAM_ADMIN_KEY");
    if let Some(key) = admin_key {
        command.env("ENGRAM_ADMIN_KEY", key);
    }
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ENGRAM__") {
            command.env_remove(key);
        }
    }
    command.output().expect("engram-node runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("node.toml");
    std::fs::write(&path, text).expect("config written");
    path
}

/// A cookie file in `dir` that the node accepts (mode 0600); returns its path.
fn cookie(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("cookie");
    std::fs::write(&path, "cli-test-cookie-0123456789").expect("cookie written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[test]
fn check_config_accepts_the_reference_file() {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cluster.toml");
    let output = engram_node(&["check-config"], &reference);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "ok\n");
    assert_eq!(stderr(&output), "", "no warnings for the defaults");
}

#[test]
fn check_config_names_an_unknown_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(dir.path(), "[storage.sqlite]\nread-pools = 4\n");
    let output = engram_node(&["check-config"], &config);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let err = stderr(&output);
    assert!(
        err.contains("`read-pools`") && err.contains("[storage.sqlite]"),
        "{err}"
    );
}

#[test]
fn run_refuses_an_invalid_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(
        dir.path(),
        "[node]\ndata-dir = \"never-created\"\n[cluster]\nheartbeat-interval = \"5s\"\n",
    );
    let output = engram_node(&["run"], &config);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("cluster.lease-timeout"), "{err}");
    assert!(!err.contains("node started"), "{err}");
}

#[test]
fn run_fails_clearly_when_the_store_cannot_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A data directory below a regular file cannot be created, whoever runs the test.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").expect("blocker written");
    let text = format!(
        "[node]\ndata-dir = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:0\"\ncookie-file = \"{}\"\n",
        blocker.join("data").display(),
        cookie(dir.path()).display()
    );
    let output = engram_node(&["run"], &write(dir.path(), &text));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("error: creating node.data-dir"), "{err}");
    assert!(!err.contains("node started"), "{err}");
}

#[test]
fn run_refuses_to_start_without_an_admin_key_or_with_a_short_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[node]\ndata-dir = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:0\"\ncookie-file = \"{}\"\n",
        dir.path().join("data").display(),
        cookie(dir.path()).display()
    );
    let config = write(dir.path(), &text);
    let output = engram_node_with(&["run"], &config, None);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("error: no admin key: set security.admin-key-file"),
        "{err}"
    );
    assert!(!err.contains("node started"), "{err}");
    let output = engram_node_with(&["run"], &config, Some("too-short"));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("at least 32 characters"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn run_refuses_to_start_without_its_cookie_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let text = format!(
        "[node]\ndata-dir = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[cluster]\nlisten = \"127.0.0.1:0\"\n",
        data.display()
    );
    let output = engram_node(&["run"], &write(dir.path(), &text));
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    let expected = format!(
        "error: cluster.cookie-file {}: cannot open",
        data.join("cookie").display()
    );
    assert!(err.contains(&expected), "{err}");
    assert!(!err.contains("node started"), "{err}");
    assert!(
        !data.join("engram.sqlite").exists(),
        "the store was not touched"
    );
}
