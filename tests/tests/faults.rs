//! Faults of the disk, the clock and the network, injected into real node processes, each
//! checked with the chaos tests' history checker (`engram_tests::history`) or against the
//! store itself:
//!
//! - a data directory on a small filesystem the test mounts (tmpfs) that fills up;
//! - a store whose fsyncs fail (the node runs under libfiu's `fiu-run`, switched by
//!   `fiu-ctrl`);
//! - wall clocks skewed between nodes (libfaketime), inside and beyond the lease margin;
//! - asymmetric, flapping and slow links between nodes (network namespaces, `tc`);
//! - a seeded random schedule combining them.
//!
//! Each needs root and the tools `.ci/setup` installs; a test that cannot set its fault up
//! fails with the reason. Every wait is on a condition with a deadline.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use engram_tests::chaos::{
    Gateway, Load, clients_of, exported_metric, metric_at_least, settled, shard, start,
};
use engram_tests::harness::{HttpClient, Sandbox, turn};
use hyper::StatusCode;

/// Runs `program` with `args`, panicking with its output unless it succeeds.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} cannot run here ({e}): .ci/setup installs it"));
    assert!(
        out.status.success(),
        "{program} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tmpfs of a given size mounted by the test (root only), unmounted on drop.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, megabytes: u32) -> SmallDisk {
        std::fs::create_dir_all(path).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={megabytes}m"),
                "tmpfs",
                path.to_str().unwrap(),
            ],
        );
        SmallDisk {
            path: path.to_owned(),
        }
    }

    fn resize(&self, megabytes: u32) {
        run(
            "mount",
            &[
                "-o",
                &format!("remount,size={megabytes}m"),
                self.path.to_str().unwrap(),
            ],
        );
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Appends `request_id` once; the status and the reply's `code`.
async fn append(client: &HttpClient, user: &str, request_id: &str, text: &str) -> (u16, String) {
    match client
        .append_turn(user, &turn(request_id, "s1", text, "ok"))
        .await
    {
        Ok(reply) => (
            reply.status.as_u16(),
            reply.json()["code"].as_str().unwrap_or_default().to_owned(),
        ),
        Err(_) => (0, String::new()),
    }
}

/// The user texts of `user`'s session, or the status the read got.
async fn read(client: &HttpClient, user: &str) -> Result<Vec<String>, u16> {
    let reply = client
        .get(&format!("/v1/users/{user}/sessions/s1/memory?limit=500"))
        .await
        .map_err(|_| 0u16)?;
    if reply.status != StatusCode::OK {
        return Err(reply.status.as_u16());
    }
    Ok(reply.json()["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["user_text"].as_str().unwrap_or_default().to_owned())
        .collect())
}

/// Reads `user`'s list, which must answer.
async fn must_read(client: &HttpClient, user: &str) -> Vec<String> {
    read(client, user)
        .await
        .unwrap_or_else(|status| panic!("a read of {user} answered {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_507_keeps_serving_reads_and_resumes_when_space_returns() {
    let sandbox = Sandbox::new();
    let disk = SmallDisk::mount(&sandbox.path().join("small"), 8);
    let sqlite = disk.path.join("engram.sqlite");
    let mut node = sandbox
        .node("full")
        .set("inference.enabled", false)
        .set("storage.sqlite.path", sqlite.to_str().unwrap())
        .set("storage.sqlite.reserve-mib", 2)
        .start()
        .await;
    let client = node.client();
    let user = "filler";
    let filler = "x".repeat(6000);
    // Each write is acknowledged or refused with 507 (nothing written). Where the disk fills
    // under a write's audit entry rather than under the write, the answer is 503
    // `audit_unavailable`: written, not acknowledged.
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    let mut answers = std::collections::BTreeMap::new();
    while !refused.iter().any(|(_, _, status)| *status == 507) {
        let id = format!("fill-{}", acked.len() + refused.len());
        let text = format!("{id} {filler}");
        let (status, code) = append(&client, user, &id, &text).await;
        *answers.entry(format!("{status} {code}")).or_insert(0) += 1;
        match (status, code.as_str()) {
            (200, _) => acked.push(text),
            (507, "storage_full") | (503, "audit_unavailable") => refused.push((id, text, status)),
            other => panic!("a write to a filling disk answered {other:?}"),
        }
        assert!(acked.len() < 5000, "8 MB never filled up");
    }
    println!("the disk filled: {answers:?}");
    // Reads go on, and show every acknowledged turn in order and nothing refused with 507.
    let on_full = must_read(&client, user).await;
    let not_written: Vec<&String> = refused
        .iter()
        .filter(|(_, _, status)| *status == 507)
        .map(|(_, text, _)| text)
        .collect();
    assert!(
        on_full.iter().all(|t| !not_written.contains(&t)),
        "a write refused with 507 is stored"
    );
    let acked_seen: Vec<&String> = on_full.iter().filter(|t| acked.contains(t)).collect();
    assert_eq!(
        acked_seen.len(),
        acked.len(),
        "an acknowledged write is missing"
    );
    assert_eq!(
        exported_metric(&client, "engram_sqlite_reserve_released").await,
        1.0,
        "the reserve is released"
    );
    let (status, code) = append(&client, user, "fill-more", "one more").await;
    assert_eq!(
        (status, code.as_str()),
        (507, "storage_full"),
        "writes stay refused while the disk is full"
    );
    // Still serving once the node's lease rounds went on past the full disk.
    assert_eq!(must_read(&client, user).await, on_full);

    disk.resize(64);
    for (id, text, _) in &refused {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, code) = append(&client, user, id, text).await;
            if status == 200 {
                break;
            }
            assert!(
                Instant::now() < until,
                "writes did not resume once space returned: {status} {code}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        acked.push(text.clone());
    }
    let stored = must_read(&client, user).await;
    assert_eq!(stored, acked, "every write once, in the order sent");
    assert_eq!(
        exported_metric(&client, "engram_sqlite_reserve_released").await,
        0.0,
        "the reserve is kept again"
    );
    // Every acknowledged write survives a SIGKILL.
    node.kill();
    node.restart().await;
    assert_eq!(must_read(&node.client(), user).await, acked);
}

/// Sends a libfiu control command to node process `pid` (started under `fiu-run -x -f
/// FIFOS`). `fiu-ctrl` exits 0 even when the process refused or could not be reached, and
/// says so on stderr only: anything there fails the test.
fn fiu(fifos: &Path, pid: u32, command: &str) {
    let out = Command::new("fiu-ctrl")
        .args([
            "-f",
            fifos.to_str().unwrap(),
            "-c",
            command,
            &pid.to_string(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("fiu-ctrl cannot run here ({e}): .ci/setup installs fiu-utils"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "fiu-ctrl -c {command:?} {pid}: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_fsyncs_fail_stops_acknowledging_and_loses_nothing_acknowledged() {
    let sandbox = Sandbox::new();
    let ids = ["sync-a", "sync-b"];
    // a runs under libfiu's POSIX preload, its failure points switched from outside through
    // control pipes kept in the sandbox.
    let fifos = sandbox.path().join("fiu-ctrl");
    let a = sandbox
        .shared_node(ids[0])
        .set("inference.enabled", false)
        .wrapped(vec![
            "fiu-run".into(),
            "-x".into(),
            "-f".into(),
            fifos.to_str().unwrap().into(),
        ])
        .start()
        .await;
    let b = start(&sandbox, ids[1]).await;
    let nodes = [a, b];
    let clients = clients_of(&ids, &nodes);
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let gateway = Gateway::new(clients.iter().map(|(_, c)| c.clone()).collect());
    let load = Load::start(&gateway, 16, 4);
    let on_a: Vec<String> = load
        .users
        .iter()
        .filter(|u| owners[&shard(u)] == ids[0])
        .cloned()
        .collect();
    assert!(!on_a.is_empty(), "some users live on a");
    load.wait_for(50, Duration::from_secs(30)).await;

    // Every fsync and fdatasync of a fails from now on: its commits (writes, heartbeats)
    // cannot be made durable, so it must acknowledge nothing.
    let pid = nodes[0].pid().expect("a runs");
    let failed_before = exported_metric(&clients[0].1, "engram_lease_rounds_failed_total").await;
    fiu(&fifos, pid, "enable name=posix/io/sync/fdatasync");
    fiu(&fifos, pid, "enable name=posix/io/sync/fsync");
    let failing_at = Instant::now();
    metric_at_least(
        &clients[0].1,
        "engram_lease_rounds_failed_total",
        failed_before + 1.0,
        Duration::from_secs(30),
    )
    .await;
    // a's users are served again, by b, once a's heartbeat is old enough.
    let served = load
        .served_again(&on_a, failing_at, Duration::from_secs(60))
        .await;
    let direct = clients[0]
        .1
        .append_turn(&on_a[0], &turn("sync-direct", "s1", "sent to a", "ok"))
        .await
        .map(|r| r.status.as_u16())
        .unwrap_or(0);
    println!(
        "fsyncs failing on a: its users served again by b after {:.2} s; a write sent to a \
         answered {direct}",
        (served - failing_at).as_secs_f64()
    );

    fiu(&fifos, pid, "disable name=posix/io/sync/fdatasync");
    fiu(&fifos, pid, "disable name=posix/io/sync/fsync");
    settled(&clients, Duration::from_secs(60)).await;
    load.wait_for(50, Duration::from_secs(30)).await;
    load.stop_and_verify(&clients[1].1, &sandbox).await;
}
