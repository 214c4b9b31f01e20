//! Accepting cluster links: the node's own listener on `cluster.listen`, so that each inbound
//! TLS handshake is bounded and runs in its own task before the connection reaches the node
//! server (whose own listener would run it inside its accept loop, unbounded); and the
//! deadline by which an inbound session must authenticate ([`HandshakeDeadline`]), TLS or
//! not, since the node server itself waits on a silent or half-sent handshake for ever.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ractor::{ActorId, ActorRef};
use ractor_cluster::node::NodeServerSessionInformation;
use ractor_cluster::{NetworkStream, NodeEventSubscription, NodeServerMessage};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::{MAX_LINK_HANDSHAKES, TransportMetrics};

/// Accepts links on `listener` for `server` until aborted. Without TLS each connection is
/// handed over at once, as the node server's own listener would (its session then has
/// `timeout` to authenticate, [`HandshakeDeadline`]). With TLS each handshake runs in its own
/// task, bounded by `timeout`, at most
/// [`MAX_LINK_HANDSHAKES`] at once, and only completed ones reach the node server. Aborting
/// this task closes the port and drops the handshakes in progress.
pub(super) async fn accept_links(
    listener: TcpListener,
    server: ActorRef<NodeServerMessage>,
    tls: Option<TlsAcceptor>,
    (timeout, metrics): (Duration, Arc<TransportMetrics>),
) {
    let handshakes = Arc::new(Semaphore::new(MAX_LINK_HANDSHAKES));
    let mut pending = JoinSet::new();
    loop {
        // Reap finished handshakes, so that the set only holds the ones in progress.
        while pending.try_join_next().is_some() {}
        let permit = match &tls {
            Some(_) => match Arc::clone(&handshakes).acquire_owned().await {
                Ok(permit) => Some(permit),
                // The semaphore is never closed.
                Err(_) => return,
            },
            None => None,
        };
        let (stream, peer_addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, say: give the process a moment.
                tracing::warn!(error = %err, "accepting a cluster connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(local_addr) = stream.local_addr() else {
            continue;
        };
        let Some(acceptor) = &tls else {
            hand_over(
                &server,
                NetworkStream::Raw {
                    peer_addr,
                    local_addr,
                    stream,
                },
            );
            continue;
        };
        let (acceptor, server, metrics) = (acceptor.clone(), server.clone(), Arc::clone(&metrics));
        pending.spawn(async move {
            let _permit = permit;
            match tls_handshake(&acceptor, stream, timeout).await {
                Ok(stream) => hand_over(
                    &server,
                    NetworkStream::TlsServer {
                        peer_addr,
                        local_addr,
                        stream,
                    },
                ),
                Err(HandshakeFailure::Failed(err)) => {
                    metrics.handshake_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %peer_addr, error = %err, "refused a cluster link: tls handshake failed");
                }
                Err(HandshakeFailure::TimedOut) => {
                    metrics.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(peer = %peer_addr, ?timeout, "dropped a cluster connection: tls handshake timed out");
                }
            }
        });
    }
}

/// Why an inbound handshake produced no link.
enum HandshakeFailure {
    /// The client is not a peer of this cluster, or does not speak TLS.
    Failed(std::io::Error),
    /// The client did not finish within `cluster.handshake-timeout`.
    TimedOut,
}

/// The server side of a link's TLS handshake, within `timeout`.
async fn tls_handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Result<tokio_rustls::server::TlsStream<TcpStream>, HandshakeFailure> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) => Err(HandshakeFailure::Failed(err)),
        Err(_) => Err(HandshakeFailure::TimedOut),
    }
}

/// Hands an accepted connection to the node server, which opens a session on it.
fn hand_over(server: &ActorRef<NodeServerMessage>, stream: NetworkStream) {
    tracing::debug!(connection = ?stream, "cluster connection accepted");
    let opened = NodeServerMessage::ConnectionOpened {
        stream: Box::new(stream),
        is_server: true,
    };
    if server.cast(opened).is_err() {
        // Stopping: the connection is dropped.
        tracing::debug!("the node server is gone; cluster connection dropped");
    }
}

/// The node server's subscriber that closes every inbound session which has not
/// authenticated (the peer's name, then the cookie's challenge) within its timeout of being
/// opened: the node server would otherwise keep a connection that sends nothing, or part of
/// a handshake, for ever. Outbound sessions (this node dialled) are bounded by the dial.
pub(super) struct HandshakeDeadline {
    timeout: Duration,
    metrics: Arc<TransportMetrics>,
    /// Inbound sessions opened and not yet authenticated nor closed.
    pending: Arc<Mutex<HashSet<ActorId>>>,
}

impl HandshakeDeadline {
    /// Closes inbound sessions not authenticated within `timeout`, counting each in
    /// `metrics.handshake_timeouts`.
    pub(super) fn new(timeout: Duration, metrics: Arc<TransportMetrics>) -> Self {
        HandshakeDeadline {
            timeout,
            metrics,
            pending: Arc::default(),
        }
    }

    fn settled(&self, session: &NodeServerSessionInformation) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&session.actor.get_id());
    }
}

impl NodeEventSubscription for HandshakeDeadline {
    fn node_session_opened(&self, session: NodeServerSessionInformation) {
        if !session.is_server {
            return;
        }
        let id = session.actor.get_id();
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
        let (pending, metrics, timeout) = (
            Arc::clone(&self.pending),
            Arc::clone(&self.metrics),
            self.timeout,
        );
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            let late = pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            if late {
                metrics.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %session.peer_addr, ?timeout, "closed a cluster connection: its session did not authenticate in time");
                session.actor.stop(Some("handshake timed out".to_owned()));
            }
        });
    }

    fn node_session_disconnected(&self, session: NodeServerSessionInformation) {
        self.settled(&session);
    }

    fn node_session_authenticated(&self, session: NodeServerSessionInformation) {
        self.settled(&session);
    }
}
