//! Reading one source file: a small lexer (identifiers, `::`, punctuation; comments,
//! strings, characters and lifetimes dropped) and the paths the file names, resolved from the
//! crate root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::File;

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
pub(super) fn parse(path: &Path, module: &[String], text: &str) -> File {
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
