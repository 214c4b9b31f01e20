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

/// Tarjan's algorithm, iterative over the successor lists.
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

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// Splits source into identifiers, `::` and single punctuation, with comments, strings,
/// character literals and lifetimes removed; each token carries its line.
fn lex(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = |k: usize| chars.get(i + k).copied().unwrap_or('\0');
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if (c == 'r' || c == 'b') && raw_string_start(&chars, i).is_some() {
            let (hashes, body) = raw_string_start(&chars, i).unwrap();
            i = body;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                if chars[i] == '\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if c == '"' || (c == 'b' && at(1) == '"') {
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{..}') or a lifetime ('a): skip either.
            if at(1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_owned).unwrap_or(word);
            out.push((Token::Ident(word), line));
        } else if c == ':' && at(1) == ':' {
            out.push((Token::PathSep, line));
            i += 2;
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// `r"`, `r#"`, `br"`, `br#"`: the number of hashes and where the body starts.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if chars[j] == 'b' {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

fn ident(t: Option<&(Token, usize)>) -> Option<&str> {
    match t {
        Some((Token::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn punct(t: Option<&(Token, usize)>, c: char) -> bool {
    matches!(t, Some((Token::Punct(p), _)) if *p == c)
}

/// Whether tokens from `i` read `#[cfg(test)]`; if so, the index after it.
fn cfg_test(tokens: &[(Token, usize)], i: usize) -> Option<usize> {
    let words = ["cfg", "test"];
    let shape = punct(tokens.get(i), '#')
        && punct(tokens.get(i + 1), '[')
        && ident(tokens.get(i + 2)) == Some(words[0])
        && punct(tokens.get(i + 3), '(')
        && ident(tokens.get(i + 4)) == Some(words[1])
        && punct(tokens.get(i + 5), ')')
        && punct(tokens.get(i + 6), ']');
    shape.then_some(i + 7)
}

/// The end of the item starting at `i`: after its `;` or its closing brace at this depth.
fn item_end(tokens: &[(Token, usize)], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < tokens.len() {
        match &tokens[i].0 {
            Token::Punct('{') | Token::Punct('(') | Token::Punct('[') => depth += 1,
            Token::Punct('}') | Token::Punct(')') | Token::Punct(']') => {
                depth = depth.saturating_sub(1);
                if depth == 0 && tokens[i].0 == Token::Punct('}') {
                    return i + 1;
                }
            }
            Token::Punct(';') if depth == 0 => return i + 1,
            Token::Ident(_) | Token::PathSep | Token::Punct(_) => {}
        }
        i += 1;
    }
    i
}

/// Reads one file: its `mod` declarations and every path it names, resolved from the crate
/// root where it starts with `crate`, `super`, `self`, a child module or an imported module.
fn parse(path: &Path, module: &[String], text: &str) -> File {
    let mut tokens = lex(text);
    // Drop test-only items first.
    let mut kept = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if let Some(after) = cfg_test(&tokens, i) {
            // Skip further attributes, then the item.
            let mut j = after;
            while punct(tokens.get(j), '#') {
                j = item_end(&tokens, j + 1);
            }
            i = item_end(&tokens, j);
            continue;
        }
        kept.push(tokens[i].clone());
        i += 1;
    }
    tokens = kept;

    // Module declarations: `mod name;` at file level (children) and `mod name {` (inline).
    let mut children = Vec::new();
    for w in tokens.windows(3) {
        if let (Token::Ident(m), Token::Ident(n), Token::Punct(';')) = (&w[0].0, &w[1].0, &w[2].0)
            && m == "mod"
        {
            children.push(n.clone());
        }
    }

    let mut file = File {
        path: path.to_path_buf(),
        module: module.to_vec(),
        children: children.clone(),
        paths: Vec::new(),
        externs: BTreeSet::new(),
        imports: BTreeMap::new(),
    };
    // Imported module aliases: `use crate::model;` lets `model::x` name `crate::model::x`.
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Inline modules: (name, brace depth at which it closes).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let (tok, line) = &tokens[i];
        match tok {
            Token::Punct('{') => {
                depth += 1;
                i += 1;
                continue;
            }
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            Token::Ident(_) | Token::PathSep | Token::Punct(_) => {}
        }
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        if ident(Some(&tokens[i])) == Some("mod")
            && let Some(n) = ident(tokens.get(i + 1))
            && punct(tokens.get(i + 2), '{')
        {
            inline.push((n.to_owned(), depth + 1));
            i += 2;
            continue;
        }
        if ident(Some(&tokens[i])) == Some("use") {
            let end = item_end(&tokens, i);
            let mut leaves = Vec::new();
            use_tree(&tokens[i + 1..end], &[], &mut leaves);
            for (leaf, alias) in leaves {
                let resolved = resolve(&leaf, &here, module.len(), &children, &aliases);
                if let (Some(a), true) = (&alias, inline.is_empty()) {
                    file.imports.insert(a.clone(), resolved.clone());
                }
                if let Some(resolved) = resolved {
                    if let Some(a) = alias {
                        aliases.insert(a, resolved.clone());
                    }
                    file.paths.push((resolved, *line));
                } else if let Some(first) = leaf.first() {
                    file.externs.insert(first.clone());
                }
            }
            i = end;
            continue;
        }
        // A qualified path in code: ident (:: ident)+, not itself after a `::`.
        if let Token::Ident(first) = tok
            && tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep)
            && !(i > 0 && tokens[i - 1].0 == Token::PathSep)
        {
            let mut segs = vec![first.clone()];
            let mut j = i + 1;
            while tokens.get(j).map(|t| &t.0) == Some(&Token::PathSep) {
                match ident(tokens.get(j + 1)) {
                    Some(s) => segs.push(s.to_owned()),
                    None => break,
                }
                j += 2;
            }
            if let Some(resolved) = resolve(&segs, &here, module.len(), &children, &aliases) {
                file.paths.push((resolved, *line));
            } else {
                file.externs.insert(first.clone());
            }
            i = j;
            continue;
        }
        i += 1;
    }
    file
}

/// The leaves of a use tree, each with the name it is imported as (for `use a::b;` that is
/// `b`, for `use a::b as c;` `c`, for `a::{self}` `a`; none for globs).
fn use_tree(
    tokens: &[(Token, usize)],
    prefix: &[String],
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix.to_vec();
    // `{self}` names the prefix itself.
    let mut this = false;
    let finish = |path: &mut Vec<String>, this: &mut bool, out: &mut Vec<_>| {
        if path.len() > prefix.len() || *this {
            out.push((path.clone(), path.last().cloned()));
        }
        *path = prefix.to_vec();
        *this = false;
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].0 {
            Token::Ident(s) if s == "as" => {
                let alias = ident(tokens.get(i + 1)).map(str::to_owned);
                out.push((path.clone(), alias.filter(|a| a != "_")));
                path = prefix.to_vec();
                this = false;
                i += 2;
                continue;
            }
            Token::Ident(s) if s == "self" && path.len() == prefix.len() && !prefix.is_empty() => {
                this = true;
            }
            Token::Ident(s) => path.push(s.clone()),
            Token::PathSep => {}
            Token::Punct('*') => {
                out.push((path.clone(), None));
                path = prefix.to_vec();
            }
            Token::Punct('{') => {
                let mut depth = 0;
                let mut j = i;
                while j < tokens.len() {
                    match tokens[j].0 {
                        Token::Punct('{') => depth += 1,
                        Token::Punct('}') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        Token::Ident(_) | Token::PathSep | Token::Punct(_) => {}
                    }
                    j += 1;
                }
                use_tree(&tokens[i + 1..j.min(tokens.len())], &path, out);
                path = prefix.to_vec();
                i = j + 1;
                continue;
            }
            Token::Punct(',') | Token::Punct(';') => finish(&mut path, &mut this, out),
            _ => {}
        }
        i += 1;
    }
    finish(&mut path, &mut this, out);
}

/// A path from the crate root, if it starts inside the crate.
fn resolve(
    segs: &[String],
    here: &[String],
    file_level: usize,
    children: &[String],
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = segs.first()?;
    let mut base: Vec<String>;
    let mut rest = segs;
    match first.as_str() {
        "crate" => {
            base = Vec::new();
            rest = &segs[1..];
        }
        "self" => {
            base = here.to_vec();
            rest = &segs[1..];
        }
        "super" => {
            base = here.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        // A child declared with `mod x;` is named bare at file level only.
        _ if children.contains(first) && here.len() == file_level => {
            base = here.to_vec();
        }
        _ => {
            let a = aliases.get(first)?;
            base = a.clone();
            rest = &segs[1..];
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str, module: &[&str]) -> Vec<String> {
        let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
        parse(Path::new("x.rs"), &module, text)
            .paths
            .into_iter()
            .map(|(p, _)| p.join("::"))
            .collect()
    }

    #[test]
    fn use_trees_resolve_from_the_crate_root() {
        let text = "use crate::a::{b::{C, d}, self as e};\nuse super::F;\nmod g;\n\
                    pub use g::H;\nfn f() { e::x(); crate::z::y(); }";
        assert_eq!(
            paths(text, &["p", "q"]),
            [
                "a::b::C",
                "a::b::d",
                "a",
                "p::F",
                "p::q::g::H",
                "a::x",
                "z::y"
            ]
        );
    }

    #[test]
    fn test_only_items_comments_and_strings_name_nothing() {
        let text = "#[cfg(test)]\nmod tests { use crate::a::B; }\n#[cfg(test)]\nuse crate::c::D;\n\
                    // crate::e::F\nconst S: &str = \"crate::g::H\"; const R: &str = r#\"crate::i\"#;\n\
                    fn f<'a>(x: &'a str) -> char { 'c' }";
        assert!(paths(text, &["p"]).is_empty());
    }
}
