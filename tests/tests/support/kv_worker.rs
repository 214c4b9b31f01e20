//! Starting, finishing and killing the `kv_worker` helper process, shared by the storage
//! suites (included with `#[path]`, since `CARGO_BIN_EXE_kv_worker` exists only for
//! integration tests).

use std::process::{Child, Command, Stdio};

/// Starts `kv_worker` with `args`, its stdout piped.
pub fn worker(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kv_worker"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Waits for a worker, requires success, and returns its stdout.
pub fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "worker failed: {:?}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

/// Sends SIGKILL to `pid`.
pub fn kill_9(pid: u32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
