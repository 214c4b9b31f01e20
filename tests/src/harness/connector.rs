//! The connector under [`super::HttpClient`]: plain TCP for `http://`, and for `https://`
//! TLS verified against one CA file (the test's own), by tokio-rustls over hyper-util's TCP
//! connector. A TLS failure is a connect failure: the request never reached the node.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TCP, then TLS for `https://` when the connector trusts a CA.
#[derive(Clone)]
pub struct Connector {
    tcp: HttpConnector,
    tls: Option<TlsConnector>,
}

impl Connector {
    /// Plain TCP only (`https://` fails to connect).
    pub fn plain(tcp: HttpConnector) -> Self {
        Connector { tcp, tls: None }
    }

    /// TCP, and TLS for `https://` verified against the CA certificates of the PEM file `ca`.
    ///
    /// # Panics
    /// If `ca` cannot be read or holds no usable certificate.
    pub fn trusting(mut tcp: HttpConnector, ca: &Path) -> Self {
        tcp.enforce_http(false);
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca)
            .unwrap_or_else(|e| panic!("CA file {}: {e}", ca.display()))
        {
            let cert = cert.unwrap_or_else(|e| panic!("CA file {}: {e}", ca.display()));
            roots.add(cert).expect("a usable CA certificate");
        }
        assert!(
            !roots.is_empty(),
            "CA file {} holds no certificate",
            ca.display()
        );
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Connector {
            tcp,
            tls: Some(TlsConnector::from(Arc::new(config))),
        }
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
                (true, None) => Err("an https:// URL needs a client that trusts a CA".into()),
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
