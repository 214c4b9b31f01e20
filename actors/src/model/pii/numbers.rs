//! Numbers as people write them: digits in groups, a single space, `-` or `.` between groups
//! (`138-1234-5678`, `138 1234 5678`, `110105 19491231 002X`, `6222 0202 0011 2233 446`).
//! Every run of whole groups is a candidate: an ID number (18 characters, MOD 11-2 and a
//! birth date; or 15 digits, a province code and a date, standing alone), a card number
//! (13 to 19 digits, Luhn; glued to letters also a scheme's prefix and length) or a mobile
//! number (11 digits, `1[3-9]`, standing alone; `+86` before it belongs to it).
//!
//! A candidate is made of whole groups, so it never touches another digit, and every start
//! is tried (a number before an ID number does not hide it). Overlapping candidates are
//! merged into one finding, of the highest level among them: masking more than one item
//! holds is safe, leaving the part of a number that another candidate claimed is not.

use std::sync::LazyLock;

use super::{PiiKind, birth_date_plausible, issuer_shaped, luhn_valid, regex, resident_id_valid};

/// Groups of digits with one separator between groups.
static CHAIN: LazyLock<regex::Regex> = LazyLock::new(|| regex(r"[0-9]+(?:[ .\-][0-9]+)*"));

/// The most digits a candidate has (a 19-digit card).
const MAX_DIGITS: usize = 19;

/// One candidate: what it is, as a byte range of the (normalised) text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Candidate {
    pub kind: PiiKind,
    pub start: usize,
    pub end: usize,
}

/// Province codes, the first two digits of a resident ID number.
const PROVINCES: [u32; 34] = [
    11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52,
    53, 54, 61, 62, 63, 64, 65, 71, 81, 82,
];

/// Whether 15 digits are a first-generation resident ID number: a province code, then a
/// date (`YYMMDD`) after the 6-digit region.
fn first_generation_plausible(digits: &str) -> bool {
    let number = |range: std::ops::Range<usize>| digits.get(range)?.parse::<u32>().ok();
    digits.len() == 15
        && number(0..2).is_some_and(|p| PROVINCES.contains(&p))
        && matches!(
            (number(8..10), number(10..12)),
            (Some(1..=12), Some(1..=31))
        )
}

/// The 18-character form of a first-generation ID number (`19` before its year, and the
/// check character).
pub(super) fn second_generation(digits: &str) -> String {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let mut id = format!("{}19{}", &digits[..6], &digits[6..]);
    let sum: u32 = id
        .bytes()
        .zip(WEIGHTS)
        .map(|(b, w)| u32::from(b.wrapping_sub(b'0')) * w)
        .sum();
    id.push(char::from(CHECK[(sum % 11) as usize]));
    id
}

fn is_alnum(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_ascii_alphanumeric())
}

/// What the digits of groups `start..end` of `text` are, if anything: the kind and the end
/// of the item (an ID number's check character `X` follows its 17 digits).
fn classify(text: &str, digits: &str, start: usize, end: usize) -> Option<(PiiKind, usize)> {
    let before = text[..start].chars().next_back();
    let mut after = text[end..].chars();
    let next = after.next();
    let alone = !is_alnum(before) && !is_alnum(next);
    let n = digits.len();
    if n == 17
        && matches!(next, Some('X' | 'x'))
        && !after.next().is_some_and(|c| c.is_ascii_digit())
    {
        let id = format!("{digits}X");
        if resident_id_valid(&id) && birth_date_plausible(&id) {
            return Some((PiiKind::ResidentId, end + 1));
        }
    }
    if n == 18 && resident_id_valid(digits) && birth_date_plausible(digits) {
        return Some((PiiKind::ResidentId, end));
    }
    if n == 15 && alone && first_generation_plausible(digits) {
        return Some((PiiKind::ResidentId, end));
    }
    let mobile =
        |d: &str| d.len() == 11 && d.starts_with('1') && matches!(d.as_bytes()[1], b'3'..=b'9');
    if n == 13
        && before == Some('+')
        && digits.starts_with("86")
        && mobile(&digits[2..])
        && !is_alnum(next)
    {
        return Some((PiiKind::Mobile, end));
    }
    if (13..=MAX_DIGITS).contains(&n) && luhn_valid(digits) && (alone || issuer_shaped(digits)) {
        return Some((PiiKind::BankCard, end));
    }
    if mobile(digits) && alone {
        return Some((PiiKind::Mobile, end));
    }
    None
}

/// The order of kinds when candidates merge: the highest level first.
fn priority(kind: PiiKind) -> u8 {
    match kind {
        PiiKind::ResidentId => 0,
        PiiKind::BankCard => 1,
        PiiKind::Passport => 2,
        PiiKind::Mobile => 3,
        PiiKind::Email => 4,
    }
}

/// Every candidate number in `text` (normalised), in order of start.
pub(super) fn candidates(text: &str) -> Vec<Candidate> {
    let mut found = Vec::new();
    for chain in CHAIN.find_iter(text) {
        let base = chain.start();
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut at = None;
        for (i, b) in chain.as_str().bytes().enumerate() {
            match (b.is_ascii_digit(), at) {
                (true, None) => at = Some(i),
                (false, Some(s)) => {
                    groups.push((base + s, base + i));
                    at = None;
                }
                _ => {}
            }
        }
        if let Some(s) = at {
            groups.push((base + s, chain.end()));
        }
        for i in 0..groups.len() {
            let mut digits = String::new();
            for &(s, e) in &groups[i..] {
                digits.push_str(&text[s..e]);
                if digits.len() > MAX_DIGITS {
                    break;
                }
                if let Some((kind, end)) = classify(text, &digits, groups[i].0, e) {
                    // `+86` belongs to the mobile number after it.
                    let start = if kind == PiiKind::Mobile && digits.len() == 13 {
                        groups[i].0 - 1
                    } else {
                        groups[i].0
                    };
                    found.push(Candidate { kind, start, end });
                }
            }
        }
    }
    found.sort_by_key(|c| (c.start, c.end));
    found
}

/// `candidates` merged where they overlap, each of the highest-level kind among its parts.
pub(super) fn merged(candidates: &[Candidate]) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for c in candidates {
        match out.last_mut() {
            Some(last) if c.start < last.end => {
                last.end = last.end.max(c.end);
                if priority(c.kind) < priority(last.kind) {
                    last.kind = c.kind;
                }
            }
            _ => out.push(*c),
        }
    }
    out
}
