//! Access times written off the user's actor, on a real SQLite file: the reads that make the
//! actor write the `last_accessed_at` of what it served do not wait for that write, and what
//! was written reaches storage and then the actor's cache.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use engram_actors::model::retrieve::SearchMode;
use engram_actors::request::user::{SearchResult, SweepScope};
use engram_actors::services::Settings;
use engram_actors::user::{FLUSH_AT, UserMsg};
use engram_storage::types::MemoryKind;

mod plain;
use plain::{Node, alice, alice_memories, alice_stored, append, node, search_alice, turn};

const WORDS: [&str; 3] = ["alpha", "beta", "gamma"];

async fn search(node: &Node, word: &str) -> SearchResult {
    search_alice(node, word, 100, SearchMode::Bm25).await
}

/// How many of alice's episodic memories have an access time in storage.
async fn stored_access_times(node: &Node) -> usize {
    alice_stored(node, MemoryKind::Episodic)
        .await
        .iter()
        .filter(|r| r.last_accessed_at.is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_answered_while_the_access_times_an_earlier_read_made_due_wait_to_commit() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    // 300 episodic memories, 100 for each word; each turn in a session of its own, so that
    // no memory is found by its neighbours' words.
    for i in 0..300 {
        let text = format!("{} note number {i}", WORDS[i % 3]);
        append(
            &node,
            &alice(),
            turn(&format!("r{i}"), &format!("s{i}"), &text),
        )
        .await
        .unwrap();
    }
    for word in &WORDS[..2] {
        assert_eq!(search(&node, word).await.hits.len(), 100);
    }
    const {
        assert!(
            200 < FLUSH_AT,
            "two searches leave the access times waiting"
        )
    };

    // The storage's writer thread held by a transaction that waits for the test: every
    // write queued behind it waits too.
    let (started, has_started) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let blocker = {
        let store = node.store.clone();
        tokio::spawn(async move {
            store
                .run(move |_txn| {
                    let _ = started.send(());
                    let _ = released.recv();
                    Ok(())
                })
                .await
        })
    };
    tokio::task::spawn_blocking(move || has_started.recv())
        .await
        .unwrap()
        .expect("the blocking transaction runs");

    // The third search takes the memories served to 300: the actor starts writing their
    // access times, which wait behind the held writer thread.
    assert_eq!(search(&node, WORDS[2]).await.hits.len(), 100);
    // The next read is answered meanwhile. Had the actor waited for that write, it would
    // wait until the release below, so the bound is only there to fail instead of hanging.
    let again = tokio::time::timeout(Duration::from_secs(120), search(&node, WORDS[0]))
        .await
        .expect("a read waited in the actor's mailbox for another read's access times");
    assert_eq!(again.hits.len(), 100);
    assert_eq!(stored_access_times(&node).await, 0, "nothing committed yet");

    release.send(()).unwrap();
    blocker.await.unwrap().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while stored_access_times(&node).await < 300 {
        assert!(
            Instant::now() < until,
            "timed out waiting for the access times to be stored"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A sweep waits for whatever is being written, so the cache has every time after it.
    node.directory
        .call(&alice(), |r| UserMsg::Sweep(SweepScope::ALL, r))
        .await
        .unwrap();
    let listed = alice_memories(&node, Some(MemoryKind::Episodic)).await;
    assert_eq!(listed.len(), 300);
    assert!(
        listed.iter().all(|m| m.last_accessed_at.is_some()),
        "and in the cache"
    );
}
