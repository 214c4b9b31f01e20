//! Finds the `engram-node` executable the harness starts, building it when it is missing or
//! older than the sources it is made from.
//!
//! `CARGO_BIN_EXE_engram-node` exists only for the node crate's own tests, and the tests crate
//! may not depend on `engram-node` (the layering rule), so the harness looks where Cargo puts
//! the binary: `$CARGO_TARGET_DIR/<profile>/engram-node` (a relative `CARGO_TARGET_DIR` is
//! taken from the workspace root), or `target/<profile>/engram-node` at the workspace root
//! when it is unset. The profile is the harness's own (`debug` for `cargo test`, `release`
//! for `cargo run --release --bin loadgen`).
//!
//! A binary older than any source file of the crates it links (`node`, `actors`, `storage`,
//! `inference`, the root manifest and lock file) is rebuilt with `cargo build -p engram-node`,
//! so `cargo test -p engram-tests` never tests yesterday's node. When the binary is already
//! fresh no Cargo runs at all: a `cargo test --workspace` build has just linked it, and a
//! second Cargo with another feature set would relink it for nothing. `ENGRAM_NODE_BIN`
//! names a binary to use as it is (no staleness check, no build).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// Environment variable naming a prebuilt `engram-node` to start instead.
pub const NODE_BIN_ENV: &str = "ENGRAM_NODE_BIN";

/// Crate folders (relative to the workspace root) whose sources make up `engram-node`.
const SOURCES: [&str; 4] = ["node", "actors", "storage", "inference"];

/// The workspace root (this crate lives in `<root>/tests`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The `engram-node` to start, built first if needed; the outcome is computed once per
/// process. The error says what was tried.
pub fn node_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(locate_or_build).clone()
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(NODE_BIN_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{NODE_BIN_ENV}={} is not a file", path.display()))
        };
    }
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(|| root.join("target"), |dir| root.join(dir));
    let binary = target.join(profile()).join("engram-node");
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let newest = newest_source(&root);
    match (built, newest) {
        (Some(built), Some(newest)) if built >= newest => return Ok(binary),
        (Some(_), None) => return Ok(binary),
        (Some(_) | None, Some(_)) | (None, None) => {}
    }
    build(&root)?;
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "`cargo build -p engram-node` succeeded but {} does not exist; set {NODE_BIN_ENV}",
            binary.display()
        ))
    }
}

/// Runs `cargo build -p engram-node` in the harness's profile.
fn build(root: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "-p", "engram-node"]);
    if profile() == "release" {
        command.arg("--release");
    }
    eprintln!(
        "harness: building engram-node ({}), as it is missing or older than its sources",
        profile()
    );
    let status = command
        .status()
        .map_err(|err| format!("cannot run cargo to build engram-node: {err}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo build -p engram-node` failed: {status}"))
    }
}

/// The newest modification time among the node's source files and the workspace manifests.
fn newest_source(root: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for file in ["Cargo.toml", "Cargo.lock"] {
        newest = later(newest, modified(&root.join(file)));
    }
    for krate in SOURCES {
        let dir = root.join(krate);
        for file in ["Cargo.toml", "build.rs"] {
            newest = later(newest, modified(&dir.join(file)));
        }
        newest = later(newest, newest_in(&dir.join("src")));
    }
    newest
}

fn newest_in(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return None;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest_in(&path)
        } else {
            modified(&path)
        };
        newest = later(newest, time);
    }
    newest
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn later(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
