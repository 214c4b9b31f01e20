//! Limits that hold on a real node: a YAML document of aliases is refused before it is
//! expanded, and connections that stall in their request's headers, sit idle, or never
//! finish a cluster handshake are closed within the configured bounds while other clients
//! are served.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use engram_tests::harness::{HttpClient, Node, Sandbox, field};
use hyper::{Method, StatusCode};
use tokio::net::TcpStream;

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

/// The cluster address a node logged.
fn cluster_addr(node: &Node) -> SocketAddr {
    node.log()
        .iter()
        .find(|l| l.contains("cluster transport listening"))
        .and_then(|l| field(l, "addr"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("node {} logged no cluster address", node.spec().id()))
}

/// A connection to `addr` that has sent `bytes`, to be watched without blocking.
fn open(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).expect("connecting");
    stream.write_all(bytes).expect("writing");
    stream.set_nonblocking(true).unwrap();
    TcpStream::from_std(stream).unwrap()
}

/// Completes when the peer closes `connection` (end of stream or a reset); what it sent
/// before is ignored (a 408 or nothing).
async fn closed(connection: &TcpStream) {
    let mut buf = [0_u8; 256];
    loop {
        if connection.readable().await.is_err() {
            return;
        }
        match connection.try_read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Waits until every connection is closed, failing after `deadline`.
async fn all_closed(connections: &[TcpStream], what: &str, deadline: Instant) {
    for (i, connection) in connections.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, closed(connection))
            .await
            .is_err()
        {
            panic!("{what} {i} was still open at the deadline");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_idle_connections_are_closed_by_their_deadlines_while_others_are_served() {
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("stalls")
        .set("inference.enabled", false)
        .set("http.header-read-timeout", "1s")
        .set("cluster.handshake-timeout", "1s")
        .start()
        .await;
    let gateway = node.addr();
    let cluster = cluster_addr(&node);
    let opened = Instant::now();
    // Gateway connections that send part of a request's head and stop, and one that sends
    // nothing; cluster connections that send nothing, or the start of a frame and stop.
    let mut http = Vec::new();
    for i in 0..40 {
        let partial: &[u8] = if i == 0 {
            b""
        } else {
            b"GET /health HTTP/1.1\r\nhost: engram\r\nx-slow: "
        };
        http.push(open(gateway, partial));
    }
    let mut links = Vec::new();
    for i in 0..8 {
        let partial: &[u8] = if i % 2 == 1 { &[0, 0, 0, 0] } else { b"" };
        links.push(open(cluster, partial));
    }
    // Meanwhile a client is served.
    let client = HttpClient::fresh_connections(&node.url());
    let health = client.get("/health").await.unwrap();
    assert_eq!(health.status, StatusCode::OK, "{}", health.text());

    // Each is closed soon after its 1 s bound (the deadline leaves room for a busy host).
    let deadline = opened + Duration::from_secs(15);
    all_closed(&http, "gateway connection", deadline).await;
    all_closed(&links, "cluster connection", deadline).await;

    // A keep-alive connection idle after its response is closed too.
    let idle = open(gateway, b"GET /health HTTP/1.1\r\nhost: engram\r\n\r\n");
    let since = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), closed(&idle))
        .await
        .expect("an idle keep-alive connection stayed open");
    assert!(
        since.elapsed() >= Duration::from_millis(900),
        "closed too soon"
    );

    let metrics = client.get("/metrics").await.unwrap().text();
    let timeouts: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("engram_link_handshake_timeouts_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_default();
    assert!(
        timeouts >= 4.0,
        "{timeouts} cluster handshake timeouts counted"
    );
    assert!(
        node.log()
            .iter()
            .any(|l| l.contains("did not authenticate in time")),
        "no warning of a cluster handshake timeout"
    );
}
