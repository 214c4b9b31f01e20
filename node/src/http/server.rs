//! Serving a router on a listener: one HTTP/1.1 connection per accepted stream, with a bound
//! on how long a client may take to send a request's head.
//!
//! axum's own `serve` builds its connections without a timer, so hyper's header read timeout
//! never runs there: a client that sends part of a request line, or opens a connection and
//! sends nothing, or leaves a keep-alive connection idle, holds a task and a descriptor for
//! ever. Here every connection gets hyper's `header_read_timeout`, which runs from when the
//! connection opens, and again from each response until the next request's head is in; a
//! connection over it is closed. Bodies and responses are not bounded by it (the routes limit
//! body sizes; a streamed answer may take long).
//!
//! Graceful shutdown: on `shutdown` the listener is dropped (the port closes), idle
//! connections close, and in-flight requests have `grace` to finish.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt;

use super::ClientAddr;

/// Serves `router` on `listener` (plain TCP, or [`crate::tls::TlsListener`] for HTTPS) until
/// `shutdown` resolves, closing any connection that takes longer than `header_read_timeout`
/// to send a request's head; then lets in-flight requests finish (bounded by `grace`).
/// Requests carry their client's address as `ConnectInfo<ClientAddr>`.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
    header_read_timeout: Duration,
) -> std::io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, client) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request
                .extensions_mut()
                .insert(ConnectInfo(ClientAddr(client)));
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = connections.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                // Timeouts, resets and malformed requests: the client's doing, not the node's.
                tracing::debug!(%client, error = %err, "http connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, connections.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "in-flight requests did not finish within the grace period"
        );
    }
    Ok(())
}
