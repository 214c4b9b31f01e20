//! The cluster transport: `ractor_cluster` between nodes, and one remote-capable shard-region
//! actor per node through which any node hands a user's request to the node that owns the
//! user's shard (DESIGN.md section 4).
//!
//! - Each node runs a `NodeServer` (Isolated mode) and dials every live member named in the
//!   membership table itself, again on every lease round until the peer's region is visible
//!   (ractor_cluster has no reconnect and no liveness timeout: death is decided by leases,
//!   never by TCP).
//! - The node accepts links itself, on `cluster.listen` ([`accept_links`]), and hands each
//!   connection to the node server. The node server's own listener, which would run every
//!   inbound TLS handshake inside its accept loop with no timeout (so one silent connection
//!   would stop it accepting), is bound to an ephemeral loopback port that nobody dials.
//! - With `[cluster] tls-*` set, links are mutual TLS (`crate::tls`): a connection becomes a
//!   link only once its handshake, with a client certificate the cluster CA signed, completes
//!   within [`LINK_HANDSHAKE_TIMEOUT`]; handshakes run in their own tasks, at most
//!   [`MAX_LINK_HANDSHAKES`] at once, so a slow or silent client costs only its own task.
//!   Every dial, of a member or a seed, goes through [`Transport::connect`], which verifies
//!   the peer the same way and presents this node's certificate. The cookie is checked on
//!   top, inside the encrypted link. Without TLS, accepted connections are handed over at
//!   once, as the node server's listener did.
//! - Per-user actors stay local. The only remote-capable actor is the [`Region`], which joins
//!   the process group `engram.region.<node id>`; peers find it there.
//! - A forwarded request travels as one versioned byte envelope ([`encode`] / [`decode`]):
//!   method, path, the authenticated caller, content type, `Idempotency-Key` and body in,
//!   status and body out
//!   ([`envelope`]). The receiving
//!   region decodes it fallibly inside its handler (a malformed frame is logged and answered
//!   with an error, never a panic) and replays it through its own HTTP router, marked as
//!   forwarded so that it is never forwarded again.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use engram_storage::model::Member;
use ractor::message::{BoxedDowncastErr, SerializedMessage};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::{ClientConnectErr, IncomingEncryptionMode, NodeServer, NodeServerMessage};
use std::sync::Mutex;
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::tls::ClusterTls;

mod envelope;
mod listen;

pub use envelope::{
    EnvelopeError, Forwarded, ForwardedReply, IDEMPOTENCY_KEY, decode, encode, into_response,
};
use listen::accept_links;

/// Marks a request replayed from a peer (it is served here or refused, never forwarded
/// again). A request extension, so no client can set it.
#[derive(Debug, Clone, Copy)]
pub struct ForwardedMark;
/// How long one dial of a peer may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest an inbound link may take to complete its TLS handshake.
pub const LINK_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Inbound TLS handshakes in progress at once; further connections wait in the listen
/// backlog until one finishes or times out.
pub const MAX_LINK_HANDSHAKES: usize = 64;
/// Messages of the shard-region actor: the one remote-capable message type of a node.
#[derive(Debug)]
pub enum RegionMsg {
    /// A request envelope from a peer, and where its reply envelope goes.
    Forward(Vec<u8>, RpcReplyPort<Vec<u8>>),
}

impl ractor::Message for RegionMsg {
    fn serializable() -> bool {
        true
    }

    fn serialize(self) -> Result<SerializedMessage, BoxedDowncastErr> {
        match self {
            RegionMsg::Forward(args, reply) => Ok(SerializedMessage::Call {
                variant: "forward".to_owned(),
                args,
                reply,
                metadata: None,
            }),
        }
    }

    fn deserialize(bytes: SerializedMessage) -> Result<Self, BoxedDowncastErr> {
        match bytes {
            SerializedMessage::Call { args, reply, .. } => Ok(RegionMsg::Forward(args, reply)),
            SerializedMessage::Cast { .. } | SerializedMessage::CallReply(..) => {
                Err(BoxedDowncastErr)
            }
        }
    }
}

/// Counters of the transport.
#[derive(Debug, Default)]
pub struct TransportMetrics {
    /// Requests this node forwarded to an owner.
    pub forwarded: AtomicU64,
    /// Forwarded requests this node served for peers.
    pub served_for_peers: AtomicU64,
    /// Forwards that failed (peer unreachable, timeout) and were retried or refused.
    pub forward_failures: AtomicU64,
    /// Malformed envelopes received.
    pub bad_envelopes: AtomicU64,
    /// Dials of peers.
    pub dials: AtomicU64,
    /// Inbound links whose TLS handshake failed (no certificate, one of another CA, not TLS).
    pub handshake_failures: AtomicU64,
    /// Inbound links that did not complete their TLS handshake within
    /// [`LINK_HANDSHAKE_TIMEOUT`].
    pub handshake_timeouts: AtomicU64,
}

/// The shard-region actor.
#[derive(Debug)]
pub struct Region;

/// What the region serves forwarded requests with.
pub struct RegionArgs {
    router: Router,
    metrics: Arc<TransportMetrics>,
}

impl Actor for Region {
    type Msg = RegionMsg;
    type State = RegionArgs;
    type Arguments = RegionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<RegionMsg>,
        args: RegionArgs,
    ) -> Result<RegionArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<RegionMsg>,
        msg: RegionMsg,
        state: &mut RegionArgs,
    ) -> Result<(), ActorProcessingErr> {
        let RegionMsg::Forward(bytes, reply) = msg;
        let (router, metrics) = (state.router.clone(), Arc::clone(&state.metrics));
        // Requests run concurrently; the region only dispatches.
        tokio::spawn(async move {
            let answer = match decode::<Forwarded>(&bytes) {
                Ok(request) => {
                    metrics.served_for_peers.fetch_add(1, Ordering::Relaxed);
                    serve_forwarded(router, request).await
                }
                Err(err) => {
                    metrics.bad_envelopes.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %err, "malformed envelope from a peer dropped");
                    error_reply(StatusCode::BAD_REQUEST, "bad_envelope", &err.to_string())
                }
            };
            let _ = reply.send(encode(&answer));
        });
        Ok(())
    }
}

fn error_reply(status: StatusCode, code: &str, message: &str) -> ForwardedReply {
    ForwardedReply {
        status: status.as_u16(),
        retry_after: Some("1".to_owned()),
        body: serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
    }
}

/// Replays a forwarded request through this node's router.
async fn serve_forwarded(router: Router, request: Forwarded) -> ForwardedReply {
    let mut builder = Request::builder()
        .method(request.method.as_str())
        .uri(request.uri.as_str())
        .extension(ForwardedMark)
        .extension(request.caller);
    if let Some(content_type) = &request.content_type {
        builder = builder.header(header::CONTENT_TYPE, content_type.as_str());
    }
    if let Some(key) = &request.idempotency_key {
        builder = builder.header(IDEMPOTENCY_KEY, key.as_slice());
    }
    let Ok(http) = builder.body(Body::from(request.body)) else {
        return error_reply(StatusCode::BAD_REQUEST, "bad_envelope", "unusable request");
    };
    let Ok(response) = router.oneshot(http).await;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    ForwardedReply {
        status,
        retry_after,
        body,
    }
}

/// Why a forward failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No session with the owner (not dialled yet, or down).
    #[error("node {0} is not reachable")]
    Unreachable(String),
    /// The owner did not answer in time, or the session broke.
    #[error("node {node} did not answer: {reason}")]
    NoAnswer {
        /// The owner.
        node: String,
        /// What happened.
        reason: String,
    },
    /// The answer was not an envelope this build reads.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
}

/// Why a dial opened no link.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// Refused or unreachable (the peer is down, or not listening yet).
    #[error("{0}")]
    Failed(String),
    /// The TLS handshake failed: the peer's certificate is not the cluster CA's or lacks
    /// `cluster.tls-server-name` (a configuration problem, worth a warning).
    #[error("tls handshake failed: {0}")]
    Tls(String),
    /// No answer within the dial timeout.
    #[error("timed out")]
    TimedOut,
}

/// This node's end of the transport.
pub struct Transport {
    node_id: String,
    server: ActorRef<NodeServerMessage>,
    /// Mutual TLS of every link, when configured.
    tls: Option<ClusterTls>,
    /// The task accepting links on `cluster.listen` ([`accept_links`]).
    acceptor: JoinHandle<()>,
    next_dial: Mutex<HashMap<String, (Instant, Duration)>>,
    /// Counters.
    pub metrics: Arc<TransportMetrics>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("node_id", &self.node_id)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

fn region_group(node_id: &str) -> String {
    format!("engram.region.{node_id}")
}

impl Transport {
    /// Listens on `listen` (`ip:port`; port 0 picks a free one) for links, starts the node
    /// server with the cluster cookie and, when given, mutual TLS; returns the transport with
    /// the address peers should dial.
    ///
    /// The node server's own listener is bound to an ephemeral port of `127.0.0.1` (still in
    /// TLS mode when TLS is on, so a local client gets no session from it without a
    /// certificate); every link that peers open arrives through [`accept_links`].
    pub async fn start(
        node_id: &str,
        listen: &str,
        cookie: String,
        tls: Option<ClusterTls>,
    ) -> std::io::Result<(Arc<Transport>, String)> {
        let addr: SocketAddr = listen.parse().map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("cluster.listen {listen:?}: {e}"),
            )
        })?;
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        // Port 0: the node server's listener reports the port it bound, which ractor_cluster
        // puts in the connection string it gives peers (`<ip>:<port>`); in Isolated mode
        // that string only serves to tell a connection to itself.
        let server = NodeServer::new(
            0,
            cookie,
            node_id.to_owned(),
            bound.ip().to_string(),
            tls.as_ref()
                .map(|tls| IncomingEncryptionMode::Tls(tls.acceptor.clone())),
            Some(ractor_cluster::node::NodeConnectionMode::Isolated),
        )
        .with_listen_addr(Ipv4Addr::LOCALHOST.into());
        let (server, _) = Actor::spawn(None, server, ())
            .await
            .map_err(|e| std::io::Error::other(format!("starting the node server: {e}")))?;
        tracing::info!(
            addr = %bound,
            tls = tls.is_some(),
            "cluster transport listening"
        );
        let metrics = Arc::<TransportMetrics>::default();
        let acceptor = tokio::spawn(accept_links(
            listener,
            server.clone(),
            tls.as_ref().map(|tls| tls.acceptor.clone()),
            Arc::clone(&metrics),
        ));
        Ok((
            Arc::new(Transport {
                node_id: node_id.to_owned(),
                server,
                tls,
                acceptor,
                next_dial: Mutex::new(HashMap::new()),
                metrics,
            }),
            bound.to_string(),
        ))
    }

    /// Starts this node's region, serving forwarded requests with `router`.
    pub async fn start_region(&self, router: Router) -> std::io::Result<ActorRef<RegionMsg>> {
        let args = RegionArgs {
            router,
            metrics: Arc::clone(&self.metrics),
        };
        let (region, _) = Actor::spawn(None, Region, args)
            .await
            .map_err(|e| std::io::Error::other(format!("starting the shard region: {e}")))?;
        ractor::pg::join(region_group(&self.node_id), vec![region.get_cell()]);
        Ok(region)
    }

    fn region_of(&self, node_id: &str) -> Option<ActorRef<RegionMsg>> {
        ractor::pg::get_members(&region_group(node_id))
            .into_iter()
            .find(|cell| !cell.get_id().is_local())
            .map(ActorRef::from)
    }

    fn dial_state(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Duration)>> {
        self.next_dial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `node_id`'s region is reachable now.
    pub fn reachable(&self, node_id: &str) -> bool {
        self.region_of(node_id).is_some()
    }

    /// Dials every live member whose region is not reachable, with a backoff per peer
    /// (doubling from 250 ms to 5 s while dials fail).
    pub async fn dial(&self, members: &[Member]) {
        for member in members {
            if member.node_id == self.node_id || self.reachable(&member.node_id) {
                self.dial_state().remove(&member.node_id);
                continue;
            }
            let now = Instant::now();
            let due = {
                let mut next = self.dial_state();
                let entry = next
                    .entry(member.node_id.clone())
                    .or_insert((now, Duration::from_millis(250)));
                if entry.0 > now {
                    false
                } else {
                    entry.0 = now + entry.1;
                    entry.1 = (entry.1 * 2).min(Duration::from_secs(5));
                    true
                }
            };
            if !due {
                continue;
            }
            self.metrics.dials.fetch_add(1, Ordering::Relaxed);
            match self.connect(&member.cluster_addr).await {
                Ok(()) => {}
                Err(err @ DialError::Tls(_)) => {
                    tracing::warn!(peer = %member.node_id, error = %err, "dial failed");
                }
                Err(err @ (DialError::Failed(_) | DialError::TimedOut)) => {
                    tracing::debug!(peer = %member.node_id, error = %err, "dial failed");
                }
            }
        }
    }

    /// Opens a link to the node server at `addr` (`host:port`), over TLS when configured,
    /// within [`DIAL_TIMEOUT`] (a blackholed peer would hold a plain connect for minutes).
    /// The session's own handshake (names, cookie) continues in the background.
    pub async fn connect(&self, addr: &str) -> Result<(), DialError> {
        let dial = async {
            match &self.tls {
                Some(tls) => {
                    ractor_cluster::client_connect_enc(
                        &self.server,
                        addr,
                        tls.connector.clone(),
                        tls.server_name.clone(),
                    )
                    .await
                }
                None => ractor_cluster::client_connect(&self.server, addr).await,
            }
        };
        match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(ClientConnectErr::Encryption(err))) => Err(DialError::Tls(err.to_string())),
            Ok(Err(ClientConnectErr::Socket(err))) => Err(DialError::Failed(err.to_string())),
            Ok(Err(ClientConnectErr::Messaging(err))) => {
                Err(DialError::Failed(format!("node server: {err}")))
            }
            Err(_) => Err(DialError::TimedOut),
        }
    }

    /// Hands `request` to `owner`'s region and waits up to `timeout` for its answer.
    pub async fn forward(
        &self,
        owner: &str,
        request: &Forwarded,
        timeout: Duration,
    ) -> Result<ForwardedReply, ForwardError> {
        let region = self
            .region_of(owner)
            .ok_or_else(|| ForwardError::Unreachable(owner.to_owned()))?;
        let bytes = encode(request);
        let result = region
            .call(|reply| RegionMsg::Forward(bytes, reply), Some(timeout))
            .await;
        let no_answer = |reason: String| ForwardError::NoAnswer {
            node: owner.to_owned(),
            reason,
        };
        match result {
            Ok(ractor::rpc::CallResult::Success(reply)) => {
                self.metrics.forwarded.fetch_add(1, Ordering::Relaxed);
                Ok(decode(&reply)?)
            }
            Ok(ractor::rpc::CallResult::Timeout) => {
                // TCP may not notice a dead link for minutes: drop the session so that the
                // dialer connects afresh (at once after a partition heals).
                if timeout >= Duration::from_secs(1) {
                    self.drop_session(owner).await;
                }
                Err(no_answer("timed out".to_owned()))
            }
            Ok(ractor::rpc::CallResult::SenderError) => Err(no_answer("session closed".to_owned())),
            Err(err) => Err(no_answer(err.to_string())),
        }
    }

    /// Closes the session with `node_id`, if there is one.
    async fn drop_session(&self, node_id: &str) {
        let sessions = self
            .server
            .call(NodeServerMessage::GetSessions, Some(Duration::from_secs(1)))
            .await;
        if let Ok(ractor::rpc::CallResult::Success(sessions)) = sessions {
            for session in sessions.values() {
                let peer = session
                    .peer_name
                    .as_ref()
                    .and_then(|n| n.name.split('@').next().map(str::to_owned));
                if peer.as_deref() == Some(node_id) {
                    tracing::info!(peer = %node_id, "dropping an unresponsive session");
                    session.actor.stop(Some("unresponsive".to_owned()));
                }
            }
        }
    }

    /// Closes the cluster port and stops the node server (and with it every session).
    pub fn stop(&self) {
        self.acceptor.abort();
        self.server.stop(None);
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;

    #[tokio::test]
    async fn a_replayed_request_carries_the_forwarded_idempotency_key() {
        let router = Router::new().route(
            "/v1/users/{user}/sessions/{session}/memory",
            axum::routing::delete(|headers: axum::http::HeaderMap| async move {
                headers
                    .get(IDEMPOTENCY_KEY)
                    .map(|v| v.as_bytes().to_vec())
                    .unwrap_or_default()
            }),
        );
        let request = Forwarded {
            method: "DELETE".into(),
            uri: "/v1/users/alice/sessions/s1/memory".into(),
            caller: crate::auth::Caller {
                principal: "0123456789abcdef".into(),
                scope: engram_storage::access::Scope::Gateway,
                root: false,
                tenant: "acme".into(),
                client: None,
            },
            content_type: None,
            idempotency_key: Some(b"clear-s1-once".to_vec()),
            body: Vec::new(),
        };
        let reply = serve_forwarded(router, request).await;
        assert_eq!((reply.status, reply.body), (200, b"clear-s1-once".to_vec()));
    }
}
