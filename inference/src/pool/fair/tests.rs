//! Unit tests of the queue shares and the lanes' rotation (no model involved).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::config::TextRole;

fn request(key: &str, texts: usize, admitted: Instant) -> Request {
    request_at(key, texts, admitted, Priority::Interactive)
}

fn request_at(key: &str, texts: usize, admitted: Instant, priority: Priority) -> Request {
    let (tx, _rx) = ractor::concurrency::oneshot();
    Request {
        key: Arc::from(key),
        texts: vec![String::from("x"); texts],
        role: TextRole::Passage,
        priority,
        admitted,
        expires: None,
        reply: tx.into(),
    }
}

fn keys(batch: &[Request]) -> Vec<&str> {
    batch.iter().map(|r| &*r.key).collect()
}

#[test]
fn a_key_at_its_share_is_refused_while_another_key_is_admitted() {
    let shares = Shares::new(100, 50);
    assert_eq!(shares.cap(), 50);
    let (noisy, quiet): (Arc<str>, Arc<str>) = (Arc::from("noisy"), Arc::from("quiet"));
    for _ in 0..5 {
        assert_eq!(shares.reserve(&noisy, 10, || true), Ok(()));
    }
    assert_eq!(shares.reserve(&noisy, 1, || true), Err(Some(50)));
    assert_eq!(shares.reserve(&quiet, 10, || true), Ok(()));
    assert_eq!(shares.keys_waiting(), 2);
    // Texts that left the queue make room for their key again.
    shares.release("noisy", 10);
    assert_eq!(shares.reserve(&noisy, 10, || true), Ok(()));
}

#[test]
fn the_queue_wide_check_refuses_without_reserving() {
    let shares = Shares::new(100, 50);
    let key: Arc<str> = Arc::from("t");
    assert_eq!(shares.reserve(&key, 10, || false), Err(None));
    assert_eq!(shares.keys_waiting(), 0);
}

#[test]
fn a_key_with_nothing_waiting_may_queue_one_request_above_its_share() {
    let shares = Shares::new(10, 10);
    assert_eq!(shares.cap(), 1);
    let key: Arc<str> = Arc::from("t");
    assert_eq!(shares.reserve(&key, 8, || true), Ok(()));
    assert_eq!(shares.reserve(&key, 1, || true), Err(Some(8)));
    shares.release("t", 8);
    assert_eq!(shares.keys_waiting(), 0);
}

#[test]
fn batches_take_one_request_of_each_key_in_turn() {
    let now = Instant::now();
    let mut lanes = Lanes::default();
    for _ in 0..6 {
        lanes.push(request("noisy", 1, now));
    }
    lanes.push(request("quiet", 1, now));
    lanes.push(request("other", 1, now));
    assert_eq!(lanes.texts(), 8);
    // The quiet keys arrived behind six of the noisy key's requests, and still go in the
    // first batch.
    let first = lanes.take_batch(4);
    assert_eq!(keys(&first), ["noisy", "quiet", "other", "noisy"]);
    assert_eq!(keys(&lanes.take_batch(4)), ["noisy"; 4]);
    assert!(lanes.is_empty());
    assert_eq!(lanes.texts(), 0);
}

#[test]
fn a_request_larger_than_the_batch_goes_alone_and_is_not_passed_over() {
    let now = Instant::now();
    let mut lanes = Lanes::default();
    lanes.push(request("a", 1, now));
    lanes.push(request("b", 40, now));
    lanes.push(request("c", 1, now));
    assert_eq!(keys(&lanes.take_batch(32)), ["a"]);
    assert_eq!(keys(&lanes.take_batch(32)), ["b"]);
    assert_eq!(keys(&lanes.take_batch(32)), ["c"]);
}

#[test]
fn the_oldest_request_is_found_across_lanes() {
    let now = Instant::now();
    let earlier = now - Duration::from_millis(50);
    let mut lanes = Lanes::default();
    lanes.push(request("a", 1, now));
    lanes.push(request("b", 1, earlier));
    assert_eq!(lanes.oldest(), Some(earlier));
    assert_eq!(lanes.drain().count(), 2);
    assert!(lanes.is_empty());
    assert_eq!(lanes.oldest(), None);
}

#[test]
fn an_interactive_batch_holds_no_background_request_unless_filled() {
    let t0 = Instant::now();
    let mut queue = Queue::default();
    for _ in 0..4 {
        queue.push(request_at("pipeline", 8, t0, Priority::Background));
    }
    queue.push(request_at(
        "reader",
        1,
        t0 + Duration::from_millis(5),
        Priority::Interactive,
    ));
    assert_eq!(queue.texts(), 33);
    assert_eq!(queue.oldest(), Some(t0));
    let classes = |batch: &[Request]| {
        batch
            .iter()
            .map(|r| (r.key.to_string(), r.priority))
            .collect::<Vec<_>>()
    };
    // The query alone, though older background requests wait.
    let batch = queue.take_interactive(16);
    assert_eq!(
        classes(&batch),
        [("reader".to_owned(), Priority::Interactive)]
    );
    // With the interactive class empty, an interactive batch is empty: the background
    // requests are not handed to the interactive worker.
    assert!(queue.take_interactive(16).is_empty());
    assert!(queue.has_background() && !queue.has_interactive());
    // Filling (on a GPU) takes whole background requests that fit the room, and none when
    // the next one does not fit.
    assert!(queue.fill(7).is_empty());
    assert_eq!(
        classes(&queue.fill(15)),
        [("pipeline".to_owned(), Priority::Background)]
    );
    let batch = queue.take_background(16);
    assert_eq!(batch.len(), 2, "background requests fill whole batches");
    assert_eq!(queue.texts(), 8);
}
