//! Limits that hold on a real node: a YAML document of aliases is refused before it is
//! expanded.

use std::time::{Duration, Instant};

use engram_tests::harness::Sandbox;
use hyper::{Method, StatusCode};

/// The resident memory of process `pid`, in bytes (VmRSS of /proc).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the node's status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib * 1024
}

/// A few-shot library of `copies` examples, all but the first an alias of the first, whose
/// question and SQL are one anchored string of `text` bytes: about 5 bytes a copy on the
/// wire, `2 * text` bytes a copy once expanded.
fn alias_bomb(copies: usize, text: usize) -> String {
    let mut doc = format!(
        "examples:\n- &e {{question: &q \"{}\", sql: *q, route: nl2sql, confidence: 0.9, \
         status: approved}}\n",
        "x".repeat(text)
    );
    for _ in 1..copies {
        doc.push_str("- *e\n");
    }
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_alias_bomb_is_refused_at_once_and_the_node_stays_small() {
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("yaml-bomb")
        .set("inference.enabled", false)
        .start()
        .await;
    let admin = node
        .client()
        .with_key(node.spec().keys().root())
        .with_header("x-engram-tenant", "acme");
    let pid = node.pid().expect("the node runs");
    // 12,000 aliases of a 10 KB example: 70 KB on the wire, about 240 MB expanded.
    let bomb = alias_bomb(12_000, 10 * 1024);
    assert!(bomb.len() < 100 * 1024, "{} bytes", bomb.len());
    let before = rss(pid);
    let started = Instant::now();
    let reply = admin
        .request_raw(
            Method::POST,
            "/v1/admin/few-shot/import?request_id=bomb",
            "application/yaml",
            bomb,
        )
        .await
        .unwrap();
    let took = started.elapsed();
    let grown = rss(pid).saturating_sub(before);
    eprintln!(
        "answered {} in {took:?}; the node grew by {} MB",
        reply.status,
        grown / (1024 * 1024)
    );
    assert!(
        grown < 100 * 1024 * 1024,
        "the node grew by {} MB",
        grown / (1024 * 1024)
    );
    assert!(took < Duration::from_secs(5), "refused after {took:?}");
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], "invalid_input", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("alias"), "{message}");
    assert!(
        !message.contains("xxxx"),
        "the answer echoes the document: {message}"
    );

    // A document without aliases is imported as before.
    let plain = "examples:\n- {question: how many orders, sql: SELECT count(*) FROM orders, \
                 route: nl2sql, confidence: 0.9, status: approved}\n";
    let reply = admin
        .request_raw(
            Method::POST,
            "/v1/admin/few-shot/import?request_id=plain",
            "application/yaml",
            plain,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()["created"], 1);
}
