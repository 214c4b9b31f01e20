//! Configuration tests of TLS and the cluster's secrets: complete sets of files, the cookie
//! file, the server name, loading from the file and the environment, advice for plain
//! listeners beyond loopback.

use super::*;

#[test]
fn tls_files_come_in_complete_sets() {
    let mut config = Config::default();
    config.http.tls_cert_file = Some("gateway.pem".into());
    config.cluster.tls_ca_file = Some("ca.pem".into());
    let err = config.validate().expect_err("half-set");
    assert_eq!(
        keys(&err),
        [
            "http.tls-key-file",
            "cluster.tls-cert-file",
            "cluster.tls-key-file"
        ]
    );
    let message = err.to_string();
    assert!(
        message.contains("http.tls-key-file: is not set but http.tls-cert-file is"),
        "{message}"
    );

    config.http.tls_key_file = Some("gateway.key".into());
    config.cluster.tls_cert_file = Some("node.pem".into());
    config.cluster.tls_key_file = Some(PathBuf::new());
    assert_eq!(
        keys(&config.validate().expect_err("empty path")),
        ["cluster.tls-key-file"]
    );
    config.cluster.tls_key_file = Some("node.key".into());
    config.validate().expect("complete sets");
    assert!(config.http_tls() && config.cluster_tls());
}

#[test]
fn the_cluster_needs_a_cookie_file() {
    let mut config = Config::default();
    assert_eq!(
        config.file(&config.cluster.cookie_file),
        Path::new("data/cookie")
    );
    config.cluster.cookie_file = PathBuf::from("/run/secrets/cookie");
    assert_eq!(
        config.file(&config.cluster.cookie_file),
        Path::new("/run/secrets/cookie"),
        "absolute paths stay"
    );
    config.cluster.cookie_file = PathBuf::new();
    assert_eq!(
        keys(&config.validate().expect_err("no cookie file")),
        ["cluster.cookie-file"]
    );
}

#[test]
fn the_cluster_tls_server_name_must_be_a_name() {
    let mut config = Config::default();
    config.cluster.tls_server_name = "10.0.0.2".to_owned();
    config.validate().expect("an IP address is a server name");
    config.cluster.tls_server_name = "not a name".to_owned();
    assert_eq!(
        keys(&config.validate().expect_err("bad name")),
        ["cluster.tls-server-name"]
    );
}

#[test]
fn tls_settings_load_from_the_file_and_the_environment() {
    let config = load_in_jail(
        "[http]\ntls-cert-file = \"/etc/engram/gateway.pem\"\ntls-key-file = \"gateway.key\"\n",
        &[
            ("ENGRAM__CLUSTER__TLS_CA_FILE", "/etc/engram/ca.pem"),
            ("ENGRAM__CLUSTER__TLS_CERT_FILE", "node.pem"),
            ("ENGRAM__CLUSTER__TLS_KEY_FILE", "node.key"),
            ("ENGRAM__CLUSTER__COOKIE_FILE", "/run/secrets/cookie"),
        ],
    )
    .expect("loads");
    config.validate().expect("validates");
    assert_eq!(
        config.file(config.http.tls_cert_file.as_deref().unwrap()),
        Path::new("/etc/engram/gateway.pem"),
        "absolute paths stay"
    );
    assert_eq!(
        config.file(config.http.tls_key_file.as_deref().unwrap()),
        Path::new("data/gateway.key"),
        "relative paths are the data dir's"
    );
    assert_eq!(
        config.file(&config.cluster.cookie_file),
        Path::new("/run/secrets/cookie")
    );
}

#[test]
fn plain_listeners_beyond_loopback_get_advice() {
    let mut config = Config::default();
    config.http.listen = "0.0.0.0:8080".to_owned();
    config.cluster.listen = "10.0.0.2:7000".to_owned();
    let advice = config.advice();
    assert_eq!(advice.len(), 2, "{advice:?}");
    assert!(advice[0].contains("http.tls-cert-file"), "{advice:?}");
    assert!(advice[1].contains("cluster.tls-ca-file"), "{advice:?}");

    config.http.tls_cert_file = Some("gateway.pem".into());
    config.http.tls_key_file = Some("gateway.key".into());
    config.cluster.tls_ca_file = Some("ca.pem".into());
    config.cluster.tls_cert_file = Some("node.pem".into());
    config.cluster.tls_key_file = Some("node.key".into());
    assert!(config.advice().is_empty(), "{:?}", config.advice());
}
