//! Tests of loading, the reference `cluster.toml`, environment overrides and validation.
//!
//! Every test that loads through [`Config::load`] runs inside a `figment::Jail`, which
//! serialises them and clears the environment, so `ENGRAM__` variables of one test (or of the
//! developer's shell) cannot leak into another.

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Value};
use figment::{Figment, Jail, Provider};

use engram_storage::crypto::Cipher;

use engram_storage::types::ArchiveMode;

use super::*;

fn reference_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cluster.toml")
}

fn reference_text() -> String {
    std::fs::read_to_string(reference_path()).expect("cluster.toml is readable")
}

/// Loads `text` as `cluster.toml` in a jail with `env` set.
#[allow(
    clippy::result_large_err,
    reason = "figment::Jail dictates the closure's error type"
)]
fn load_in_jail(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut outcome = None;
    Jail::expect_with(|jail| {
        jail.clear_env();
        jail.create_file("cluster.toml", text)?;
        for (key, value) in env {
            jail.set_env(key, value);
        }
        outcome = Some(Config::load(Path::new("cluster.toml")));
        Ok(())
    });
    outcome.expect("the jail ran")
}

/// The keys of `problems`.
fn keys(err: &ConfigError) -> Vec<&str> {
    match err {
        ConfigError::Invalid(problems) => problems.iter().map(|p| p.key.as_ref()).collect(),
        other @ (ConfigError::Read { .. }
        | ConfigError::UnknownKey { .. }
        | ConfigError::Parse(_)) => {
            panic!("expected an Invalid error, got {other}")
        }
    }
}

#[test]
#[allow(
    clippy::result_large_err,
    reason = "figment::Jail dictates the closure's error type"
)]
fn reference_file_parses_validates_and_equals_defaults() {
    let path = reference_path();
    let mut loaded = None;
    Jail::expect_with(|jail| {
        jail.clear_env();
        loaded = Some(Config::load(&path));
        Ok(())
    });
    let config = loaded.expect("the jail ran").expect("cluster.toml loads");
    config.validate().expect("cluster.toml validates");
    assert_eq!(config, Config::default());
    assert!(
        config.advice().is_empty(),
        "the defaults need no advice: {:?}",
        config.advice()
    );
}

#[test]
fn reference_file_lists_every_setting() {
    let defaults = Figment::from(Serialized::defaults(Config::default()))
        .data()
        .expect("defaults serialise")
        .remove(&figment::Profile::Default)
        .expect("default profile");
    let file = Figment::from(Toml::file_exact(reference_path()))
        .data()
        .expect("cluster.toml parses")
        .remove(&figment::Profile::Default)
        .unwrap_or_default();
    let text = reference_text();
    let mut missing = Vec::new();
    compare_keys("", &defaults, &file, &text, &mut missing);
    assert!(
        missing.is_empty(),
        "cluster.toml lacks these settings: {missing:?}"
    );
}

/// Records each key of `defaults` absent from `file`. A key whose default is unset cannot
/// be written in TOML, so it must appear as a commented example line instead.
fn compare_keys(prefix: &str, defaults: &Dict, file: &Dict, text: &str, missing: &mut Vec<String>) {
    for (key, value) in defaults {
        let name = format!("{prefix}{key}");
        match (value, file.get(key)) {
            (Value::Dict(_, inner), Some(Value::Dict(_, file_inner))) => {
                compare_keys(&format!("{name}."), inner, file_inner, text, missing);
            }
            (Value::Empty(..), None) => {
                if !text
                    .lines()
                    .any(|line| line.starts_with(&format!("# {key} = ")))
                {
                    missing.push(format!(
                        "{name} (unset by default: needs a `# {key} = ...` line)"
                    ));
                }
            }
            (_, None) => missing.push(name),
            (_, Some(_)) => {}
        }
    }
}

#[test]
fn every_reference_setting_has_a_comment() {
    let text = reference_text();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let is_setting = !line.starts_with('#') && !line.starts_with('[') && line.contains(" = ");
        if is_setting {
            let previous = i.checked_sub(1).map(|j| lines[j]).unwrap_or_default();
            assert!(
                previous.starts_with('#'),
                "line {}: `{line}` has no comment above it",
                i + 1
            );
        }
    }
}

#[test]
fn unknown_key_is_rejected_by_name() {
    let err = load_in_jail(
        "[http]\nlisten = \"127.0.0.1:8080\"\nlistn = \"127.0.0.1:9\"\n",
        &[],
    )
    .expect_err("unknown key");
    match &err {
        ConfigError::UnknownKey {
            key,
            section,
            origin,
            expected,
        } => {
            assert_eq!(key, "listn");
            assert_eq!(section, "[http]");
            assert!(origin.contains("cluster.toml"), "origin: {origin}");
            assert!(expected.contains("listen"), "expected: {expected}");
        }
        other @ (ConfigError::Read { .. } | ConfigError::Parse(_) | ConfigError::Invalid(_)) => {
            panic!("expected UnknownKey, got {other}")
        }
    }
    let message = err.to_string();
    assert!(
        message.contains("`listn`") && message.contains("[http]"),
        "{message}"
    );
}

#[test]
fn unknown_nested_key_and_section_are_named() {
    let err = load_in_jail("[storage.sqlite]\npaht = \"x.sqlite\"\n", &[]).expect_err("nested");
    let message = err.to_string();
    assert!(
        message.contains("`paht`") && message.contains("[storage.sqlite]"),
        "{message}"
    );

    let err = load_in_jail("[htp]\nlisten = \"127.0.0.1:8080\"\n", &[]).expect_err("section");
    let message = err.to_string();
    assert!(
        message.contains("`htp`") && message.contains("top level"),
        "{message}"
    );
}

#[test]
fn env_overrides_the_file() {
    let config = load_in_jail(
        "[http]\nlisten = \"127.0.0.1:8080\"\n[cluster]\nheartbeat-interval = \"200ms\"\n",
        &[
            ("ENGRAM__HTTP__LISTEN", "0.0.0.0:9090"),
            ("ENGRAM__CLUSTER__HEARTBEAT_INTERVAL", "400ms"),
            (
                "ENGRAM__CLUSTER__SEEDS",
                "[\"10.0.0.2:7000\", \"node-3:7000\"]",
            ),
            ("ENGRAM__STORAGE__ROOT_PREFIX", "staging"),
            ("ENGRAM__STORAGE__SQLITE__READ_POOL", "16"),
        ],
    )
    .expect("loads");
    assert_eq!(config.http.listen, "0.0.0.0:9090");
    assert_eq!(
        config.cluster.heartbeat_interval,
        Duration::from_millis(400)
    );
    assert_eq!(config.cluster.seeds, ["10.0.0.2:7000", "node-3:7000"]);
    assert_eq!(config.storage.root_prefix, "staging");
    assert_eq!(config.storage.sqlite.read_pool, 16);
    config.validate().expect("validates");
}

#[test]
fn unknown_env_key_is_rejected_by_name() {
    let err = load_in_jail("", &[("ENGRAM__HTTP__LISTN", "127.0.0.1:1")]).expect_err("unknown");
    let message = err.to_string();
    assert!(
        message.contains("`listn`") && message.contains("[http]"),
        "{message}"
    );
    assert!(
        message.contains("ENGRAM__HTTP__LISTN"),
        "names the variable: {message}"
    );
}

#[test]
fn wrong_type_names_the_key() {
    let err = load_in_jail("[cluster]\nshards = \"many\"\n", &[]).expect_err("wrong type");
    assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("cluster.shards"), "{message}");

    let err = load_in_jail("[storage]\nbackend = \"rocksdb\"\n", &[]).expect_err("variant");
    assert!(err.to_string().contains("rocksdb"), "{err}");
}

#[test]
fn missing_file_is_an_error() {
    let err = Config::load(Path::new("/nonexistent/engram/cluster.toml")).expect_err("missing");
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/engram/cluster.toml"),
        "{err}"
    );
}

#[test]
fn int8_is_refused_for_the_english_encoders() {
    let mut config = Config::default();
    config.inference.precision = Some(engram_inference::Precision::Int8);
    config.validate().expect("int8 multilingual-e5-small");
    for model in [
        engram_inference::ModelKind::AllMiniLmL6V2,
        engram_inference::ModelKind::BgeSmallEnV15,
    ] {
        config.inference.model = model;
        let err = config.validate().expect_err("int8 of an English encoder");
        assert_eq!(keys(&err), ["inference.precision"], "{err}");
    }
}

#[test]
fn lease_timeout_must_exceed_twice_the_heartbeat() {
    let mut config = Config::default();
    config.cluster.heartbeat_interval = Duration::from_secs(5);
    config.cluster.lease_timeout = Duration::from_secs(10);
    config.cluster.suspect_confirm = Duration::from_millis(10_001);
    let err = config.validate().expect_err("exactly twice is not enough");
    assert!(keys(&err).contains(&"cluster.lease-timeout"), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("10s") && message.contains("5s"),
        "{message}"
    );

    config.cluster.lease_timeout = Duration::from_millis(10_001);
    config.validate().expect("just over twice is enough");
}

#[test]
fn suspect_confirm_must_exceed_twice_the_heartbeat_and_not_the_lease_timeout() {
    let mut config = Config::default();
    config.cluster.heartbeat_interval = Duration::from_millis(250);
    config.cluster.suspect_confirm = Duration::from_millis(500);
    let err = config.validate().expect_err("exactly twice is not enough");
    assert_eq!(keys(&err), ["cluster.suspect-confirm"]);
    let message = err.to_string();
    assert!(
        message.contains("500ms") && message.contains("250ms") && message.contains("twice"),
        "{message}"
    );
    config.cluster.suspect_confirm = Duration::from_millis(501);
    config.validate().expect("just over twice is enough");

    // The early take-over comes before the lease timeout, or is off (equal).
    config.cluster.suspect_confirm = Duration::from_millis(3_001);
    let err = config.validate().expect_err("later than the lease timeout");
    assert_eq!(keys(&err), ["cluster.suspect-confirm"]);
    let message = err.to_string();
    assert!(
        message.contains("3s 1ms") && message.contains("lease-timeout is 3s"),
        "{message}"
    );
    config.cluster.suspect_confirm = config.cluster.lease_timeout;
    config
        .validate()
        .expect("equal to the lease timeout turns it off");
}

#[test]
fn header_read_and_link_handshake_timeouts_are_bounded() {
    let mut config = Config::default();
    config.http.header_read_timeout = Duration::ZERO;
    config.cluster.handshake_timeout = Duration::from_secs(3_600);
    let err = config
        .validate()
        .expect_err("no timeout, and an hour, are refused");
    assert_eq!(
        keys(&err),
        ["cluster.handshake-timeout", "http.header-read-timeout"]
    );
    config.http.header_read_timeout = Duration::from_millis(100);
    config.cluster.handshake_timeout = Duration::from_secs(600);
    config.validate().expect("the bounds themselves are taken");
}

#[test]
fn bad_listen_addresses_are_explained() {
    let mut config = Config::default();
    config.http.listen = "localhost:8080".to_owned();
    config.cluster.listen = "127.0.0.1".to_owned();
    let err = config.validate().expect_err("not socket addresses");
    assert_eq!(keys(&err), ["http.listen", "cluster.listen"]);
    let message = err.to_string();
    assert!(
        message.contains("\"localhost:8080\" is not a socket address"),
        "{message}"
    );
}

#[test]
fn http_and_cluster_need_their_own_ports() {
    let mut config = Config::default();
    config.cluster.listen = config.http.listen.clone();
    assert_eq!(
        keys(&config.validate().expect_err("same port")),
        ["cluster.listen"]
    );

    // Port 0 asks the OS for a free port, so both may say it.
    config.http.listen = "127.0.0.1:0".to_owned();
    config.cluster.listen = "127.0.0.1:0".to_owned();
    config.validate().expect("port 0 twice");
}

#[test]
fn seeds_must_be_host_and_port() {
    let mut config = Config::default();
    config.cluster.seeds = vec![
        "10.0.0.2:7000".into(),
        "node-2:7000".into(),
        "[::1]:7000".into(),
    ];
    config.validate().expect("good seeds");
    config.cluster.seeds = vec!["node-2".into(), "node-2:0".into(), ":7000".into()];
    let err = config.validate().expect_err("bad seeds");
    assert_eq!(keys(&err), ["cluster.seeds"; 3]);
}

#[test]
fn node_id_is_a_plain_name() {
    let mut config = Config::default();
    config.node.id = "node_2-b".to_owned();
    config.validate().expect("letters, digits, - and _");
    for bad in ["", "node 2", "node/2", "nöde"] {
        config.node.id = bad.to_owned();
        assert_eq!(
            keys(&config.validate().expect_err(bad)),
            ["node.id"],
            "{bad:?}"
        );
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut config = Config::default();
    config.cluster.shards = 0;
    config.storage.root_prefix = String::new();
    config.storage.retry.max_attempts = 0;
    config.log.level = "info,engram_node=loud".to_owned();
    let err = config.validate().expect_err("four problems");
    assert_eq!(
        keys(&err),
        [
            "cluster.shards",
            "storage.root-prefix",
            "storage.retry.max-attempts",
            "log.level"
        ]
    );
}

#[test]
fn busy_shares_are_percentages_from_1_to_100() {
    let mut config = Config::default();
    config.inference.background_busy_share_percent = 0;
    config.distillation.generation.busy_share_percent = 101;
    let err = config.validate().expect_err("two problems");
    assert_eq!(
        keys(&err),
        [
            "inference.background-busy-share-percent",
            "distillation.generation.busy-share-percent"
        ]
    );
    config.inference.background_busy_share_percent = 100;
    config.distillation.generation.busy_share_percent = 1;
    config.validate().expect("1 and 100 are shares");
}

#[test]
fn reranker_bounds_are_explained() {
    let mut config = Config::default();
    config.reranker.candidates = 0;
    config.reranker.queue = 0;
    config.reranker.deadline = std::time::Duration::ZERO;
    let err = config.validate().expect_err("three problems");
    assert_eq!(
        keys(&err),
        ["reranker.candidates", "reranker.queue", "reranker.deadline"]
    );
    config.reranker.candidates = 100;
    config.reranker.queue = 1;
    config.reranker.deadline = std::time::Duration::from_millis(1);
    config.validate().expect("the bounds are allowed");
}

#[test]
fn fdb_backend_needs_the_feature() {
    let mut config = Config::default();
    config.storage.backend = Backend::Fdb;
    let outcome = config.validate();
    if cfg!(feature = "fdb") {
        outcome.expect("built with fdb");
    } else {
        let err = outcome.expect_err("built without fdb");
        assert_eq!(keys(&err), ["storage.backend"]);
        assert!(err.to_string().contains("--features fdb"), "{err}");
    }
}

#[test]
fn few_shards_per_node_is_advice_not_an_error() {
    let mut config = Config::default();
    config.cluster.shards = 20;
    config.cluster.seeds = vec!["10.0.0.2:7000".into(), "10.0.0.3:7000".into()];
    config.validate().expect("still valid");
    let advice = config.advice();
    assert_eq!(advice.len(), 1, "{advice:?}");
    assert!(advice[0].contains("cluster.shards = 20"), "{advice:?}");

    config.cluster.shards = 30;
    assert!(config.advice().is_empty());
}

#[test]
fn sqlite_path_resolves_against_the_data_dir() {
    let mut config = Config::default();
    assert_eq!(config.sqlite_path(), Path::new("data/engram.sqlite"));
    config.storage.sqlite.path = PathBuf::from("/var/lib/engram/shared.sqlite");
    assert_eq!(
        config.sqlite_path(),
        Path::new("/var/lib/engram/shared.sqlite")
    );
}

#[test]
fn storage_options_follow_the_settings() {
    let mut config = Config::default();
    assert_eq!(config.storage.sqlite.options(), SqliteOptions::default());
    assert_eq!(config.storage.retry.policy(), RetryPolicy::default());

    config.storage.sqlite.synchronous = SynchronousMode::Normal;
    config.storage.retry.max_attempts = 3;
    config.storage.retry.max_elapsed = Duration::from_secs(1);
    assert_eq!(
        config.storage.sqlite.options().synchronous,
        Synchronous::Normal
    );
    let policy = config.storage.retry.policy();
    assert_eq!(
        (policy.max_attempts, policy.max_elapsed),
        (3, Duration::from_secs(1))
    );
    assert_eq!(
        policy.max_backoff,
        RetryPolicy::default().max_backoff,
        "backoff stays the crate's"
    );
}

#[test]
fn sm4_cipher_loads_by_name_and_needs_the_master_key_file() {
    let config = load_in_jail(
        "[security]\nmaster-key-file = \"/etc/engram/master.keys\"\ncipher = \"sm4-gcm\"\n",
        &[],
    )
    .expect("loads");
    assert_eq!(config.security.cipher, Cipher::Sm4Gcm);
    config.validate().expect("validates");

    let mut keyless = config;
    keyless.security.master_key_file = None;
    let err = keyless.validate().expect_err("sm4 without keys");
    assert_eq!(keys(&err), ["security.cipher"]);

    let err = load_in_jail("[security]\ncipher = \"des\"\n", &[]).expect_err("unknown cipher");
    assert!(err.to_string().contains("des"), "{err}");
}

#[test]
fn archive_retention_defaults_to_five_years_and_may_not_undercut_retention() {
    let config = Config::default();
    assert_eq!(
        config.memory.archive_retention,
        Duration::from_secs(1826 * 24 * 3600)
    );
    let config = load_in_jail("[memory]\narchive-retention = \"90days\"\n", &[]).expect("loads");
    assert_eq!(
        config.memory.archive_retention,
        Duration::from_secs(90 * 24 * 3600)
    );
    config
        .validate()
        .expect("90 days is past the 30 of retention");
    let mut short = config;
    short.memory.archive_retention = Duration::from_secs(7 * 24 * 3600);
    assert_eq!(
        keys(&short.validate().expect_err("shorter than retention")),
        ["memory.archive-retention"]
    );
}

#[test]
fn the_archive_is_off_by_default_and_a_tenant_may_keep_digests_or_full_text() {
    let config = Config::default();
    assert_eq!(config.memory.archive, ArchiveMode::Off);
    let config = load_in_jail(
        "[memory]\narchive = \"digests\"\n[memory.tenant-archive]\nacme = \"full-text\"\n",
        &[],
    )
    .expect("loads");
    config.validate().expect("valid");
    let settings = config.actor_settings();
    assert_eq!(settings.archive_mode("acme"), ArchiveMode::FullText);
    assert_eq!(settings.archive_mode("globex"), ArchiveMode::Digests);
    let err = load_in_jail("[memory]\narchive = \"everything\"\n", &[]).expect_err("unknown mode");
    assert!(err.to_string().contains("everything"), "{err}");
}

#[test]
fn the_jobs_run_in_utc_by_default_and_an_unknown_time_zone_is_refused() {
    assert_eq!(Config::default().jobs.time_zone, "UTC");
    let config = load_in_jail("[jobs]\ntime-zone = \"Asia/Shanghai\"\n", &[]).expect("loads");
    config.validate().expect("an IANA name");
    let mut bad = config;
    bad.jobs.time_zone = "China Standard Time".into();
    assert_eq!(
        keys(&bad.validate().expect_err("not an IANA name")),
        ["jobs.time-zone"]
    );
}

#[test]
fn the_default_configuration_makes_the_actors_default_settings() {
    let made = Config::default().actor_settings();
    // The log pseudonyms' secret is the deployment's, read from storage at start.
    let defaults = engram_actors::services::Settings {
        log_pepper: made.log_pepper.clone(),
        ..engram_actors::services::Settings::default()
    };
    assert_eq!(made, defaults);
}

#[test]
fn the_reference_configuration_states_what_batched_audit_reads_can_lose() {
    let reference = std::fs::read_to_string(reference_path()).unwrap();
    let bound = format!("at most {}", crate::audit::MAX_UNWRITTEN);
    assert!(
        reference.contains(&bound),
        "cluster.toml must say {bound:?}"
    );
}

mod tls;
