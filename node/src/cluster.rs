//! The cluster transport: `ractor_cluster` between nodes, and one remote-capable shard-region
//! actor per node through which any node hands a user's request to the node that owns the
//! user's shard (docs/architecture.md, "Leases and fencing").
//!
//! - Each node runs a `NodeServer` (Isolated mode) and dials every live member named in the
//!   membership table itself, again on every lease round until the peer's region is visible
//!   (ractor_cluster has no reconnect and no liveness timeout: death is decided by leases,
//!   never by TCP alone).
//! - The node accepts links itself, on `cluster.listen` ([`accept_links`]), and hands each
//!   connection to the node server. The node server's own listener, which would run every
//!   inbound TLS handshake inside its accept loop with no timeout (so one silent connection
//!   would stop it accepting), is bound to an ephemeral loopback port that nobody dials.
//! - With `[cluster] tls-*` set, links are mutual TLS (`crate::tls`): a connection becomes a
//!   link only once its handshake, with a client certificate the cluster CA signed, completes
//!   within `cluster.handshake-timeout`; handshakes run in their own tasks, at most
//!   [`MAX_LINK_HANDSHAKES`] at once, so a slow or silent client costs only its own task.
//!   Every dial, of a member or a seed, goes through [`Transport::connect`], which verifies
//!   the peer the same way and presents this node's certificate. The cookie is checked on
//!   top, inside the encrypted link. Without TLS, accepted connections are handed over at
//!   once, as the node server's listener did.
//! - With or without TLS, an inbound session must authenticate (names and cookie) within
//!   `cluster.handshake-timeout` of reaching the node server, or it is closed
//!   (`listen::HandshakeDeadline`): a connection that sends nothing, or part of a
//!   handshake, holds nothing for longer.
//! - The node server's session events feed the lease round's suspicion of peers
//!   ([`Transport::watch_links`], `links`): a peer whose last session closed is taken over
//!   once its heartbeat is older than `cluster.suspect-confirm`, not `cluster.lease-timeout`.
//!   TCP still decides no death: a peer that keeps heartbeating keeps its shards.
//! - Per-user actors stay local. The only remote-capable actor is the [`Region`], which joins
//!   the process group `engram.region.<node id>`; peers find it there.
//! - The transport is the front door's [`PeerLink`]: a request for a user another node owns
//!   travels as one versioned frame of the typed request (`engram_actors::front`), the
//!   reader with it; the receiving region hands the bytes to its node's
//!   [`Users::serve_peer`], which decodes them fallibly (a malformed frame is answered with an
//!   error, never a panic) and serves the user locally, never forwarding again. No HTTP is
//!   replayed between nodes.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use engram_actors::cluster::LeaseManager;
use engram_actors::front::{LinkError, LinkFuture, PeerLink, Users};
use engram_storage::types::Member;
use ractor::message::{BoxedDowncastErr, SerializedMessage};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::{ClientConnectErr, IncomingEncryptionMode, NodeServer, NodeServerMessage};
use std::sync::Mutex;
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::metrics::LinkCounts;
use crate::tls::ClusterTls;

mod links;
mod listen;

use links::LinkWatch;
use listen::{HandshakeDeadline, accept_links};

/// How long one dial of a peer may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);
/// Inbound TLS handshakes in progress at once; further connections wait in the listen
/// backlog until one finishes or times out.
pub const MAX_LINK_HANDSHAKES: usize = 64;
/// Messages of the shard-region actor: the one remote-capable message type of a node.
#[derive(Debug)]
pub enum RegionMsg {
    /// A front-door frame from a peer, and where its answer's frame goes.
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

/// Counters of the transport (the front door counts what travels over it).
#[derive(Debug, Default)]
pub struct TransportMetrics {
    /// Dials of peers.
    pub dials: AtomicU64,
    /// Inbound links whose TLS handshake failed (no certificate, one of another CA, not TLS).
    pub handshake_failures: AtomicU64,
    /// Inbound links that did not complete their TLS handshake, or authenticate their
    /// session, within `cluster.handshake-timeout`.
    pub handshake_timeouts: AtomicU64,
}

impl TransportMetrics {
    /// The counters so far, for the node's metrics.
    pub fn counts(&self) -> LinkCounts {
        LinkCounts {
            dials: self.dials.load(Ordering::Relaxed),
            handshake_failures: self.handshake_failures.load(Ordering::Relaxed),
            handshake_timeouts: self.handshake_timeouts.load(Ordering::Relaxed),
        }
    }
}

/// The shard-region actor.
#[derive(Debug)]
pub struct Region;

impl Actor for Region {
    type Msg = RegionMsg;
    type State = Arc<Users>;
    type Arguments = Arc<Users>;

    async fn pre_start(
        &self,
        _myself: ActorRef<RegionMsg>,
        users: Arc<Users>,
    ) -> Result<Arc<Users>, ActorProcessingErr> {
        Ok(users)
    }

    async fn handle(
        &self,
        _myself: ActorRef<RegionMsg>,
        msg: RegionMsg,
        users: &mut Arc<Users>,
    ) -> Result<(), ActorProcessingErr> {
        let RegionMsg::Forward(frame, reply) = msg;
        let users = Arc::clone(users);
        // Requests run concurrently; the region only dispatches.
        tokio::spawn(async move {
            let _ = reply.send(users.serve_peer(&frame).await);
        });
        Ok(())
    }
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
    /// The sessions of each peer, for the lease round's suspicion.
    links: LinkWatch,
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
    /// the address peers should dial. An inbound link has `handshake_timeout` to complete its
    /// TLS handshake, and as long again to authenticate its session.
    ///
    /// The node server's own listener is bound to an ephemeral port of `127.0.0.1` (still in
    /// TLS mode when TLS is on, so a local client gets no session from it without a
    /// certificate); every link that peers open arrives through [`accept_links`].
    pub async fn start(
        node_id: &str,
        listen: &str,
        cookie: String,
        tls: Option<ClusterTls>,
        handshake_timeout: Duration,
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
        // Before any link opens, so that every session is counted.
        let links = LinkWatch::default();
        server
            .cast(NodeServerMessage::SubscribeToEvents {
                id: "engram.link-watch".to_owned(),
                subscription: Box::new(links.clone()),
            })
            .map_err(|e| std::io::Error::other(format!("watching the node server's links: {e}")))?;
        let metrics = Arc::<TransportMetrics>::default();
        server
            .cast(NodeServerMessage::SubscribeToEvents {
                id: "engram.handshake-deadline".to_owned(),
                subscription: Box::new(HandshakeDeadline::new(
                    handshake_timeout,
                    Arc::clone(&metrics),
                )),
            })
            .map_err(|e| {
                std::io::Error::other(format!("bounding the node server's handshakes: {e}"))
            })?;
        let acceptor = tokio::spawn(accept_links(
            listener,
            server.clone(),
            tls.as_ref().map(|tls| tls.acceptor.clone()),
            (handshake_timeout, Arc::clone(&metrics)),
        ));
        Ok((
            Arc::new(Transport {
                node_id: node_id.to_owned(),
                server,
                tls,
                acceptor,
                next_dial: Mutex::new(HashMap::new()),
                links,
                metrics,
            }),
            bound.to_string(),
        ))
    }

    /// Starts this node's region, serving peers' requests through `users`.
    pub async fn start_region(&self, users: Arc<Users>) -> std::io::Result<ActorRef<RegionMsg>> {
        let (region, _) = Actor::spawn(None, Region, users)
            .await
            .map_err(|e| std::io::Error::other(format!("starting the shard region: {e}")))?;
        ractor::pg::join(region_group(&self.node_id), vec![region.get_cell()]);
        Ok(region)
    }

    /// Reports to `leases` every peer whose last session with this node closes (suspected)
    /// and every peer a session authenticates with again (trusted).
    pub fn watch_links(&self, leases: Arc<LeaseManager>) {
        self.links.attach(leases);
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

    /// Hands `frame` to `owner`'s region and waits up to `timeout` for its answer.
    async fn forward(
        &self,
        owner: &str,
        frame: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, LinkError> {
        let region = self
            .region_of(owner)
            .ok_or_else(|| LinkError::Unreachable(owner.to_owned()))?;
        let result = region
            .call(|reply| RegionMsg::Forward(frame, reply), Some(timeout))
            .await;
        let no_answer = |reason: String| LinkError::NoAnswer {
            node: owner.to_owned(),
            reason,
        };
        match result {
            Ok(ractor::rpc::CallResult::Success(answer)) => Ok(answer),
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
                if links::peer_of(session) == Some(node_id) {
                    tracing::info!(peer = %node_id, "dropping an unresponsive session");
                    self.links.closing(session);
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

impl PeerLink for Transport {
    fn call<'a>(&'a self, node: &'a str, frame: Vec<u8>, timeout: Duration) -> LinkFuture<'a> {
        Box::pin(self.forward(node, frame, timeout))
    }
}
