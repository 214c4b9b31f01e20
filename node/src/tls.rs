//! TLS from the configuration's PEM files: the gateway's server configuration
//! (`[http] tls-cert-file`, `tls-key-file`) and the mutual TLS of the links between nodes
//! (`[cluster] tls-ca-file`, `tls-cert-file`, `tls-key-file`, `tls-server-name`).
//!
//! Everything is loaded and checked at start-up, so that a bad file stops the node with an
//! error naming the setting and the path ([`Error::File`]) instead of failing every
//! handshake later. A node's own cluster certificate is verified against the cluster CA,
//! for the cluster's server name and for both TLS roles, before the node starts.
//!
//! How peers are verified: every node's cluster certificate is issued by the cluster CA for
//! one DNS name shared by the whole cluster (`cluster.tls-server-name`, `engram-cluster` by
//! default), with both the server and the client authentication usages. A dialling node
//! checks that the peer's certificate chains to the CA and carries that name; the listening
//! node requires a client certificate that chains to the CA. The name is the cluster's, not
//! the host's, because peers are dialled by whatever address the membership table or the
//! seeds give (an IP, a host name, a NAT address): the CA is the trust boundary, so it
//! should sign nothing but this cluster's node certificates.
//!
//! Not here: accepting connections (`tls/listener.rs` does it for the gateway,
//! `crate::cluster` for the links; both run each handshake in its own task under a timeout).

mod listener;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub use self::listener::TlsListener;
use crate::config::Config;
use crate::error::{Error, Result};

/// What the cluster transport needs for mutual TLS.
#[derive(Clone)]
pub struct ClusterTls {
    /// Accepts peers' links, requiring a certificate from the cluster CA.
    pub acceptor: TlsAcceptor,
    /// Dials peers, presenting this node's certificate.
    pub connector: TlsConnector,
    /// The name every peer's certificate must carry.
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The crypto provider of every configuration here: aws-lc-rs, named explicitly rather than
/// taken from a process-wide default.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn file_error(key: &'static str, path: &Path) -> impl Fn(String) -> Error {
    move |reason| Error::File {
        key,
        path: path.to_owned(),
        reason,
    }
}

/// The certificates of the PEM file `path` (named by `key`), in file order; at least one.
fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let fail = file_error(key, path);
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(fail("holds no PEM certificate".to_owned()));
    }
    Ok(certs)
}

/// The private key of the PEM file `path` (named by `key`), a secret file.
fn private_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>> {
    let fail = file_error(key, path);
    let bytes = crate::secret::read(key, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        // `pem::Error` is non-exhaustive: one case is told apart, the rest say themselves.
        if matches!(e, rustls::pki_types::pem::Error::NoItemsFound) {
            fail("holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned())
        } else {
            fail(format!("is not a valid PEM private key: {e}"))
        }
    })
}

/// The gateway's TLS configuration, when `[http]` names a certificate and key.
///
/// # Errors
/// [`Error::File`] for a file that is missing, unreadable, open to others (the key) or
/// malformed, or a key that does not match the certificate.
pub fn gateway(config: &Config) -> Result<Option<Arc<ServerConfig>>> {
    let (Some(cert), Some(key)) = (&config.http.tls_cert_file, &config.http.tls_key_file) else {
        return Ok(None);
    };
    let (cert_path, key_path) = (config.file(cert), config.file(key));
    let chain = certificates("http.tls-cert-file", &cert_path)?;
    let key = private_key("http.tls-key-file", &key_path)?;
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| file_error("http.tls-cert-file", &cert_path)(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            file_error("http.tls-key-file", &key_path)(format!(
                "does not go with http.tls-cert-file {}: {e}",
                cert_path.display()
            ))
        })?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(server)))
}

/// The links' mutual TLS, when `[cluster]` names a CA, certificate and key.
///
/// # Errors
/// [`Error::File`] as [`gateway`], and when this node's certificate does not verify against
/// the CA for `cluster.tls-server-name` in both roles.
pub fn cluster(config: &Config) -> Result<Option<ClusterTls>> {
    let c = &config.cluster;
    let (Some(ca), Some(cert), Some(key)) = (&c.tls_ca_file, &c.tls_cert_file, &c.tls_key_file)
    else {
        return Ok(None);
    };
    let (ca_path, cert_path, key_path) = (config.file(ca), config.file(cert), config.file(key));
    let server_name = ServerName::try_from(c.tls_server_name.clone()).map_err(|e| {
        Error::Config(crate::config::ConfigError::Invalid(vec![
            crate::config::Problem {
                key: "cluster.tls-server-name".into(),
                message: e.to_string(),
            },
        ]))
    })?;
    let mut roots = RootCertStore::empty();
    for der in certificates("cluster.tls-ca-file", &ca_path)? {
        roots.add(der).map_err(|e| {
            file_error("cluster.tls-ca-file", &ca_path)(format!("holds an unusable CA: {e}"))
        })?;
    }
    let roots = Arc::new(roots);
    let chain = certificates("cluster.tls-cert-file", &cert_path)?;
    let key = private_key("cluster.tls-key-file", &key_path)?;
    let bad_cert = file_error("cluster.tls-cert-file", &cert_path);
    let bad_key = |e: rustls::Error| {
        file_error("cluster.tls-key-file", &key_path)(format!(
            "does not go with cluster.tls-cert-file {}: {e}",
            cert_path.display()
        ))
    };

    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), provider())
            .build()
            .map_err(|e| file_error("cluster.tls-ca-file", &ca_path)(e.to_string()))?;
    let server_verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), provider())
            .build()
            .map_err(|e| file_error("cluster.tls-ca-file", &ca_path)(e.to_string()))?;
    // This node's certificate must pass the checks its peers will make.
    let (end_entity, intermediates) = chain
        .split_first()
        .ok_or_else(|| bad_cert("holds no PEM certificate".to_owned()))?;
    let now = UnixTime::now();
    server_verifier
        .verify_server_cert(end_entity, intermediates, &server_name, &[], now)
        .map_err(|e| {
            bad_cert(format!(
                "does not verify as a server of {:?} against cluster.tls-ca-file {}: {e}",
                c.tls_server_name,
                ca_path.display()
            ))
        })?;
    client_verifier
        .verify_client_cert(end_entity, intermediates, now)
        .map_err(|e| {
            bad_cert(format!(
                "does not verify as a client against cluster.tls-ca-file {}: {e}",
                ca_path.display()
            ))
        })?;

    let server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad_cert(e.to_string()))?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(bad_key)?;
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad_cert(e.to_string()))?
        .with_webpki_verifier(server_verifier)
        .with_client_auth_cert(chain, key)
        .map_err(bad_key)?;
    Ok(Some(ClusterTls {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: TlsConnector::from(Arc::new(client)),
        server_name,
    }))
}
