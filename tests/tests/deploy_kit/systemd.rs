//! The systemd unit: what it runs and how, checked by `systemd-analyze` (Debian's systemd,
//! which `.ci/setup` installs; without it the test fails).

use std::collections::BTreeMap;
use std::process::Command;

use engram_tests::harness::workspace_root;

use super::{GRACE_STEPS, deploy, must_run, output, read, require, runs, seconds};

/// A unit file's settings: `section -> key -> values` (a key may be given more than once).
fn unit_settings(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not a unit setting: {line:?}"));
        assert!(!section.is_empty(), "{key} outside a section");
        out.entry(section.clone())
            .or_default()
            .entry(key.trim().to_owned())
            .or_default()
            .push(value.trim().to_owned());
    }
    out
}

/// A setting of the reference cluster.toml (`key = value` under `[table]`), unquoted.
fn reference_setting(table: &str, key: &str) -> String {
    let text = read(&workspace_root().join("cluster.toml"));
    let section = text
        .split(&format!("\n[{table}]\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no [{table}] in cluster.toml"));
    section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {table}.{key} in cluster.toml"))
        .trim_matches('"')
        .to_owned()
}

#[test]
fn the_systemd_unit_runs_the_node_hardened_and_passes_systemd_analyze() {
    let path = deploy("systemd/engram-node.service");
    let text = read(&path);
    let unit = unit_settings(&text);
    let service = &unit["Service"];
    let one = |key: &str| -> &str {
        match service.get(key).map(Vec::as_slice) {
            Some([value]) => value,
            other => panic!("[Service] {key}: {other:?}"),
        }
    };
    assert_eq!(
        one("ExecStart"),
        "/usr/local/bin/engram-node run --config /etc/engram/cluster.toml"
    );
    assert_eq!(one("User"), "engram");
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("StateDirectory"), "engram");
    assert!(service["ReadWritePaths"].contains(&"/var/lib/engram".to_owned()));
    assert!(
        service["Environment"].contains(&"LD_LIBRARY_PATH=/opt/engram/libtorch/lib".to_owned()),
        "the node links libtorch dynamically"
    );
    let grace = seconds(&reference_setting("http", "shutdown-grace"));
    let stop = seconds(one("TimeoutStopSec"));
    assert!(
        stop > GRACE_STEPS * grace,
        "TimeoutStopSec={stop}s does not cover {GRACE_STEPS} x shutdown-grace ({grace}s)"
    );
    assert_eq!(unit["Install"]["WantedBy"], ["multi-user.target"]);

    require(
        "systemd-analyze",
        runs("systemd-analyze", &["--version"]),
        "systemd",
    );
    // `verify` wants ExecStart's program to exist: this test's own executable stands in.
    let dir = tempfile::tempdir().expect("temporary directory");
    let copy = dir.path().join("engram-node.service");
    let stand_in = std::env::current_exe().expect("the test's executable");
    let stand_in = stand_in.to_str().expect("a UTF-8 path");
    std::fs::write(&copy, text.replace("/usr/local/bin/engram-node", stand_in))
        .expect("unit copied");
    let out = output(Command::new("systemd-analyze").arg("verify").arg(&copy));
    let complaints = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify ({}):\n{complaints}",
        out.status
    );
    let security = must_run(
        Command::new("systemd-analyze")
            // Tenths: the exposure level must be at most 2.0 of 10 (the unit's is 1.5).
            .args(["security", "--offline=yes", "--threshold=20"])
            .arg(&copy),
    );
    let score = security
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_default();
    println!("systemd-analyze security: {score}");
}
