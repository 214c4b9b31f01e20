//! Just enough of PromQL and of the text exposition format to tell which metrics, labels
//! and label values the kit's expressions ask for and which a node exports.

use std::collections::{BTreeMap, BTreeSet};

/// One label matcher of a selector: `label op "value"`.
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

/// The `engram_*` metric names in `text`, each with the label matchers that follow it
/// (`name{label op "value", ...}`).
pub fn selectors(text: &str) -> Vec<(String, Vec<Matcher>)> {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(found) = text[i..].find("engram_") {
        let start = i + found;
        let mut end = start;
        while end < bytes.len() && ident(bytes[end]) {
            end += 1;
        }
        i = end;
        if start > 0 && ident(bytes[start - 1]) {
            continue;
        }
        let mut matchers = Vec::new();
        if bytes.get(end) == Some(&b'{') {
            let (inner, close) = braced(&text[end + 1..]);
            i = end + 1 + close;
            matchers = split_outside_quotes(inner)
                .into_iter()
                .filter_map(|m| {
                    let name: String = m.trim().chars().take_while(|&c| ident(c as u8)).collect();
                    let rest = m.trim()[name.len()..].trim_start();
                    let op: String = rest.chars().take_while(|c| "=!~".contains(*c)).collect();
                    let value = rest[op.len()..].trim().trim_matches('"').to_owned();
                    (!name.is_empty()).then_some(Matcher {
                        label: name,
                        op,
                        value,
                    })
                })
                .collect();
        }
        out.push((text[start..end].to_owned(), matchers));
    }
    out
}

/// The text up to the `}` that closes a `{` (quotes respected), and the index after it.
fn braced(text: &str) -> (&str, usize) {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => return (&text[..i], i + 1),
            _ => {}
        }
    }
    panic!("unclosed selector in {text:?}")
}

fn split_outside_quotes(text: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

/// The samples of a text exposition: sample name -> label name -> values seen.
pub fn exposition(text: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let (inner, _) = braced(&line[name_end + 1..]);
            for pair in split_outside_quotes(inner) {
                if let Some((label, value)) = pair.split_once('=') {
                    labels
                        .entry(label.trim().to_owned())
                        .or_default()
                        .insert(value.trim().trim_matches('"').to_owned());
                }
            }
        }
    }
    out
}
