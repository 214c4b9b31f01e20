//! The layering of the workspace (docs/architecture.md, "Layering"). Between crates, checked
//! with `cargo metadata`:
//! storage and inference depend on no workspace crate, actors on both, node wires everything,
//! and nothing depends on node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use engram_tests::modules::Graph;

fn workspace_deps() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                // Normal and build dependencies only: dev-dependencies do not ship.
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .filter(|n| names.contains(n))
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn crates_depend_only_in_the_allowed_direction() {
    let deps = workspace_deps();
    assert_eq!(
        deps.keys().cloned().collect::<BTreeSet<_>>(),
        set(&[
            "engram-actors",
            "engram-inference",
            "engram-node",
            "engram-storage",
            "engram-tests"
        ])
    );
    assert_eq!(
        deps["engram-storage"],
        set(&[]),
        "storage depends on no workspace crate"
    );
    assert_eq!(
        deps["engram-inference"],
        set(&[]),
        "inference depends on no workspace crate"
    );
    assert_eq!(
        deps["engram-actors"],
        set(&["engram-inference", "engram-storage"])
    );
    assert_eq!(
        deps["engram-node"],
        set(&["engram-actors", "engram-inference", "engram-storage"])
    );
    for (name, d) in &deps {
        assert!(!d.contains("engram-node"), "{name} depends on node");
    }
}

/// Every crate's module graph, read from its sources (`engram_tests::modules`).
fn graphs() -> Vec<(&'static str, Graph)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    [
        ("storage", "storage/src/lib.rs"),
        ("inference", "inference/src/lib.rs"),
        ("actors", "actors/src/lib.rs"),
        ("node", "node/src/main.rs"),
        ("tests", "tests/src/lib.rs"),
    ]
    .into_iter()
    .map(|(name, file)| (name, Graph::read(&root.join(file))))
    .collect()
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut report = String::new();
    let mut total = 0;
    for (name, graph) in graphs() {
        let circles = graph.circles();
        let files: usize = circles.iter().map(|(m, _)| m.len()).sum();
        println!(
            "{name}: {} files, {} imports, {} circles ({} modules in circles)",
            graph.files.len(),
            graph.edges.len(),
            circles.len(),
            files
        );
        total += circles.len();
        report.push_str(&graph.describe(&circles));
    }
    assert_eq!(total, 0, "import circles between modules:\n{report}");
}
