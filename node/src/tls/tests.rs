//! Tests of loading TLS settings: certificates made here with rcgen; every bad file stops
//! the node with the setting and the path, and a cluster certificate that peers would refuse
//! is refused at start-up.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::*;

/// A CA that issues certificates into a directory.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// Writes `<name>.pem` (the certificate) and `<name>.key` (mode 0600) into `dir`.
    fn issue(
        &self,
        dir: &Path,
        name: &str,
        sans: &[&str],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> (PathBuf, PathBuf) {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = usages;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        write_secret(&key_path, &key.serialize_pem());
        (cert_path, key_path)
    }

    fn write(&self, path: &Path) {
        std::fs::write(path, self.issuer.pem()).unwrap();
    }
}

fn write_secret(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn both() -> Vec<ExtendedKeyUsagePurpose> {
    vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ]
}

fn config(dir: &Path) -> Config {
    let mut config = Config::default();
    config.node.data_dir = dir.to_owned();
    config
}

fn gateway_config(dir: &Path, cert: &Path, key: &Path) -> Config {
    let mut config = config(dir);
    config.http.tls_cert_file = Some(cert.to_owned());
    config.http.tls_key_file = Some(key.to_owned());
    config
}

fn cluster_config(dir: &Path, ca: &Path, cert: &Path, key: &Path) -> Config {
    let mut config = config(dir);
    config.cluster.tls_ca_file = Some(ca.to_owned());
    config.cluster.tls_cert_file = Some(cert.to_owned());
    config.cluster.tls_key_file = Some(key.to_owned());
    config
}

fn error_of<T>(outcome: Result<T>) -> String {
    match outcome {
        Ok(_) => panic!("expected an error"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn without_tls_settings_nothing_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    assert!(gateway(&config(dir.path())).unwrap().is_none());
    assert!(cluster(&config(dir.path())).unwrap().is_none());
}

#[test]
fn the_gateway_loads_a_good_certificate_relative_to_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("gateway ca");
    ca.issue(dir.path(), "gateway", &["127.0.0.1", "localhost"], both());
    let config = gateway_config(
        dir.path(),
        Path::new("gateway.pem"),
        Path::new("gateway.key"),
    );
    let server = gateway(&config).unwrap().expect("https");
    assert_eq!(server.alpn_protocols, [b"http/1.1".to_vec()]);
}

#[test]
fn missing_gateway_files_name_the_key_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("gateway ca");
    let (cert, key) = ca.issue(dir.path(), "gateway", &["127.0.0.1"], both());
    let missing = dir.path().join("nope.pem");

    let message = error_of(gateway(&gateway_config(dir.path(), &missing, &key)));
    assert!(
        message.starts_with(&format!(
            "http.tls-cert-file {}: cannot read",
            missing.display()
        )),
        "{message}"
    );
    let message = error_of(gateway(&gateway_config(dir.path(), &cert, &missing)));
    assert!(
        message.starts_with(&format!(
            "http.tls-key-file {}: cannot open",
            missing.display()
        )),
        "{message}"
    );
}

#[test]
fn malformed_or_mismatched_gateway_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("gateway ca");
    let (cert, key) = ca.issue(dir.path(), "gateway", &["127.0.0.1"], both());
    let (_, other_key) = ca.issue(dir.path(), "other", &["127.0.0.1"], both());
    let garbage = dir.path().join("garbage.pem");
    write_secret(&garbage, "not a certificate\n");

    let message = error_of(gateway(&gateway_config(dir.path(), &garbage, &key)));
    assert!(message.contains("holds no PEM certificate"), "{message}");
    let message = error_of(gateway(&gateway_config(dir.path(), &cert, &garbage)));
    assert!(
        message.starts_with("http.tls-key-file") && message.contains("holds no PEM private key"),
        "{message}"
    );
    // The certificate given as the key: PEM, but no key in it.
    let cert_as_key = dir.path().join("cert-as-key.pem");
    write_secret(&cert_as_key, &std::fs::read_to_string(&cert).unwrap());
    let message = error_of(gateway(&gateway_config(dir.path(), &cert, &cert_as_key)));
    assert!(message.contains("holds no PEM private key"), "{message}");
    let message = error_of(gateway(&gateway_config(dir.path(), &cert, &other_key)));
    assert!(
        message.starts_with(&format!("http.tls-key-file {}", other_key.display()))
            && message.contains("does not go with http.tls-cert-file"),
        "{message}"
    );
}

#[test]
fn a_private_key_open_to_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("gateway ca");
    let (cert, key) = ca.issue(dir.path(), "gateway", &["127.0.0.1"], both());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let message = error_of(gateway(&gateway_config(dir.path(), &cert, &key)));
    assert!(
        message.starts_with("http.tls-key-file") && message.contains("0644"),
        "{message}"
    );
    assert!(!message.contains("PRIVATE KEY"), "{message}");
}

#[test]
fn the_cluster_loads_a_certificate_for_its_name_in_both_roles() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster ca");
    ca.write(&dir.path().join("ca.pem"));
    let (cert, key) = ca.issue(dir.path(), "node", &["engram-cluster"], both());
    let tls = cluster(&cluster_config(
        dir.path(),
        Path::new("ca.pem"),
        &cert,
        &key,
    ))
    .unwrap()
    .expect("mutual tls");
    assert_eq!(
        tls.server_name,
        ServerName::try_from("engram-cluster").unwrap()
    );
}

#[test]
fn a_missing_cluster_ca_names_the_key_and_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster ca");
    let (cert, key) = ca.issue(dir.path(), "node", &["engram-cluster"], both());
    let missing = dir.path().join("ca.pem");
    let message = error_of(cluster(&cluster_config(dir.path(), &missing, &cert, &key)));
    assert!(
        message.starts_with(&format!(
            "cluster.tls-ca-file {}: cannot read",
            missing.display()
        )),
        "{message}"
    );
}

#[test]
fn a_cluster_certificate_peers_would_refuse_stops_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster ca");
    let ca_path = dir.path().join("ca.pem");
    ca.write(&ca_path);
    let stranger = Ca::new("another ca");

    let (cert, key) = stranger.issue(dir.path(), "foreign", &["engram-cluster"], both());
    let message = error_of(cluster(&cluster_config(dir.path(), &ca_path, &cert, &key)));
    assert!(
        message.starts_with("cluster.tls-cert-file") && message.contains("does not verify"),
        "signed by another CA: {message}"
    );

    let (cert, key) = ca.issue(dir.path(), "misnamed", &["node-1.example"], both());
    let message = error_of(cluster(&cluster_config(dir.path(), &ca_path, &cert, &key)));
    assert!(
        message.contains("as a server of \"engram-cluster\""),
        "without the cluster name: {message}"
    );

    let server_only = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let (cert, key) = ca.issue(dir.path(), "server-only", &["engram-cluster"], server_only);
    let message = error_of(cluster(&cluster_config(dir.path(), &ca_path, &cert, &key)));
    assert!(
        message.contains("as a client"),
        "without client authentication: {message}"
    );

    // The same certificate under another configured name is fine.
    let (cert, key) = ca.issue(dir.path(), "renamed", &["memory.internal"], both());
    let mut config = cluster_config(dir.path(), &ca_path, &cert, &key);
    config.cluster.tls_server_name = "memory.internal".to_owned();
    assert!(cluster(&config).unwrap().is_some());
}
