//! The project's Python interpreter for the suites that drive a node from Python (the client,
//! the MCP client, the console's browser): the virtual environment `.ci/setup` makes under
//! `${ENGRAM_CACHE:-~/.cache/engram}/venv`, checked for the packages a suite needs. What is
//! missing comes back as the reason, which those suites fail with (they never skip).

use std::path::PathBuf;
use std::process::Command;

/// The virtual environment's interpreter (whether or not it exists).
pub fn venv_python() -> PathBuf {
    let cache = std::env::var_os("ENGRAM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/engram")))
        .unwrap_or_else(|| PathBuf::from(".cache/engram"));
    cache.join("venv/bin/python")
}

/// The interpreter, when it runs `import_check` (Python code that fails without the suite's
/// packages); otherwise why not, naming what is missing and `needs` (what `.ci/setup`
/// installs there for the suite).
pub fn checked_python(import_check: &str, needs: &str) -> Result<PathBuf, String> {
    let python = venv_python();
    if !python.is_file() {
        return Err(format!(
            "the virtual environment's interpreter {} does not exist (.ci/setup makes it and \
             installs {needs} there)",
            python.display()
        ));
    }
    let check = Command::new(&python)
        .args(["-c", import_check])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !check.status.success() {
        return Err(format!(
            "{} lacks {needs} (.ci/setup installs {needs} in that environment): {}",
            python.display(),
            String::from_utf8_lossy(&check.stderr).trim()
        ));
    }
    Ok(python)
}
