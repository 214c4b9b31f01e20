//! The module graph of a crate, read from its sources: which file names which other file's
//! items through `use` declarations and qualified paths (`crate::`, `super::`, `self::`, a
//! child module's name, or a module imported by `use`). The layering test checks it for
//! circles and for the named rules of `docs/architecture.md`, "Layering".
//!
//! Files are the nodes: an inline module belongs to its file, and code that only tests
//! (`#[cfg(test)]` items and the test modules they declare) is left out, since it never
//! ships. Declaring a child module (`mod child;`) is containment, not an import: a parent
//! depends on its child only where it names the child's items.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use self::parse::parse;

mod parse;

/// One file of a crate: its module path (`user::serve`; the crate root is empty) and the
/// paths it names.
#[derive(Debug, Clone)]
pub struct File {
    /// The source file.
    pub path: PathBuf,
    /// Its module path from the crate root (empty for the root).
    pub module: Vec<String>,
    /// The child modules it declares in files of their own (`mod x;`).
    pub children: Vec<String>,
    /// Every path the file names, from its first segment (after resolving `crate`, `super`,
    /// `self`, children and imported modules), each with the line it is on.
    pub paths: Vec<(Vec<String>, usize)>,
    /// Every external crate or top-level name a path starts with (`tokio`, `engram_storage`).
    pub externs: BTreeSet<String>,
    /// The file's own `use` declarations by the name they bind: the crate path they import,
    /// or none for an external crate's item. A child naming `super::X` where its parent only
    /// imports `X` depends on where `X` is defined, not on the parent.
    pub imports: BTreeMap<String, Option<Vec<String>>>,
}

/// An import of one file by another: `from` names `name` in `to`, on `line`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    /// The importing file's module (`user::serve`, the root as `crate`).
    pub from: String,
    /// The module of the file that defines what it names.
    pub to: String,
    /// The item named, below that module (`Reader`, `UserMsg::Call`; `*` for a glob).
    pub name: String,
    /// The line of the importing file.
    pub line: usize,
}

/// A crate's files and the imports between them.
#[derive(Debug)]
pub struct Graph {
    /// Files by module path (`user::serve`), the root as `crate`.
    pub files: BTreeMap<String, File>,
    /// Every import of one file by another, through `use` re-exports to where it is defined.
    pub edges: Vec<Edge>,
}

impl Graph {
    /// Reads the crate whose root file is `root` (`src/lib.rs` or `src/main.rs`), following
    /// its `mod` declarations.
    pub fn read(root: &Path) -> Graph {
        let mut files = BTreeMap::new();
        let mut queue = vec![(root.to_path_buf(), Vec::<String>::new())];
        while let Some((path, module)) = queue.pop() {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            let file = parse(&path, &module, &text);
            let dir = child_dir(&path);
            for child in &file.children {
                let flat = dir.join(format!("{child}.rs"));
                let nested = dir.join(child).join("mod.rs");
                let child_path = if flat.exists() { flat } else { nested };
                let mut child_module = module.clone();
                child_module.push(child.clone());
                queue.push((child_path, child_module));
            }
            files.insert(name(&module), file);
        }
        let modules: BTreeSet<Vec<String>> = files.values().map(|f| f.module.clone()).collect();
        let mut edges = BTreeSet::new();
        for file in files.values() {
            let from = name(&file.module);
            for (path, line) in &file.paths {
                let Some((path, n)) = defined_at(&files, &modules, path.clone()) else {
                    continue;
                };
                let to = name(&path[..n]);
                if to == from {
                    continue;
                }
                let item = path[n..].join("::");
                edges.insert(Edge {
                    from: from.clone(),
                    to,
                    name: if item.is_empty() { "*".into() } else { item },
                    line: *line,
                });
            }
        }
        Graph {
            files,
            edges: edges.into_iter().collect(),
        }
    }

    /// The two sibling modules an import ties, each with everything it declares: for an
    /// import from `user::serve` of `front::Reader`, `user` and `front`. None where one file
    /// is inside the other: a parent and the children it declares are one unit (Rust gives a
    /// child its parent's private items), so such imports tie no circle.
    pub fn lifted(edge: &Edge) -> Option<(String, String)> {
        let split = |m: &str| -> Vec<String> {
            if m == "crate" {
                Vec::new()
            } else {
                m.split("::").map(str::to_owned).collect()
            }
        };
        let (from, to) = (split(&edge.from), split(&edge.to));
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if common == from.len() || common == to.len() {
            return None;
        }
        Some((name(&from[..=common]), name(&to[..=common])))
    }

    /// The circles: each set of two or more sibling modules (with their children) that reach
    /// one another through imports (strongly connected components), with the imports of
    /// files that tie them.
    pub fn circles(&self) -> Vec<(Vec<String>, Vec<Edge>)> {
        let names: Vec<&String> = self.files.keys().collect();
        let index: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut next: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); names.len()];
        for (from, to) in self.edges.iter().filter_map(Self::lifted) {
            next[index[&from]].insert(index[&to]);
        }
        let mut circles = Vec::new();
        for component in strongly_connected(&next) {
            if component.len() < 2 {
                continue;
            }
            let members: BTreeSet<String> = component.iter().map(|&i| names[i].clone()).collect();
            let inside = self
                .edges
                .iter()
                .filter(|e| {
                    Self::lifted(e)
                        .is_some_and(|(f, t)| members.contains(&f) && members.contains(&t))
                })
                .cloned()
                .collect();
            circles.push((members.into_iter().collect(), inside));
        }
        circles
    }

    /// Describes circles for a failure message: each file, then the names that tie it.
    pub fn describe(&self, circles: &[(Vec<String>, Vec<Edge>)]) -> String {
        let mut out = String::new();
        for (members, edges) in circles {
            out.push_str(&format!("circle of {} modules:\n", members.len()));
            for m in members {
                let file = &self.files[m];
                let children = if file.children.is_empty() {
                    ""
                } else {
                    " (with its children)"
                };
                out.push_str(&format!("  {}{children}\n", file.path.display()));
            }
            out.push_str("  tied by:\n");
            for e in edges {
                out.push_str(&format!(
                    "    {} -> {}::{} (line {})\n",
                    e.from, e.to, e.name, e.line
                ));
            }
        }
        out
    }
}

/// Where the item a path names is defined: the path, followed through the `use`
/// declarations of the files it passes, and how many of its segments name the file. None for
/// a path that leaves the crate.
fn defined_at(
    files: &BTreeMap<String, File>,
    modules: &BTreeSet<Vec<String>>,
    mut path: Vec<String>,
) -> Option<(Vec<String>, usize)> {
    for _ in 0..8 {
        // The longest prefix that is a file; the rest is the item it names.
        let n = (1..=path.len())
            .rev()
            .find(|&n| modules.contains(&path[..n].to_vec()))?;
        let Some(imported) = path
            .get(n)
            .and_then(|item| files[&name(&path[..n])].imports.get(item))
        else {
            return Some((path, n));
        };
        let rest = path[n + 1..].to_vec();
        path = imported.clone()?;
        path.extend(rest);
    }
    None
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// Where a file's children live: beside it for `lib.rs`, `main.rs` and `mod.rs`, otherwise
/// in the folder named after it.
fn child_dir(path: &Path) -> PathBuf {
    let parent = path.parent().unwrap().to_path_buf();
    match path.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "main.rs" | "mod.rs") => parent,
        _ => parent.join(path.file_stem().unwrap()),
    }
}

/// Tarjan's algorithm over the successor lists (recursive: module graphs are shallow).
fn strongly_connected(next: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, next: &[BTreeSet<usize>], s: &mut State) {
        s.index[v] = Some(s.counter);
        s.low[v] = s.counter;
        s.counter += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &next[v] {
            match s.index[w] {
                None => {
                    visit(w, next, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(i) if s.on_stack[w] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = next.len();
    let mut s = State {
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(v, next, &mut s);
        }
    }
    s.out
}
