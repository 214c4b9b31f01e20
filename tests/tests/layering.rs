//! The layering of the workspace (docs/architecture.md, "Layering"). Between crates, checked
//! with `cargo metadata`:
//! storage and inference depend on no workspace crate, actors on both, node wires everything,
//! and nothing depends on node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
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

/// The workspace whose sources the module rules read: this one, or the checkout named by
/// `ENGRAM_LAYERING_ROOT` (to show what the rules find in another version).
fn sources() -> PathBuf {
    std::env::var_os("ENGRAM_LAYERING_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap()
                .to_path_buf()
        })
}

/// Every crate's module graph, read from its sources (`engram_tests::modules`).
fn graphs() -> Vec<(&'static str, Graph)> {
    let root = sources();
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

/// The files of `krate` whose module is `prefix` or below it.
fn under<'a>(
    graph: &'a Graph,
    prefix: &str,
) -> impl Iterator<Item = &'a engram_tests::modules::File> {
    let nested = format!("{prefix}::");
    graph
        .files
        .iter()
        .filter(move |(name, _)| *name == prefix || name.starts_with(&nested))
        .map(|(_, file)| file)
}

/// The imports from modules at or under `from` of modules at or under any of `to`, as lines
/// for a failure message.
fn imports(graph: &Graph, from: &str, to: &[&str]) -> Vec<String> {
    let inside =
        |module: &str, prefix: &str| module == prefix || module.starts_with(&format!("{prefix}::"));
    graph
        .edges
        .iter()
        .filter(|e| inside(&e.from, from) && to.iter().any(|t| inside(&e.to, t)))
        .map(|e| format!("{} -> {}::{} (line {})", e.from, e.to, e.name, e.line))
        .collect()
}

fn graph(name: &str) -> Graph {
    graphs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, g)| g)
        .unwrap()
}

/// A user's or a tenant's actor is reached through the router and the directory, and never
/// reaches back up: it holds only the narrow roster handle (whether it may stop, that it
/// stopped), so a change to an actor never touches the router, the directory or the
/// dispatcher that delivers vectors to it.
#[test]
fn user_and_tenant_actors_never_import_the_router_the_directory_or_the_dispatcher() {
    let actors = graph("actors");
    for actor in ["user", "tenant", "supervisor"] {
        assert!(
            under(&actors, actor).count() > 0,
            "no {actor} module to check"
        );
        let found = imports(&actors, actor, &["front", "directory", "dispatch"]);
        assert!(
            found.is_empty(),
            "{actor} reaches up:\n{}",
            found.join("\n")
        );
    }
}

/// What can be asked is a leaf: the requests, their payloads and replies, and the reader
/// import no actor, router, directory or service, so a node and its peers agree on them
/// without either side's internals.
#[test]
fn requests_import_no_actor_router_or_service() {
    let actors = graph("actors");
    let above = [
        "user",
        "tenant",
        "supervisor",
        "directory",
        "front",
        "services",
        "pipeline",
        "dispatch",
        "distillation",
        "jobs",
        "cluster",
    ];
    assert!(
        under(&actors, "request").count() > 1,
        "no request module with its payloads to check"
    );
    let found = imports(&actors, "request", &above);
    assert!(found.is_empty(), "request imports:\n{}", found.join("\n"));
}

/// The memory model (formation, conflicts, retrieval, context assembly, personal data) is
/// plain functions over data: no actor runtime, no async runtime, so it is tested and
/// benchmarked without either.
#[test]
fn the_memory_model_uses_neither_ractor_nor_tokio() {
    let actors = graph("actors");
    assert!(
        under(&actors, "model").count() > 1,
        "no memory model to check"
    );
    for file in under(&actors, "model") {
        for runtime in ["ractor", "tokio"] {
            assert!(
                !file.externs.contains(runtime),
                "{} uses {runtime}",
                file.path.display()
            );
        }
    }
}

/// Storage and inference know nothing of each other's or the actors' runtime roles: storage
/// never starts an actor, and the storage crate's data layer never names a backend.
#[test]
fn storage_data_layer_names_no_backend() {
    let storage = graph("storage");
    let found = imports(&storage, "data", &["sqlite", "fdb"]);
    assert!(
        found.is_empty(),
        "data names a backend:\n{}",
        found.join("\n")
    );
    for file in storage.files.values() {
        assert!(
            !file.externs.contains("ractor"),
            "{} uses ractor",
            file.path.display()
        );
    }
}

/// The names a path or `use` tree starting at `engram_storage::` in `code` names, up to where
/// the path (or the tree's braces) ends, each with the line it is on.
fn storage_names(code: &str) -> Vec<(String, usize)> {
    const ROOT: &str = "engram_storage::";
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(ROOT) {
        let start = from + at + ROOT.len();
        let line = code[..start].lines().count();
        let mut depth = 0usize;
        let mut end = start;
        for (i, c) in code[start..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                c if c.is_alphanumeric() || c == '_' || c == ':' => {}
                ',' | ' ' | '\n' if depth > 0 => {}
                _ => {
                    end = start + i;
                    break;
                }
            }
            end = start + i + c.len_utf8();
        }
        for name in code[start..end]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|n| !n.is_empty())
        {
            names.push((name.to_owned(), line));
        }
        from = end.max(start);
    }
    names
}

/// The gateway's handlers reach users' and tenants' data only through the typed front door
/// (`AppState::ask`, to the owning actor, fenced by its shard's lease) and the node's
/// services only through the admin's handle (`engram_actors::admin::Admin`, `AppState::admin`):
/// no file of `node/src/http` that ships (tests left out, as `engram_tests::modules` reads
/// them) reaches the directory or its services (`.directory()`, `.services()`, `.store`,
/// `.keyspace`, `engram_actors::directory`/`services`), and what it names of
/// `engram_storage` is only value types and constants (names in upper case) of the modules
/// that define them (`types`, `access`, `schema`, `shared`): no store, transaction, keyspace
/// or key layout, and no storage function, so no handler writes or reads storage itself.
#[test]
fn http_handlers_reach_the_memory_only_through_the_front_door_or_the_admin_handle() {
    const VALUE_MODULES: [&str; 4] = ["types", "access", "schema", "shared"];
    const NOT_VALUES: [&str; 6] = [
        "Store",
        "Txn",
        "Keyspace",
        "TenantData",
        "UserData",
        "Subspace",
    ];
    const REACHES: [&str; 6] = [
        ".directory()",
        ".services()",
        ".store",
        ".keyspace",
        "engram_actors::directory",
        "engram_actors::services",
    ];
    let graph = Graph::read(&sources().join("node/src/main.rs"));
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in graph.files.values() {
        if file.module.first().map(String::as_str) != Some("http") {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(&file.path).unwrap();
        // Code only: comments may name anything.
        let code: String = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("//") {
                    ""
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let at = |line: usize| format!("{}:{line}", file.path.display());
        for (n, l) in code.lines().enumerate() {
            for reach in REACHES {
                let found = l.match_indices(reach).any(|(i, _)| {
                    // `.store` and `.keyspace` as fields, not the start of a longer name.
                    !l[i + reach.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if found {
                    wrong.push(format!("{}: {reach}", at(n + 1)));
                }
            }
        }
        if file.externs.contains("engram_storage") {
            for (name, line) in storage_names(&code) {
                let value = name.starts_with(|c: char| c.is_ascii_uppercase())
                    && !NOT_VALUES.contains(&name.as_str());
                if !value && !VALUE_MODULES.contains(&name.as_str()) {
                    wrong.push(format!("{}: engram_storage names {name}", at(line)));
                }
            }
        }
    }
    println!("http: {checked} files checked");
    assert!(
        checked >= 10,
        "the http module's files were read ({checked})"
    );
    assert!(
        wrong.is_empty(),
        "http reaches the memory around the front door and the admin handle:\n{}",
        wrong.join("\n")
    );
}
