//! Personal data in text: detection on write and masking on read.
//!
//! Detected: Chinese resident ID numbers (18 characters, the ISO 7064 MOD 11-2 check
//! character verified), mainland mobile numbers (`1[3-9]` and 9 digits, optionally `+86`),
//! e-mail addresses, bank card numbers (13 to 19 digits, spaces or dashes allowed between
//! them, Luhn-valid) and passport numbers (Chinese formats: `E`/`G` and 8 digits, or `E`, a
//! letter and 7 digits). A match must stand alone: no ASCII letter or digit right before or
//! after it (Chinese text around it is fine).
//!
//! Levels: ID, bank card and passport numbers are `high`; mobile numbers `medium`; e-mail
//! addresses `low`. Masks keep enough to recognise the item and nothing to use it:
//! `110101********251X`, `6222********1234`, `138****5678`, `a***@example.com`, `E1*****78`.
//!
//! Identity anchors: resident ID and passport numbers are also normalised (upper case, the
//! check character `X` included) so that the same identifier always hashes the same
//! ([`anchors_in`], [`anchor_of`]).
//!
//! Pure functions: no I/O, and nothing here logs.

use std::sync::LazyLock;

use engram_storage::model::{AnchorKind, PiiLevel};
use regex::Regex;

/// What a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PiiKind {
    /// A Chinese resident ID number.
    ResidentId,
    /// A bank card number.
    BankCard,
    /// A passport number.
    Passport,
    /// A mainland mobile number.
    Mobile,
    /// An e-mail address.
    Email,
}

impl PiiKind {
    /// The level a text containing this reaches.
    pub fn level(self) -> PiiLevel {
        match self {
            PiiKind::ResidentId | PiiKind::BankCard | PiiKind::Passport => PiiLevel::High,
            PiiKind::Mobile => PiiLevel::Medium,
            PiiKind::Email => PiiLevel::Low,
        }
    }
}

/// One detected item, as a byte range of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    /// What it is.
    pub kind: PiiKind,
    /// Start (bytes).
    pub start: usize,
    /// End (bytes, exclusive).
    pub end: usize,
}

fn regex(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("pattern {pattern}: {e}"))
}

static RESIDENT_ID: LazyLock<Regex> = LazyLock::new(|| regex(r"[0-9]{17}[0-9Xx]"));
static BANK_CARD: LazyLock<Regex> = LazyLock::new(|| regex(r"[0-9](?:[ -]?[0-9]){12,18}"));
static MOBILE: LazyLock<Regex> = LazyLock::new(|| regex(r"(?:\+86[ -]?)?1[3-9][0-9]{9}"));
static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| regex(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"));
static PASSPORT: LazyLock<Regex> = LazyLock::new(|| regex(r"[EeGg][0-9]{8}|[Ee][A-Za-z][0-9]{7}"));

fn stands_alone(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(|c| c.is_ascii_alphanumeric())
        && !after.is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Whether an 18-character resident ID number has the right check character.
pub fn resident_id_valid(id: &str) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let bytes = id.as_bytes();
    if bytes.len() != 18 || !bytes[..17].iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = bytes[..17]
        .iter()
        .zip(WEIGHTS)
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    CHECK[(sum % 11) as usize] == bytes[17].to_ascii_uppercase()
}

/// Whether a digit string passes the Luhn check.
pub fn luhn_valid(digits: &str) -> bool {
    let mut sum = 0;
    for (i, c) in digits.chars().rev().enumerate() {
        let Some(d) = c.to_digit(10) else {
            return false;
        };
        sum += if i % 2 == 1 {
            let doubled = d * 2;
            if doubled > 9 { doubled - 9 } else { doubled }
        } else {
            d
        };
    }
    !digits.is_empty() && sum % 10 == 0
}

fn digits_of(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// Every item of personal data in `text`, in order, none overlapping.
pub fn detect(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    let add = |kind: PiiKind, start: usize, end: usize, found: &mut Vec<Finding>| {
        if stands_alone(text, start, end) && !found.iter().any(|f| start < f.end && f.start < end) {
            found.push(Finding { kind, start, end });
        }
    };
    for m in RESIDENT_ID.find_iter(text) {
        if resident_id_valid(m.as_str()) {
            add(PiiKind::ResidentId, m.start(), m.end(), &mut found);
        }
    }
    for m in BANK_CARD.find_iter(text) {
        let digits = digits_of(m.as_str());
        if (13..=19).contains(&digits.len()) && luhn_valid(&digits) {
            add(PiiKind::BankCard, m.start(), m.end(), &mut found);
        }
    }
    for m in PASSPORT.find_iter(text) {
        add(PiiKind::Passport, m.start(), m.end(), &mut found);
    }
    for m in MOBILE.find_iter(text) {
        add(PiiKind::Mobile, m.start(), m.end(), &mut found);
    }
    for m in EMAIL.find_iter(text) {
        add(PiiKind::Email, m.start(), m.end(), &mut found);
    }
    found.sort_by_key(|f| f.start);
    found
}

/// The identity-anchor kind of a finding, if it anchors one.
fn anchor_kind(kind: PiiKind) -> Option<AnchorKind> {
    match kind {
        PiiKind::ResidentId => Some(AnchorKind::ResidentId),
        PiiKind::Passport => Some(AnchorKind::Passport),
        PiiKind::BankCard | PiiKind::Mobile | PiiKind::Email => None,
    }
}

/// The resident ID and passport numbers in `text`, normalised, each once, in order.
pub fn anchors_in(text: &str) -> Vec<(AnchorKind, String)> {
    let mut found: Vec<(AnchorKind, String)> = Vec::new();
    for f in detect(text) {
        if let Some(kind) = anchor_kind(f.kind) {
            let anchor = (kind, text[f.start..f.end].to_ascii_uppercase());
            if !found.contains(&anchor) {
                found.push(anchor);
            }
        }
    }
    found
}

/// `value` as one resident ID or passport number (surrounding white space ignored),
/// normalised; `None` if it is anything else.
pub fn anchor_of(value: &str) -> Option<(AnchorKind, String)> {
    let value = value.trim();
    match detect(value).as_slice() {
        [f] if f.start == 0 && f.end == value.len() => {
            anchor_kind(f.kind).map(|kind| (kind, value.to_ascii_uppercase()))
        }
        _ => None,
    }
}

/// The order of levels.
fn rank(level: PiiLevel) -> u8 {
    match level {
        PiiLevel::None => 0,
        PiiLevel::Low => 1,
        PiiLevel::Medium => 2,
        PiiLevel::High => 3,
    }
}

/// The highest level of the items in `texts`.
pub fn level_of<'a>(texts: impl IntoIterator<Item = &'a str>) -> PiiLevel {
    texts
        .into_iter()
        .flat_map(detect)
        .map(|f| f.kind.level())
        .max_by_key(|l| rank(*l))
        .unwrap_or(PiiLevel::None)
}

/// The mask of one item.
fn mask_item(kind: PiiKind, item: &str) -> String {
    let keep = |s: &str, head: usize, tail: usize| -> String {
        let chars: Vec<char> = s.chars().collect();
        if chars.len() <= head + tail {
            return "*".repeat(chars.len());
        }
        let mut out: String = chars[..head].iter().collect();
        out.push_str(&"*".repeat(chars.len() - head - tail));
        out.extend(&chars[chars.len() - tail..]);
        out
    };
    match kind {
        PiiKind::ResidentId => keep(item, 6, 4),
        PiiKind::BankCard => keep(&digits_of(item), 4, 4),
        PiiKind::Passport => keep(item, 2, 2),
        PiiKind::Mobile => {
            let digits = digits_of(item);
            keep(&digits[digits.len().saturating_sub(11)..], 3, 4)
        }
        PiiKind::Email => match item.split_once('@') {
            Some((local, domain)) => {
                let first: String = local.chars().take(1).collect();
                format!("{first}***@{domain}")
            }
            None => "***".to_owned(),
        },
    }
}

/// `text` with every item whose level is at least `from` masked.
pub fn mask(text: &str, from: PiiLevel) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in detect(text) {
        if rank(f.kind.level()) < rank(from) {
            continue;
        }
        out.push_str(&text[at..f.start]);
        out.push_str(&mask_item(f.kind, &text[f.start..f.end]));
        at = f.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests;
