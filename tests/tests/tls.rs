//! TLS end to end, with real `engram-node` processes, real sockets and real handshakes: the
//! gateway serving HTTPS only, links between nodes in mutual TLS, a node whose cluster
//! certificate another CA signed kept out of the cluster's links, and silent connections to
//! the cluster port that stop nobody's link.
//!
//! Certificates are made here, at test time, with rcgen: one CA for the gateways (node
//! certificates for `127.0.0.1`) and another for the cluster (node certificates for
//! `engram-cluster`, with both TLS roles), as `cluster.toml` advises. The nodes share one
//! SQLite file and run without the embedding pool, as in `cluster.rs`. Every wait is on a
//! condition with a deadline.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram_tests::chaos::{metric, metric_at_least, settled, texts, user_of};
use engram_tests::harness::{
    HttpClient, HttpError, Node, NodeSpec, Sandbox, field, node_binary, turn, write_secret,
};
use hyper::StatusCode;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

/// A certificate authority writing its certificate and the ones it issues into a directory.
struct Ca {
    dir: PathBuf,
    name: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, as files.
struct Issued {
    cert: PathBuf,
    key: PathBuf,
}

impl Ca {
    /// A new CA `name`; its certificate is written to `<dir>/<name>.pem`.
    fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), issuer.pem()).unwrap();
        Ca {
            dir: dir.to_owned(),
            name: name.to_owned(),
            issuer,
        }
    }

    /// The CA's certificate file.
    fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// Issues `<name>.pem` and `<name>.key` (mode 0600) for `sans`, usable as a TLS server
    /// and client.
    fn issue(&self, name: &str, sans: &[&str]) -> Issued {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let issued = Issued {
            cert: self.dir.join(format!("{name}.pem")),
            key: self.dir.join(format!("{name}.key")),
        };
        std::fs::write(&issued.cert, cert.pem()).unwrap();
        write_secret(&issued.key, &key.serialize_pem());
        issued
    }
}

/// The test's certificate authorities.
struct Pki {
    gateway: Ca,
    cluster: Ca,
}

impl Pki {
    fn new(sandbox: &Sandbox) -> Pki {
        Pki {
            gateway: Ca::new(sandbox.path(), "gateway-ca"),
            cluster: Ca::new(sandbox.path(), "cluster-ca"),
        }
    }

    /// Node `id` on the sandbox's shared store, serving HTTPS with a certificate of the
    /// gateway CA, linked with a certificate of `cluster_ca` and trusting `trusted` for its
    /// peers.
    fn node(&self, sandbox: &Sandbox, id: &str, cluster_ca: &Ca, trusted: &Path) -> NodeSpec {
        let gateway = self
            .gateway
            .issue(&format!("{id}-gateway"), &["127.0.0.1", "localhost"]);
        let link = cluster_ca.issue(&format!("{id}-cluster"), &["engram-cluster"]);
        sandbox
            .shared_node(id)
            .set("inference.enabled", false)
            .https(&gateway.cert, &gateway.key, &self.gateway.cert())
            .cluster_tls(trusted, &link.cert, &link.key)
    }

    /// A node of the cluster.
    fn member(&self, sandbox: &Sandbox, id: &str) -> NodeSpec {
        self.node(sandbox, id, &self.cluster, &self.cluster.cert())
    }
}

const SERVED_FOR_PEERS: &str = "engram_requests_served_for_peers_total";
const FORWARDED: &str = "engram_requests_forwarded_total";
const DIALS: &str = "engram_peer_dials_total";

/// `engram-node <args> --config <spec's file>`, run to completion.
async fn node_command(spec: &NodeSpec, args: &[&str]) -> std::process::Output {
    let (config, args) = (
        spec.config_path(),
        args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>(),
    );
    tokio::task::spawn_blocking(move || {
        Command::new(node_binary().unwrap())
            .args(&args)
            .arg("--config")
            .arg(config)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Appends a turn through `client` until it is answered 200 (links come up within a few
/// dial rounds), at most `deadline`.
async fn append_until_ok(
    client: &HttpClient,
    user: &str,
    body: &serde_json::Value,
    deadline: Duration,
) {
    let until = Instant::now() + deadline;
    loop {
        match client.append_turn(user, body).await {
            Ok(reply) if reply.status == StatusCode::OK => return,
            Ok(_) | Err(_) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(reply) => panic!(
                "no 200 within {deadline:?}: {} {}",
                reply.status,
                reply.text()
            ),
            Err(err) => panic!("no 200 within {deadline:?}: {err}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_serve_https_only_and_forward_over_mutual_tls_links() {
    let sandbox = Sandbox::new();
    let pki = Pki::new(&sandbox);
    // a logs at debug level: neither the cookie nor a key may show up even there.
    let a = pki
        .member(&sandbox, "tls-a")
        .set("log.level", "debug")
        .start()
        .await;
    let mut b = pki.member(&sandbox, "tls-b").start().await;
    for node in [&a, &b] {
        let started = node
            .log()
            .into_iter()
            .find(|l| l.contains("node started"))
            .unwrap();
        assert!(
            started.contains("https=true") && started.contains("mutual-tls"),
            "{started}"
        );
    }
    // Every status request below is HTTPS, verified against the gateway CA.
    let clients = [("tls-a", a.client()), ("tls-b", b.client())];
    assert!(clients[0].1.base().starts_with("https://"));
    let owners = settled(&clients, Duration::from_secs(30)).await;

    // A user of b written through a: a forwards it to b over their TLS link.
    let user = user_of(&owners, "tls-b", "tls-user");
    let (a_client, b_client) = (&clients[0].1, &clients[1].1);
    let reply = a_client
        .must_append_turn(&user, &turn("tls-1", "s1", "through a", "ok"))
        .await;
    assert_eq!(reply["seq"], 0, "{reply}");
    assert_eq!(texts(b_client, &user).await, ["through a"]);
    assert!(metric(a_client, FORWARDED).await >= 1.0);
    assert!(metric(b_client, SERVED_FOR_PEERS).await >= 1.0);

    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let plain = HttpClient::new(&format!("http://{}", a.addr()));
    match plain.get("/health").await {
        Err(HttpError::Connect(_) | HttpError::Transport(_)) => {}
        Err(HttpError::Timeout) => panic!("plain HTTP hung instead of failing"),
        Ok(reply) => panic!("plain HTTP was answered: {} {}", reply.status, reply.text()),
    }
    // A client that trusts another CA refuses the gateway's certificate.
    let stranger = Ca::new(sandbox.path(), "stranger-ca");
    let wary = HttpClient::trusting(&a.url(), &stranger.cert());
    match wary.get("/health").await {
        Err(HttpError::Connect(reason)) => {
            assert!(reason.contains("UnknownIssuer"), "{reason}");
        }
        other => panic!("a certificate of an unknown CA was accepted: {other:?}"),
    }
    // The HTTPS port still serves after both.
    a_client.must_get("/health").await;

    // The operator commands work against a TLS node's configuration.
    let status = node_command(a.spec(), &["status"]).await;
    let view = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{view}");
    assert!(
        view.lines().any(|l| l.starts_with("tls-a"))
            && view.lines().any(|l| l.starts_with("tls-b")),
        "{view}"
    );
    // Draining b hands its shards to a and b exits cleanly: graceful shutdown of an HTTPS
    // gateway.
    let drain = node_command(b.spec(), &["drain", "--wait", "60s"]).await;
    assert!(
        drain.status.success(),
        "{}",
        String::from_utf8_lossy(&drain.stderr)
    );
    let exit = b.wait_exit(Duration::from_secs(30)).await;
    assert!(exit.success(), "b exits cleanly: {exit}");
    let alone = [("tls-a", a.client())];
    settled(&alone, Duration::from_secs(30)).await;
    assert_eq!(texts(a_client, &user).await, ["through a"]);

    let cookie = std::fs::read_to_string(sandbox.cookie_file()).unwrap();
    let log = a.log();
    assert!(
        log.iter().any(|l| l.contains("DEBUG")),
        "debug logging was on"
    );
    for line in log.iter().chain(&b.log()) {
        assert!(
            !line.contains(cookie.trim()) && !line.contains("PRIVATE KEY"),
            "a log line carries a secret: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_certificate_from_another_ca_gets_no_link_and_serves_no_peer() {
    let sandbox = Sandbox::new();
    let pki = Pki::new(&sandbox);
    // The intruder has the cookie and trusts the cluster CA (as well as its own), so the
    // only thing between it and the cluster is that its certificate comes from another CA:
    // the nodes must check the client certificate of every link they accept.
    let foreign = Ca::new(sandbox.path(), "foreign-ca");
    let trusts_both = sandbox.path().join("both-cas.pem");
    std::fs::write(
        &trusts_both,
        std::fs::read_to_string(pki.cluster.cert()).unwrap()
            + &std::fs::read_to_string(foreign.cert()).unwrap(),
    )
    .unwrap();
    let quick = |spec: NodeSpec| spec.set("cluster.handoff-wait", "1s");
    let a = quick(pki.member(&sandbox, "ca-a")).start().await;
    let b = quick(pki.member(&sandbox, "ca-b")).start().await;
    let intruder = quick(pki.node(&sandbox, "ca-x", &foreign, &trusts_both))
        .start()
        .await;
    let clients = [
        ("ca-a", a.client()),
        ("ca-b", b.client()),
        ("ca-x", intruder.client()),
    ];
    // The shared store still gives the intruder its share of the shards.
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let (a_client, b_client, x_client) = (&clients[0].1, &clients[1].1, &clients[2].1);

    // The members link: a user of b is served through a.
    let of_b = user_of(&owners, "ca-b", "ca-b-user");
    append_until_ok(
        a_client,
        &of_b,
        &turn("ca-1", "s1", "between members", "ok"),
        Duration::from_secs(20),
    )
    .await;

    // The intruder dials the members every round; each refuses its certificate in the
    // handshake (the members' own dials fail on its certificate too, at debug level).
    for member in [&a, &b] {
        logged(member, "UnknownIssuer", Duration::from_secs(30)).await;
    }
    metric_at_least(x_client, DIALS, 4.0, Duration::from_secs(30)).await;

    // A user of the intruder asked at a: a cannot reach it, and says so.
    let of_x = user_of(&owners, "ca-x", "ca-x-user");
    let reply = a_client
        .append_turn(&of_x, &turn("ca-2", "s1", "for the intruder", "ok"))
        .await
        .unwrap();
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["code"], "not_owner", "{}", reply.text());
    // A user of a asked at the intruder: it cannot hand the request to a.
    let of_a = user_of(&owners, "ca-a", "ca-a-user");
    let reply = x_client
        .append_turn(&of_a, &turn("ca-3", "s1", "from the intruder", "ok"))
        .await
        .unwrap();
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        reply.text()
    );

    let served: HashMap<&str, f64> = HashMap::from([
        ("ca-a", metric(a_client, SERVED_FOR_PEERS).await),
        ("ca-x", metric(x_client, SERVED_FOR_PEERS).await),
    ]);
    assert_eq!(
        served["ca-a"], 0.0,
        "a served nothing for peers: {served:?}"
    );
    assert_eq!(
        served["ca-x"], 0.0,
        "the intruder served nothing for peers: {served:?}"
    );
    assert_eq!(metric(x_client, FORWARDED).await, 0.0);
    assert!(metric(b_client, SERVED_FOR_PEERS).await >= 1.0);
}

/// Waits until `node` has logged a line containing `needle`.
async fn logged(node: &Node, needle: &str, deadline: Duration) {
    let until = Instant::now() + deadline;
    while !node.log().iter().any(|l| l.contains(needle)) {
        assert!(
            Instant::now() < until,
            "node {} logged no {needle:?} within {deadline:?}",
            node.spec().id()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The address `node`'s cluster transport listens on, as it logged it.
fn cluster_addr(node: &Node) -> SocketAddr {
    node.log()
        .iter()
        .find(|l| l.contains("cluster transport listening"))
        .and_then(|l| field(l, "addr"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("node {} logged no cluster address", node.spec().id()))
}

/// Opens a link's TLS session to the cluster port `addr` as a peer would: verifying the
/// node against the cluster CA for `engram-cluster` and presenting `issued`, a certificate
/// of that CA. Fails unless the handshake completes within `deadline`.
async fn cluster_handshake(
    addr: SocketAddr,
    ca: &Path,
    issued: &Issued,
    deadline: Duration,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(&issued.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&issued.key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("engram-cluster").unwrap();
    let handshake = async {
        let tcp = TcpStream::connect(addr).await?;
        connector.connect(name, tcp).await
    };
    match tokio::time::timeout(deadline, handshake).await {
        Ok(Ok(_session)) => Ok(()),
        Ok(Err(err)) => Err(format!("handshake failed: {err}")),
        Err(_) => Err(format!("no handshake within {deadline:?}")),
    }
}

/// Waits until the other end closes `connection` (or resets it); an error if it sends
/// bytes instead, with how many.
async fn closed(connection: &TcpStream) -> Result<(), usize> {
    let mut buf = [0_u8; 64];
    loop {
        if connection.readable().await.is_err() {
            return Ok(());
        }
        match connection.try_read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(sent) => return Err(sent),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Ok(()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_to_the_cluster_port_neither_stop_links_nor_stay_open() {
    let sandbox = Sandbox::new();
    let pki = Pki::new(&sandbox);
    let a = pki.member(&sandbox, "quiet-a").start().await;
    let port = cluster_addr(&a);

    // Connections that never send a byte and stay open, as anyone who can reach the port
    // could open.
    let opened = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(port).await.unwrap());
    }
    // A peer's link still completes its handshake at once (with the node server's own
    // accept loop, it would wait behind the first silent connection for ever).
    let probe = pki.cluster.issue("probe-cluster", &["engram-cluster"]);
    let probed = cluster_handshake(port, &pki.cluster.cert(), &probe, Duration::from_secs(5)).await;
    assert_eq!(probed, Ok(()), "a peer's link was not accepted");

    // A second node joins while they are held, and requests are forwarded both ways.
    let b = pki.member(&sandbox, "quiet-b").start().await;
    let clients = [("quiet-a", a.client()), ("quiet-b", b.client())];
    let owners = settled(&clients, Duration::from_secs(30)).await;
    let (a_client, b_client) = (&clients[0].1, &clients[1].1);
    let of_a = user_of(&owners, "quiet-a", "quiet-a-user");
    append_until_ok(
        b_client,
        &of_a,
        &turn("quiet-1", "s1", "through b", "ok"),
        Duration::from_secs(20),
    )
    .await;
    let of_b = user_of(&owners, "quiet-b", "quiet-b-user");
    append_until_ok(
        a_client,
        &of_b,
        &turn("quiet-2", "s1", "through a", "ok"),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(texts(a_client, &of_a).await, ["through b"]);
    assert_eq!(texts(b_client, &of_b).await, ["through a"]);
    assert!(metric(a_client, SERVED_FOR_PEERS).await >= 1.0);

    // Each silent connection is closed by the node once its handshake times out (10 s).
    for connection in silent {
        let left = Duration::from_secs(20).saturating_sub(opened.elapsed());
        match tokio::time::timeout(left, closed(&connection)).await {
            Ok(Ok(())) => {}
            Ok(Err(sent)) => panic!("the node sent {sent} bytes to a silent connection"),
            Err(_) => panic!("a silent connection was still open after 20 s"),
        }
    }
    logged(&a, "tls handshake timed out", Duration::from_secs(5)).await;
    // Every silent connection is counted (the count may follow the close by a moment on a
    // busy machine: waited for, not read once).
    metric_at_least(
        a_client,
        "engram_link_handshake_timeouts_total",
        8.0,
        Duration::from_secs(30),
    )
    .await;
}

/// Writes `spec`'s configuration and runs `engram-node run` on it, expecting it to refuse to
/// start; returns its stderr.
async fn refused_start(spec: &NodeSpec) -> String {
    std::fs::create_dir_all(spec.data_dir()).unwrap();
    std::fs::write(spec.config_path(), spec.toml()).unwrap();
    let run = node_command(spec, &["run"]).await;
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "the node started: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_missing_certificate_or_an_open_cookie_refuses_to_start_naming_the_file() {
    let sandbox = Sandbox::new();
    let pki = Pki::new(&sandbox);
    let missing = sandbox.path().join("missing.pem");
    let spec = pki
        .member(&sandbox, "bad-cert")
        .set("http.tls-cert-file", missing.to_str().unwrap());
    let stderr = refused_start(&spec).await;
    assert!(
        stderr.contains(&format!("http.tls-cert-file {}", missing.display())),
        "{stderr}"
    );

    let cookie = sandbox.path().join("open.cookie");
    std::fs::write(&cookie, "0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&cookie, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let spec = sandbox
        .node("open-cookie")
        .set("cluster.cookie-file", cookie.to_str().unwrap());
    let stderr = refused_start(&spec).await;
    assert!(
        stderr.contains(&format!("cluster.cookie-file {}", cookie.display()))
            && stderr.contains("0644"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("0123456789abcdef"),
        "the cookie leaked: {stderr}"
    );
}
