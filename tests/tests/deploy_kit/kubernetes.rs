//! The Kubernetes manifests: checked against the API models, against each other and
//! against the node's configuration. Every test here reads the manifests through
//! python3-kubernetes under Debian's /usr/bin/python3 (`.ci/setup` installs it) and fails
//! without it.

use std::process::{Command, Stdio};

use engram_tests::harness::node_binary;
use serde_json::Value;

use super::{GRACE_STEPS, deploy, must_run, output, require, runs, seconds};

/// Debian's /usr/bin/python3, where python3-yaml and python3-kubernetes live (the first
/// `python3` on PATH may be a virtual environment's without them).
const PYTHON: &str = "/usr/bin/python3";

/// The Kubernetes documents of statefulset.yaml and secrets.yaml, checked against the API
/// models; fails the test without python3-kubernetes (see [`require`](super::require)).
#[track_caller]
fn manifests() -> Vec<Value> {
    let found = runs(PYTHON, &["-c", "import kubernetes, yaml"]);
    require(
        &format!("{PYTHON} with the kubernetes and yaml modules"),
        found,
        "python3-kubernetes",
    );
    let dir = deploy("kubernetes");
    let json = must_run(
        Command::new(PYTHON)
            .arg(dir.join("validate.py"))
            .arg(dir.join("statefulset.yaml"))
            .arg(dir.join("secrets.yaml")),
    );
    serde_json::from_str(&json).expect("validate.py prints JSON")
}

#[test]
fn the_kubernetes_manifests_fit_the_api_models() {
    let documents = manifests();
    let kinds: Vec<_> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Service",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "Secret",
            "Secret",
            "Secret"
        ]
    );
}

/// The one document of `kind` named `name`.
fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The string at dotted `key` (`storage.fdb.cluster-file`) of a parsed configuration.
fn setting<'a>(config: &'a Value, key: &str) -> &'a str {
    let mut value = config;
    for part in key.split('.') {
        value = &value[part];
    }
    value.as_str().unwrap_or_else(|| panic!("{key} is not set"))
}

/// The (secret, key) a file at `path` of `container` comes from, following an init
/// container that copies it (`install -m 0600 SOURCES... DIR/`) into a volume they share;
/// with whether it went through such a copy.
fn secret_behind(pod: &Value, container: &Value, path: &str) -> (String, String, bool) {
    let (dir, file) = path.rsplit_once('/').expect("an absolute path");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("{path}: nothing mounted at {dir}"));
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    if let Some(secret) = volume.get("secret") {
        let key = match secret["items"].as_array() {
            Some(items) => items
                .iter()
                .find(|i| i["path"] == file)
                .unwrap_or_else(|| panic!("{path}: not an item of its secret"))["key"]
                .as_str()
                .expect("key")
                .to_owned(),
            None => file.to_owned(),
        };
        let name = secret["secretName"]
            .as_str()
            .expect("secretName")
            .to_owned();
        return (name, key, false);
    }
    for init in pod["initContainers"].as_array().into_iter().flatten() {
        let command: Vec<&str> = init["command"]
            .as_array()
            .expect("command")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let Some(target) = init["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["name"] == mount["name"])
        else {
            continue;
        };
        assert_eq!(
            command[..3],
            ["install", "-m", "0600"],
            "{path}: copied how?"
        );
        assert_eq!(
            command.last().copied(),
            Some(format!("{}/", target["mountPath"].as_str().expect("path")).as_str())
        );
        if let Some(source) = command[3..command.len() - 1]
            .iter()
            .find(|s| s.rsplit_once('/').is_some_and(|(_, f)| f == file))
        {
            let (secret, key, _) = secret_behind(pod, init, source);
            return (secret, key, true);
        }
    }
    panic!("{path}: neither a secret nor copied from one")
}

/// Parses TOML with Python's tomllib into JSON.
fn toml(text: &str) -> Value {
    let mut child = Command::new(PYTHON)
        .args([
            "-c",
            "import json, sys, tomllib; json.dump(tomllib.loads(sys.stdin.read()), sys.stdout)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("toml written");
    let out = child.wait_with_output().expect("python3 ends");
    assert!(out.status.success(), "not TOML");
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn the_statefulset_mounts_every_file_its_config_names_and_probes_ready_and_health() {
    let documents = manifests();
    let set = find(&documents, "StatefulSet", "engram");
    let pod = &set["spec"]["template"]["spec"];
    let labels = &set["spec"]["template"]["metadata"]["labels"];
    let service_name = set["spec"]["serviceName"].as_str().expect("serviceName");
    let headless = find(&documents, "Service", service_name);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    for selector in [
        &set["spec"]["selector"]["matchLabels"],
        &headless["spec"]["selector"],
        &find(&documents, "Service", "engram")["spec"]["selector"],
        &find(&documents, "PodDisruptionBudget", "engram")["spec"]["selector"]["matchLabels"],
    ] {
        for (key, value) in selector.as_object().expect("a selector") {
            assert_eq!(&labels[key], value, "a selector misses the pods");
        }
    }

    let container = &pod["containers"][0];
    let command = container["command"].as_array().expect("command");
    assert_eq!(
        command[..3],
        ["/usr/local/bin/engram-node", "run", "--config"]
    );
    let config_path = command[3].as_str().expect("config path");
    let (config_dir, config_file) = config_path.rsplit_once('/').expect("a path");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == config_dir)
        .expect("the configuration is mounted");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("its volume");
    let map = find(
        &documents,
        "ConfigMap",
        volume["configMap"]["name"].as_str().expect("name"),
    );
    let config = toml(
        map["data"][config_file]
            .as_str()
            .expect("the ConfigMap holds it"),
    );

    // Probes and ports.
    let port = |name: &str| {
        container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}"))["containerPort"]
            .as_u64()
            .expect("a number")
    };
    let listen = setting(&config, "http.listen");
    assert!(listen.ends_with(&format!(":{}", port("http"))), "{listen}");
    for (probe, path) in [
        ("readinessProbe", "/ready"),
        ("livenessProbe", "/health"),
        ("startupProbe", "/ready"),
    ] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let annotations = &set["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], port("http").to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");

    // Each pod's id and cluster address, from fields defined before they are used.
    let env = container["env"].as_array().expect("env");
    let position = |name: &str| env.iter().position(|e| e["name"] == name);
    for (variable, value, field, source) in [
        (
            "ENGRAM__NODE__ID",
            "$(POD_NAME)",
            "POD_NAME",
            "metadata.name",
        ),
        (
            "ENGRAM__CLUSTER__LISTEN",
            &format!("$(POD_IP):{}", port("cluster")),
            "POD_IP",
            "status.podIP",
        ),
    ] {
        let at = position(variable).unwrap_or_else(|| panic!("no {variable}"));
        assert_eq!(env[at]["value"], *value);
        let from = position(field).unwrap_or_else(|| panic!("no {field}"));
        assert!(from < at, "{field} must come before {variable}");
        assert_eq!(env[from]["valueFrom"]["fieldRef"]["fieldPath"], source);
    }

    // Every file the configuration names comes from a secret that has it.
    assert_eq!(setting(&config, "storage.backend"), "fdb");
    let secrets: Vec<_> = documents.iter().filter(|d| d["kind"] == "Secret").collect();
    for (key, secret, copied) in [
        ("storage.fdb.cluster-file", "engram-fdb", false),
        ("cluster.cookie-file", "engram-secrets", true),
        ("cluster.tls-ca-file", "engram-cluster-tls", false),
        ("cluster.tls-cert-file", "engram-cluster-tls", false),
        ("cluster.tls-key-file", "engram-cluster-tls", true),
        ("security.admin-key-file", "engram-secrets", true),
        ("security.master-key-file", "engram-secrets", true),
    ] {
        let path = setting(&config, key);
        let (name, item, through_copy) = secret_behind(pod, container, path);
        assert_eq!(
            (name.as_str(), through_copy),
            (secret, copied),
            "{key} = {path}"
        );
        let document = secrets
            .iter()
            .find(|s| s["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{key}: no Secret {name} in secrets.yaml"));
        assert!(
            document["stringData"].get(&item).is_some(),
            "{key}: Secret {name} has no {item}"
        );
    }
    for mount in container["volumeMounts"].as_array().expect("mounts") {
        let writable = [setting(&config, "node.data-dir"), "/tmp"];
        if !writable.contains(&mount["mountPath"].as_str().expect("path")) {
            assert_eq!(
                mount["readOnly"], true,
                "{} is writable",
                mount["mountPath"]
            );
        }
    }
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    // The drain, then the stop: within the grace period.
    let pre_stop: Vec<&str> = container["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .expect("a preStop command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        pre_stop[..5],
        [
            "/usr/local/bin/engram-node",
            "drain",
            "--config",
            config_path,
            "--wait"
        ]
    );
    let drain = seconds(pre_stop[5]);
    let grace = seconds(setting(&config, "http.shutdown-grace"));
    let period = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("a grace period");
    assert!(
        period > drain + GRACE_STEPS * grace,
        "terminationGracePeriodSeconds {period} does not cover the drain ({drain}s) and the stop"
    );
}

#[test]
fn the_configmaps_cluster_toml_passes_check_config_with_the_pods_environment() {
    let documents = manifests();
    let text = find(&documents, "ConfigMap", "engram-config")["data"]["cluster.toml"]
        .as_str()
        .expect("cluster.toml")
        .to_owned();
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, text).expect("written");
    let set = find(&documents, "StatefulSet", "engram");
    let env: Vec<(String, String)> = set["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter(|e| {
            e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("ENGRAM__"))
        })
        .map(|e| {
            let value = e["value"].as_str().expect("a value");
            let value = value
                .replace("$(POD_NAME)", "engram-0")
                .replace("$(POD_IP)", "10.1.2.3");
            (e["name"].as_str().expect("name").to_owned(), value)
        })
        .collect();
    assert!(env.len() >= 2, "{env:?}");
    let binary = node_binary().unwrap_or_else(|e| panic!("no engram-node: {e}"));
    let check = |overrides: &[(&str, &str)]| {
        let mut command = Command::new(&binary);
        command
            .args(["check-config", "--config"])
            .arg(&file)
            .env_remove("ENGRAM_ADMIN_KEY");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ENGRAM__") {
                command.env_remove(key);
            }
        }
        command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command.envs(overrides.iter().copied());
        output(&mut command)
    };
    // The binary CI tests is built without FoundationDB: the backend is the one problem
    // allowed, and the check runs again on SQLite to see that nothing else is wrong.
    let first = check(&[]);
    let out = if first.status.success() {
        first
    } else {
        let errors = String::from_utf8_lossy(&first.stderr);
        let problems: Vec<_> = errors
            .lines()
            .filter(|l| l.trim_start().starts_with("- "))
            .collect();
        assert!(
            problems.len() == 1 && problems[0].contains("storage.backend"),
            "check-config: {errors}"
        );
        check(&[("ENGRAM__STORAGE__BACKEND", "sqlite")])
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "{stdout}{stderr}"
    );
    // The gateway serves plain HTTP inside the cluster (documented); anything else the node
    // would warn about is a mistake of the kit.
    for warning in stderr.lines().filter(|l| l.starts_with("warning:")) {
        assert!(warning.contains("http.listen"), "{warning}");
    }
}
