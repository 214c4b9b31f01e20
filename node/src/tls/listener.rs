//! [`TlsListener`]: the gateway's HTTPS listener, an `axum::serve::Listener` that hands out
//! only connections whose TLS handshake has completed.
//!
//! Handshakes run concurrently, each in its own task bounded by [`HANDSHAKE_TIMEOUT`], at
//! most [`MAX_HANDSHAKES`] at once: a client that connects and stalls (or speaks plain HTTP,
//! which fails the handshake at its first byte) holds up nobody else. Failed handshakes are
//! logged at debug level with the peer address only. Dropping the listener (axum does on
//! graceful shutdown) stops accepting and closes the port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The longest a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait to be accepted.
pub const MAX_HANDSHAKES: usize = 256;

/// A TCP listener that serves TLS.
#[derive(Debug)]
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    acceptor: JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `config` on the bound `listener`.
    ///
    /// # Errors
    /// When the listener's address cannot be read.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(accept(listener, TlsAcceptor::from(config), tx));
        Ok(TlsListener {
            local,
            ready,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Accepts connections and completes their handshakes, sending each finished one to `tx`.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(permit) = Arc::clone(&handshakes).acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors, say: give the process a moment.
                tracing::warn!(error = %err, "accepting an https connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, peer)).await;
                }
                Ok(Err(err)) => tracing::debug!(%peer, error = %err, "tls handshake failed"),
                Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept task only ends when aborted, by this listener's drop.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
