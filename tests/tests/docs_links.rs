//! Every relative link in README.md and docs/*.md resolves: the file it names exists, and the
//! heading its `#anchor` names exists in that file (anchors as GitHub makes them: lower
//! case, punctuation dropped, spaces as hyphens, a repeated heading numbered). Links to web
//! addresses are not followed; text inside code fences is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The repository root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents checked: README.md and every markdown file in docs/.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| PathBuf::from("docs").join(p.file_name().unwrap()))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The lines of `text` outside code fences.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..].replace('`', ""));
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a document's markdown links, `[text](target)`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalised(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            Component::Normal(_) | Component::RootDir | Component::Prefix(_) => out.push(part),
        }
    }
    out
}

#[test]
fn every_relative_link_in_readme_and_docs_names_an_existing_file_and_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                normalised(&doc.parent().unwrap().join(file))
            };
            let full = root().join(&path);
            if !full.exists() {
                broken.push(format!(
                    "{}: {target} (no file {})",
                    doc.display(),
                    path.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor
                && path.extension().is_some_and(|x| x == "md")
                && !anchors(&std::fs::read_to_string(&full).unwrap()).contains(anchor)
            {
                broken.push(format!(
                    "{}: {target} (no heading #{anchor} in {})",
                    doc.display(),
                    path.display()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} relative links found: the parser is off"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    let doc = "# Engram\n## The memory model\n### Against the reference C engine\n\
               ## Inference off the write path (first lever)\n## Retrieval (evidence recall@k)\n\
               ## Notes\n## Notes\n```\n# not a heading\n```\n";
    let found = anchors(doc);
    for anchor in [
        "engram",
        "the-memory-model",
        "against-the-reference-c-engine",
        "inference-off-the-write-path-first-lever",
        "retrieval-evidence-recallk",
        "notes",
        "notes-1",
    ] {
        assert!(found.contains(anchor), "{anchor} not in {found:?}");
    }
    assert!(
        !found.contains("not-a-heading"),
        "a fenced line is no heading"
    );
    assert_eq!(
        links("see [a](docs/a.md#x) and [b](#y), `code`\n```\n[c](z.md)\n```"),
        ["docs/a.md#x", "#y"]
    );
}
