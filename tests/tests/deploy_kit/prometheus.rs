//! The Prometheus side of the kit: the alert rules and their unit tests, the scrape
//! configuration, the Grafana dashboard's queries, and the metrics both read, against a real
//! node. Every test here runs promtool (Debian's prometheus, which `.ci/setup` installs) and
//! fails without it.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engram_tests::harness::{Sandbox, turn};
use hyper::StatusCode;
use serde_json::{Value, json};

use super::promql::{Matcher, exposition, selectors};
use super::{deploy, must_run, read, require_promtool};

/// Labels that Prometheus attaches to every scraped series (never the node's own).
const TARGET_LABELS: [&str; 2] = ["job", "instance"];

/// Label values a rule or panel selects that a node exports only after a rare event, with
/// why the test does not cause the event (the family and label are still checked).
const RARE_VALUES: [(&str, &str, &str, &str); 1] = [(
    "engram_audit_entries_total",
    "outcome",
    "failed",
    "written only when storage refuses an audit batch",
)];

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = deploy("prometheus");
    let text = read(&dir.join("alerts.yml"));
    let alerts: Vec<&str> = text.split("- alert: ").skip(1).collect();
    assert!(alerts.len() >= 10, "{} alerts", alerts.len());
    for alert in &alerts {
        let name = alert.lines().next().unwrap_or_default();
        for field in ["expr:", "for:", "severity:", "summary:", "description:"] {
            assert!(alert.contains(field), "alert {name} has no {field}");
        }
    }
    // The list: each of these is proven to fire, and to stay silent, in the tests.
    let tests = read(&dir.join("alerts_test.yml"));
    for alert in [
        "EngramNodeDown",
        "EngramFencedWrites",
        "EngramShardsTakenOver",
        "EngramEmbeddingLag",
        "EngramStorageRetries",
        "EngramStorageExhausted",
        "EngramSensitiveReadBreakerTripped",
        "EngramAuditWritesFailing",
    ] {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "alerts_test.yml does not test {alert}"
        );
    }
    require_promtool();
    let promtool = |args: &[&str]| must_run(Command::new("promtool").args(args).current_dir(&dir));
    let checked = promtool(&["check", "rules", "alerts.yml"]);
    assert!(
        checked.contains(&format!("{} rules found", alerts.len())),
        "{checked}"
    );
    promtool(&["test", "rules", "alerts_test.yml"]);
    promtool(&["check", "config", "prometheus.yml"]);
}

/// The dashboard's panels, rows' nested panels included.
fn dashboard_panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        out.extend(panel["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every PromQL expression of the dashboard's panels, with the panel's title.
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard_panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            out.push((panel["title"].to_string(), expr.to_owned()));
        }
    }
    out
}

fn dashboard() -> Value {
    let text = read(&deploy("grafana/engram.json"));
    assert!(
        !text.contains("http://") && !text.contains("https://"),
        "the dashboard loads nothing from outside"
    );
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

#[test]
fn the_dashboard_reads_its_datasource_variable_and_every_query_parses_as_promql() {
    let dashboard = dashboard();
    assert_eq!(dashboard["schemaVersion"], 39);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    let ds = variables
        .iter()
        .find(|v| v["name"] == "DS_PROMETHEUS")
        .expect("a DS_PROMETHEUS variable");
    assert_eq!(
        (&ds["type"], &ds["query"]),
        (&json!("datasource"), &json!("prometheus"))
    );
    let source = json!({"type": "prometheus", "uid": "${DS_PROMETHEUS}"});
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for panel in dashboard_panels(&dashboard) {
        let title = &panel["title"];
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "{title}: id reused"
        );
        let pos = &panel["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| pos[k].as_u64().expect("gridPos"));
        assert!(x + w <= 24, "{title}: wider than the grid");
        for cell in (x..x + w).flat_map(|x| (y..y + h).map(move |y| (x, y))) {
            assert!(
                cells.insert(cell),
                "{title} overlaps another panel at {cell:?}"
            );
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"], source, "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let refs: BTreeSet<_> = targets.iter().map(|t| t["refId"].to_string()).collect();
        assert_eq!(refs.len(), targets.len(), "{title}: refIds repeat");
        for target in targets {
            assert_eq!(target["datasource"], source, "{title}");
        }
    }
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        assert_eq!(variable["datasource"], source, "{}", variable["name"]);
    }

    require_promtool();
    // Each query as a recording rule, Grafana's variables replaced by what they stand for.
    let rules: Vec<Value> = dashboard_queries(&dashboard)
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$job", ".*")
                .replace("$instance", ".*");
            json!({"record": format!("dashboard:query_{i}"), "expr": expr})
        })
        .collect();
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("dashboard_rules.yml");
    // JSON is YAML.
    let groups = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, groups.to_string()).expect("rules written");
    let checked = must_run(
        Command::new("promtool")
            .arg("check")
            .arg("rules")
            .arg(&file),
    );
    assert!(
        checked.contains(&format!("{} rules found", rules.len())),
        "{checked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_read_is_exported_by_a_real_node() {
    require_promtool();
    let dashboard = dashboard();
    let mut read_by_kit: Vec<(String, String)> = dashboard_queries(&dashboard)
        .into_iter()
        .map(|(title, expr)| (format!("dashboard panel {title}"), expr))
        .collect();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        read_by_kit.push((
            format!("dashboard variable {}", variable["name"]),
            variable["definition"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ));
    }
    read_by_kit.push((
        "alerts.yml".to_owned(),
        read(&deploy("prometheus/alerts.yml")),
    ));

    // A node with everything that exports metrics: the embedding pool and its pipeline, the
    // generative model and its lane, leases; a low rate limit so that a key meets it.
    let node = Sandbox::new()
        .node("kit")
        .set("distillation.model", true)
        .set("distillation.generation.device", "cpu")
        .set("security.rate-limit", 2)
        .set("security.rate-burst", 5)
        .start()
        .await;
    let (gateway, _) = node.must_make_key("default", "gateway", "kit").await;
    let client = node.client().with_key(&gateway);
    client
        .must_append_turn("kit-user", &turn("kit-1", "s1", "show the orders", "done"))
        .await;
    let context = json!({"session_id": "s1", "query": "their total?", "route": "nl2sql_query"});
    let _ = client.post("/v1/users/kit-user/context", &context).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .get("/v1/users/kit-user/memories")
        .await
        .map(|r| r.status)
        .ok()
        != Some(StatusCode::TOO_MANY_REQUESTS)
    {
        assert!(Instant::now() < deadline, "no 429 at two requests a second");
    }
    let anonymous = node.client().without_key();
    let refused = anonymous.get("/v1/users/kit-user/memories").await;
    assert_eq!(refused.expect("an answer").status, StatusCode::UNAUTHORIZED);

    let scrape = node
        .client()
        .get("/metrics")
        .await
        .expect("/metrics")
        .text();
    let samples = exposition(&scrape);
    let mut missing = Vec::new();
    let mut names = BTreeSet::new();
    for (place, text) in &read_by_kit {
        for (name, matchers) in selectors(text) {
            names.insert(name.clone());
            let Some(labels) = samples.get(&name) else {
                missing.push(format!("{place}: {name} is not exported"));
                continue;
            };
            for Matcher { label, op, value } in matchers {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                let Some(values) = labels.get(&label) else {
                    missing.push(format!("{place}: {name} has no label {label}"));
                    continue;
                };
                let rare = RARE_VALUES
                    .iter()
                    .any(|&(n, l, v, _)| (n, l, v) == (&name, &label, &value));
                if op == "=" && !values.contains(&value) && !rare {
                    missing.push(format!("{place}: {name} has no {label}=\"{value}\""));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    println!(
        "the kit reads {} metric names, all exported; values not caused here: {RARE_VALUES:?}",
        names.len()
    );
    let families: BTreeSet<&str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let unread: Vec<_> = families
        .iter()
        .filter(|f| !names.iter().any(|n| n.starts_with(*f)))
        .collect();
    println!("exported and on no panel or rule: {unread:?}");

    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    use std::io::Write;
    lint.stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("scrape written");
    let out = lint.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
