//! The MCP server (`engram-node mcp`) under the official MCP client: this test starts a real
//! node, makes a tenant's gateway and admin keys, and runs `tests/tests/mcp/client.py`, which
//! drives `engram-node mcp` with the `mcp` Python package over stdio and over streamable
//! HTTP and must pass every check:
//!
//! - stdio: the ten tools are listed with their descriptions, input schemas and annotations
//!   (forget_user destructive, the reads read-only); add_turn then get_context shows the
//!   turn, and add_turn retried with the same request_id is written once; write_memory then
//!   search_memories (polled until found), list_memories by kind and status, and
//!   set_memory_status; feedback, list_sessions and recall_intent answer; forget_user
//!   (admin key) leaves nothing; bad arguments come back as tool errors carrying the API's
//!   status and code (400 `invalid_input`, 404 `not_found`, 403 `forbidden` for a gateway
//!   key's forget_user), and arguments outside a tool's schema (a kind not in its enum, a
//!   misspelt field) as the server's own `invalid_input` error; a wrong key is a 401 tool
//!   error, an unreachable node an `unavailable` one, and the server answers on after each;
//!   its log names the tool calls but holds no user text, memory text or key.
//! - streamable HTTP: `--listen 127.0.0.1:0` prints the bound address, which the script waits
//!   for; a request without a key, with a wrong key or with another scheme is refused (401),
//!   and so is the official client with a wrong key; a gateway client's forget_user is
//!   forbidden where an admin client's succeeds on the same server (each client acts with
//!   its own key); SIGTERM stops the server with status 0.
//!
//! More tests need no Python: the server reaches an HTTPS node through `--ca-file` (its
//! gate checks a good key and a wrong one over TLS), and one trusting another CA reaches
//! nothing (503 `unavailable`); a refused request whose body arrives after its headers
//! leaves its keep-alive connection usable for the next request (the server reads the body
//! before refusing; unread, hyper closed the connection under the client's next request); a
//! session serves only the key that opened it (another tenant's key on it is refused 403, an
//! unknown session 404); a valid key works through the server while the server's address
//! floods the node with unknown key ids; and connections that stall in their headers are
//! closed after `--header-read-timeout`.
//!
//! The nodes run without inference (searches rank by words) and start at once. The
//! interpreter is the project's virtual environment, `${ENGRAM_CACHE:-~/.cache/engram}/venv`,
//! where `.ci/setup` installs `mcp==2.3.0`. A missing interpreter or package fails the test,
//! naming it and what `.ci/setup` installs, on any machine, under CI or not: no test here
//! skips.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use engram_tests::harness::{
    HttpClient, Sandbox, checked_python, node_binary, workspace_root, write_secret,
};
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper::body::Bytes;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::json;

/// How long the script may take (about 10 s on an idle machine; a busy 2-core one is slower).
const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

/// The MCP client the script needs, at the version `.ci/setup` installs.
const IMPORT_CHECK: &str = "import importlib.metadata as m, mcp, httpx2; \
                            assert m.version('mcp') == '2.3.0', m.version('mcp')";

/// The interpreter, when it has the MCP client; otherwise why not.
fn python() -> Result<PathBuf, String> {
    checked_python(IMPORT_CHECK, "the MCP client mcp==2.3.0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_client_uses_every_tool_over_stdio_and_http() {
    let python = python().unwrap_or_else(|why| panic!("the MCP client test cannot run: {why}"));
    let binary = node_binary().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("mcp")
        .set("inference.enabled", false)
        .start()
        .await;
    let (gateway, _) = node.must_make_key("mcp", "gateway", "mcp-gateway").await;
    let (admin, _) = node.must_make_key("mcp", "admin", "mcp-admin").await;
    eprintln!("node ready in {:?}", started.elapsed());

    let logs = sandbox.path().join("mcp-logs");
    std::fs::create_dir_all(&logs).expect("the MCP servers' log directory");
    let output_path = sandbox.path().join("client.log");
    let output = std::fs::File::create(&output_path).expect("the script's log file");
    let mut child = Command::new(&python)
        .arg(workspace_root().join("tests/tests/mcp/client.py"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("ENGRAM_NODE_BIN", &binary)
        .env("ENGRAM_URL", node.url())
        .env("ENGRAM_GATEWAY_KEY", &gateway)
        .env("ENGRAM_ADMIN_KEY", &admin)
        .env("ENGRAM_MCP_LOGS", &logs)
        .env_remove("ENGRAM_API_KEY")
        .current_dir(sandbox.path())
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("the script's log file"))
        .stderr(output)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));

    let script = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the script") {
            break status;
        }
        if script.elapsed() > SCRIPT_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            let output = std::fs::read_to_string(&output_path).unwrap_or_default();
            panic!("the MCP client still running after {SCRIPT_DEADLINE:?}; its output:\n{output}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let output = std::fs::read_to_string(&output_path).expect("the script's log");
    println!("{output}");
    eprintln!("the MCP client took {:?}", script.elapsed());
    if !status.success() {
        let mut servers = String::new();
        for entry in std::fs::read_dir(&logs).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            servers.push_str(&format!("--- {}\n{text}\n", entry.path().display()));
        }
        panic!("the MCP client failed ({status}):\n{output}\nthe MCP servers' logs:\n{servers}");
    }
    assert!(
        output.contains("all 11 checks passed"),
        "every check of the script must run: {output}"
    );
}

/// A CA whose certificate is `<dir>/<name>.pem`.
fn certificate_authority(dir: &Path, name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(DnType::CommonName, name);
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), issuer.pem()).unwrap();
    issuer
}

/// `engram-node mcp --transport http` on a free port, killed when dropped.
struct McpServer {
    process: Child,
    url: String,
}

impl McpServer {
    /// Starts it with `args` and waits (with a deadline) for the line naming its address.
    fn start(args: &[&str]) -> McpServer {
        let binary = node_binary().unwrap_or_else(|e| panic!("{e}"));
        let mut process = Command::new(binary)
            .args(["mcp", "--transport", "http", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("ENGRAM_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("engram-node mcp starts");
        let stderr = process.stderr.take().expect("its stderr");
        let (lines, heard) = mpsc::channel();
        // Reads to the end: a closed pipe would fail the server's next log line.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("mcp: {line}");
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match heard.recv_timeout(left) {
                Ok(line) => {
                    if let Some((_, url)) = line.split_once("listening on ") {
                        break url.trim().to_owned();
                    }
                }
                Err(e) => panic!("engram-node mcp did not say where it listens: {e}"),
            }
        };
        McpServer { process, url }
    }

    /// `initialize` as an MCP client sends it, with `key`.
    async fn initialize(&self, key: &str) -> (StatusCode, String) {
        let (base, path) = self.url.rsplit_once('/').expect("an endpoint URL");
        let request = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "engram-tests", "version": "0"}
            }
        });
        let reply = HttpClient::new(base)
            .with_key(key)
            .with_header("accept", "application/json, text/event-stream")
            .post(&format!("/{path}"), &request)
            .await
            .unwrap_or_else(|e| panic!("initialize at {}: {e}", self.url));
        (reply.status, reply.text())
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_server_reaches_an_https_node_through_its_ca_file() {
    let sandbox = Sandbox::new();
    let dir = sandbox.path();
    let ca = certificate_authority(dir, "gateway-ca");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "mcp-tls");
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("node.pem"), cert.pem()).unwrap();
    write_secret(&dir.join("node.key"), &key.serialize_pem());
    let ca_file = dir.join("gateway-ca.pem");
    let node = sandbox
        .node("mcp-tls")
        .set("inference.enabled", false)
        .https(&dir.join("node.pem"), &dir.join("node.key"), &ca_file)
        .start()
        .await;
    assert!(node.url().starts_with("https://"), "{}", node.url());
    let (gateway, _) = node.must_make_key("mcp", "gateway", "mcp-tls").await;

    let url = node.url();
    let trusting = McpServer::start(&["--url", &url, "--ca-file", ca_file.to_str().unwrap()]);
    let (status, body) = trusting.initialize(&gateway).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("\"serverInfo\""), "{body}");
    // The node itself refuses a wrong key, over the same TLS connection.
    let (status, body) = trusting.initialize("egk_0000000000000000_wrong").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("unauthenticated"), "{body}");

    // A server trusting another CA cannot verify the node: nothing reaches it.
    certificate_authority(dir, "other-ca");
    let other = dir.join("other-ca.pem");
    let distrusting = McpServer::start(&["--url", &url, "--ca-file", other.to_str().unwrap()]);
    let (status, body) = distrusting.initialize(&gateway).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("unavailable"), "{body}");

    // An https:// URL without a CA file is refused at start.
    let binary = node_binary().unwrap_or_else(|e| panic!("{e}"));
    let refused = Command::new(binary)
        .args(["mcp", "--transport", "http", "--url", &url])
        .stdin(Stdio::null())
        .output()
        .expect("engram-node mcp runs");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--ca-file"), "{said}");
}

/// One HTTP/1.1 response read off `stream`: its status line and body.
fn read_response(stream: &mut TcpStream) -> (String, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).expect("reading a response");
        assert!(n > 0, "the connection closed before a response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a content-length");
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).expect("reading a body");
        assert!(n > 0, "the connection closed inside a body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let status = head.lines().next().unwrap_or_default().to_owned();
    (
        status,
        String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned(),
    )
}

#[test]
fn a_refused_request_leaves_its_connection_usable() {
    // No node: a request without a key is refused before the node would be asked.
    let server = McpServer::start(&["--url", "http://127.0.0.1:1"]);
    let address = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut stream = TcpStream::connect(&address).expect("connecting");
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    for round in 0..10 {
        stream.write_all(head.as_bytes()).unwrap();
        // The body a moment after the headers, as a client writing them apart sends it: the
        // refusal must not leave it unread.
        std::thread::sleep(Duration::from_millis(2));
        stream.write_all(body.as_bytes()).unwrap();
        let (status, answer) = read_response(&mut stream);
        assert!(
            status.starts_with("HTTP/1.1 401"),
            "round {round}: {status} {answer}"
        );
        assert!(
            answer.contains("unauthenticated"),
            "round {round}: {answer}"
        );
    }
}

/// `POST /mcp` of `message` with `key` on `session` (none: a new one); the status, the
/// session the answer names, and the body.
async fn mcp_post(
    url: &str,
    key: &str,
    session: Option<&str>,
    message: &serde_json::Value,
) -> (StatusCode, Option<String>, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut request = hyper::Request::post(url)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let request = request
        .body(Full::new(Bytes::from(message.to_string())))
        .unwrap();
    let exchange = async {
        let response = client.request(request).await.expect("an answer");
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, session, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .expect("an answer within a minute")
}

fn initialize() -> serde_json::Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "engram-tests", "version": "0"}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_serves_only_the_key_that_opened_it() {
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("mcp-sessions")
        .set("inference.enabled", false)
        .start()
        .await;
    let (alice, _) = node.must_make_key("tenant-a", "gateway", "a").await;
    let (bob, _) = node.must_make_key("tenant-b", "admin", "b").await;
    let server = McpServer::start(&["--url", &node.url()]);

    let (status, session, body) = mcp_post(&server.url, &alice, None, &initialize()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let session = session.expect("initialize names its session");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = mcp_post(&server.url, &alice, Some(&session), &initialized).await;
    assert!(status.is_success(), "{status} {body}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    // Another tenant's key, good in itself, is refused on alice's session, and named why.
    let (status, _, body) = mcp_post(&server.url, &bob, Some(&session), &list).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("\"forbidden\""), "{body}");
    assert!(body.contains("another API key"), "{body}");
    assert!(!body.contains("add_turn"), "{body}");
    // A session the server never opened is not found (an MCP client then opens a new one).
    let (status, _, body) = mcp_post(&server.url, &alice, Some("no-such-session"), &list).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // The key that opened it still uses it.
    let (status, _, body) = mcp_post(&server.url, &alice, Some(&session), &list).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("add_turn"), "{body}");
    // And bob opens a session of his own.
    let (status, theirs, body) = mcp_post(&server.url, &bob, None, &initialize()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_ne!(theirs.as_deref(), Some(session.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_key_works_through_mcp_while_its_address_floods_unknown_key_ids() {
    let sandbox = Sandbox::new();
    let node = sandbox
        .node("mcp-guessing")
        .set("inference.enabled", false)
        .set("security.key-lookup-rate", 1)
        .set("security.key-lookup-burst", 5)
        .start()
        .await;
    // Made with the root key, which costs no key lookup; never used before the flood.
    let (gateway, _) = node.must_make_key("guessed", "gateway", "real").await;
    let server = McpServer::start(&["--url", &node.url()]);
    // Every client here, and the MCP server, is 127.0.0.1: flood the node from it until the
    // address is over its budget of key lookups.
    let guesser = HttpClient::new(&node.url());
    let mut limited = false;
    for i in 0..200 {
        let reply = guesser
            .clone()
            .with_key(&format!("egk_{i:016x}_guess"))
            .get("/v1/users/u/memories")
            .await
            .unwrap();
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            limited = true;
            break;
        }
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text());
    }
    assert!(limited, "the guessing was never throttled");
    // The valid key is served directly and through the MCP server.
    let direct = guesser
        .clone()
        .with_key(&gateway)
        .get("/v1/users/u/memories")
        .await
        .unwrap();
    assert_eq!(direct.status, StatusCode::OK, "{}", direct.text());
    let (status, session, body) = mcp_post(&server.url, &gateway, None, &initialize()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(session.is_some(), "{body}");
    // Guessing is still throttled.
    let reply = guesser
        .clone()
        .with_key("egk_00000000000fffff_guess")
        .get("/v1/users/u/memories")
        .await
        .unwrap();
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.text()
    );
}

#[test]
fn connections_that_stall_in_their_headers_are_closed_after_the_header_read_timeout() {
    // No node: nothing here gets as far as asking it.
    let server = McpServer::start(&["--url", "http://127.0.0.1:1", "--header-read-timeout", "1s"]);
    let address = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let opened = Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&address).expect("connecting");
        stream
            .write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\nauthorization: Bea")
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stalled.push(stream);
    }
    // Meanwhile a whole request is answered (401: it has no key).
    let mut whole = TcpStream::connect(&address).expect("connecting");
    whole
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    whole
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
                 content-length: 2\r\n\r\n{{}}"
            )
            .as_bytes(),
        )
        .unwrap();
    let (status, _) = read_response(&mut whole);
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    // Each stalled one is closed once its second is up (read: end of stream, or a reset).
    for (i, stream) in stalled.iter_mut().enumerate() {
        let mut buf = [0_u8; 256];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    panic!(
                        "stalled connection {i} still open after {:?}",
                        opened.elapsed()
                    )
                }
                Err(_) => break,
            }
        }
    }
    assert!(opened.elapsed() >= Duration::from_millis(900));
}
