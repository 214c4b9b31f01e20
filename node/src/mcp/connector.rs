//! How the MCP server reaches the node: plain TCP for an `http://` URL, and for `https://`
//! TLS verified against the CA certificates of `--ca-file` (rustls on aws-lc-rs, as the
//! gateway's own TLS), over hyper-util's TCP connector. A TLS failure is a connect failure:
//! the request never reached the node.
//!
//! Not here: what is sent (`client.rs`). There is no client certificate: the gateway
//! authenticates callers by API key, not by TLS.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::{Error, Result};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connection to the node may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The option that names the CA file, in errors.
const CA_FILE: &str = "--ca-file";

/// TCP, then TLS for `https://` when the connector trusts a CA.
#[derive(Clone)]
pub struct Connector {
    tcp: HttpConnector,
    tls: Option<TlsConnector>,
}

impl Connector {
    /// Plain TCP, and TLS for `https://` verified against the CA certificates of the PEM file
    /// `ca` when one is given (without one, an `https://` URL fails to connect).
    ///
    /// # Errors
    /// [`Error::File`] when `ca` cannot be read or holds no usable certificate.
    pub fn new(ca: Option<&Path>) -> Result<Self> {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let Some(ca) = ca else {
            return Ok(Connector { tcp, tls: None });
        };
        tcp.enforce_http(false);
        let fail = |reason: String| Error::File {
            key: CA_FILE,
            path: ca.to_owned(),
            reason,
        };
        let mut roots = RootCertStore::empty();
        let certs =
            CertificateDer::pem_file_iter(ca).map_err(|e| fail(format!("cannot read: {e}")))?;
        for cert in certs {
            let cert = cert.map_err(|e| fail(format!("is not valid PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| fail(format!("holds an unusable CA: {e}")))?;
        }
        if roots.is_empty() {
            return Err(fail("holds no PEM certificate".to_owned()));
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| fail(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Connector {
            tcp,
            tls: Some(TlsConnector::from(Arc::new(config))),
        })
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = uri.scheme_str() == Some("https");
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let stream = tcp.call(uri).await?;
            match (https, tls) {
                (false, _) => Ok(Stream::Plain(stream)),
                (true, None) => Err(format!("an https:// URL needs {CA_FILE}").into()),
                (true, Some(tls)) => {
                    let name = ServerName::try_from(host)?;
                    let stream = tls.connect(name, stream.into_inner()).await?;
                    Ok(Stream::Tls(Box::new(TokioIo::new(stream))))
                }
            }
        })
    }
}

/// A connection: plain or TLS.
pub enum Stream {
    /// `http://`.
    Plain(TokioIo<TcpStream>),
    /// `https://`.
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
