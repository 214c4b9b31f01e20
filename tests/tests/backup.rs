//! Online backup and restore of the SQLite store (`engram-node backup`), on a real node
//! process: a backup taken while a gateway keeps appending holds every turn acknowledged
//! before it began, and the node restarted on the restored file serves them; the command
//! never overwrites a file.

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use engram_tests::harness::{Node, Sandbox, node_binary, turn};

fn backup_cli(config: &Path, to: &Path) -> Output {
    std::process::Command::new(node_binary().unwrap())
        .arg("backup")
        .arg("--config")
        .arg(config)
        .arg("--to")
        .arg(to)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_writes_restores_every_turn_acknowledged_before_it_began() {
    let sandbox = Sandbox::new();
    let mut node = Node::start(sandbox.node("live").set("inference.enabled", false)).await;
    let client = node.client();

    // A gateway appends turns to one session, one at a time, counting acknowledgements.
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let gateway = {
        let (client, acked, stop) = (client.clone(), Arc::clone(&acked), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let body = turn(&format!("t{i}"), "s1", &format!("question {i}"), "answer");
                client.must_append_turn("alice", &body).await;
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 20 {
        tokio::task::yield_now().await;
    }
    let before = acked.load(Ordering::SeqCst);
    let to = sandbox.path().join("backup.sqlite");
    let (config, target) = (node.spec().config_path(), to.clone());
    let out = tokio::task::spawn_blocking(move || backup_cli(&config, &target))
        .await
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    gateway.await.unwrap();
    assert!(
        out.status.success(),
        "backup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("bytes"));

    // A second backup to the same file is refused and leaves the first as it was.
    let first = std::fs::read(&to).unwrap();
    let again = backup_cli(&node.spec().config_path(), &to);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    assert_eq!(std::fs::read(&to).unwrap(), first);

    // Restore as docs/operations.md says: stop the node, put the backup in place of the
    // store (its WAL and shared-memory files removed), start the node again.
    assert!(node.terminate().await.success());
    let store = node.spec().sqlite_path().to_owned();
    for suffix in ["", "-wal", "-shm"] {
        let mut name = store.clone().into_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(&name);
    }
    std::fs::copy(&to, &store).unwrap();
    node.restart().await;

    let turns = node.client().must_session_turns("alice", "s1").await;
    let texts: Vec<&str> = turns
        .iter()
        .filter_map(|t| t["user_text"].as_str())
        .collect();
    for i in 0..before {
        let text = format!("question {i}");
        assert!(
            texts.contains(&text.as_str()),
            "turn {i} was acknowledged before the backup began but is not in it"
        );
    }
}
