//! Personal data in text: detection on write and masking on read.
//!
//! Detected: Chinese resident ID numbers (18 characters, the ISO 7064 MOD 11-2 check
//! character verified; or the first generation's 15 digits, with a province code and a date),
//! mainland mobile numbers (`1[3-9]` and 9 digits, optionally `+86`), e-mail addresses, bank
//! card numbers (13 to 19 digits, Luhn-valid) and passport numbers (Chinese formats: `E`/`G`
//! and 8 digits, or `E`, a letter and 7 digits).
//!
//! Numbers are found as people write them: in groups with one space, `-` or `.` between
//! groups (`138-1234-5678`, `138 1234 5678`, `110105 19491231 002X`, `6222 0202 0011 2233`;
//! see [`numbers`]). Text is first brought to one form: full-width digits, letters and signs
//! (`１３８`, `Ｅ`, `＠`) count as their ASCII forms, non-breaking and ideographic spaces
//! (U+00A0, U+202F, U+3000) as a space, and zero-width characters (U+200B to U+200D, U+2060,
//! U+FEFF) as nothing, so `手机１３８...` or `138\u{200B}1234...` is found like `手机138...`;
//! offsets stay those of the text as given. Numbers with a check (ID numbers: MOD 11-2 and a
//! plausible birth date; card numbers: Luhn) are found inside longer tokens
//! (`ID11010519491231002X`, `card6222...`), where a card must also have a scheme's prefix
//! and length; they never touch another digit (a window of a longer number passes a check by
//! chance too often, so long order numbers stay). Numbers without a check (mobile, passport
//! and first-generation ID numbers) and e-mail addresses must stand alone: no ASCII letter or
//! digit right before or after them (Chinese text around them is fine).
//!
//! Levels: ID, bank card and passport numbers are `high`, and so is a text naming a health
//! condition ([`health`]); mobile numbers `medium`; e-mail addresses `low`. Masks keep at most the last 4 characters, never the leading ones (the
//! region and birth date of an ID number, a card's issuer, a mobile's carrier prefix are what
//! would narrow a guess): `**************251X`, `***************1234`, `*******5678`,
//! `a***@example.com`, `*******78`.
//!
//! Identity anchors: resident ID and passport numbers are also normalised (upper case, the
//! check character `X` included) so that the same identifier always hashes the same
//! ([`anchors_in`], [`anchor_of`]).
//!
//! Pure functions: no I/O, and nothing here logs.

use std::borrow::Cow;
use std::sync::LazyLock;

use engram_storage::types::{AnchorKind, PiiLevel};
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

static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| regex(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"));
static PASSPORT: LazyLock<Regex> = LazyLock::new(|| regex(r"[EeGg][0-9]{8}|[Ee][A-Za-z][0-9]{7}"));

/// `text` with full-width forms (U+FF01 to U+FF5E: digits, letters, `＋`, `－`, `＠`, ...)
/// and the non-breaking and ideographic spaces turned into their ASCII counterparts, one
/// character for one, and zero-width characters left out, with the byte offset in `text` of
/// each character of the result (and of its end).
struct Normalised<'a> {
    text: Cow<'a, str>,
    /// `(offset in the result, offset in the original)` of every character, then of the
    /// end; empty when the text needed no change.
    offsets: Vec<(usize, usize)>,
}

/// The character `c` counts as (`None`: a zero-width character, which counts as nothing).
fn ascii_form(c: char) -> Option<char> {
    match u32::from(c) {
        code @ 0xFF01..=0xFF5E => Some(char::from_u32(code - 0xFF01 + 0x21).unwrap_or(c)),
        0x3000 | 0x00A0 | 0x202F => Some(' '),
        0x200B..=0x200D | 0x2060 | 0xFEFF => None,
        _ => Some(c),
    }
}

impl<'a> Normalised<'a> {
    fn new(text: &'a str) -> Self {
        if !text.chars().any(|c| ascii_form(c) != Some(c)) {
            return Normalised {
                text: Cow::Borrowed(text),
                offsets: Vec::new(),
            };
        }
        let mut out = String::with_capacity(text.len());
        let mut offsets = Vec::with_capacity(text.len() + 1);
        for (at, c) in text.char_indices() {
            if let Some(c) = ascii_form(c) {
                offsets.push((out.len(), at));
                out.push(c);
            }
        }
        offsets.push((out.len(), text.len()));
        Normalised {
            text: Cow::Owned(out),
            offsets,
        }
    }

    /// The offset in the original text of `at`, a character boundary of the result.
    fn original(&self, at: usize) -> usize {
        if self.offsets.is_empty() {
            return at;
        }
        match self.offsets.binary_search_by_key(&at, |(n, _)| *n) {
            Ok(i) => self.offsets[i].1,
            Err(i) => self.offsets.get(i).map_or(usize::MAX, |(_, o)| *o),
        }
    }
}

/// No ASCII letter or digit right before or after `start..end`.
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

/// Whether characters 7 to 14 of a resident ID number are a plausible birth date
/// (`YYYYMMDD`, 1900 to 2099): a second check against numbers that pass MOD 11-2 by chance.
fn birth_date_plausible(id: &str) -> bool {
    let number = |range: std::ops::Range<usize>| id.get(range).and_then(|s| s.parse::<u32>().ok());
    matches!(
        (number(6..10), number(10..12), number(12..14)),
        (Some(1900..=2099), Some(1..=12), Some(1..=31))
    )
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

/// Whether a card number has the prefix and length of a card scheme: UnionPay (`62`, 16 to
/// 19 digits), Visa (`4`, 13, 16 or 19), Mastercard (`51` to `55`, 16), American Express
/// (`34`, `37`, 15), JCB (`35`, 16 to 19).
fn issuer_shaped(digits: &str) -> bool {
    let n = digits.len();
    match digits.get(..2).and_then(|s| s.parse::<u32>().ok()) {
        Some(62 | 35) => (16..=19).contains(&n),
        Some(40..=49) => matches!(n, 13 | 16 | 19),
        Some(51..=55) => n == 16,
        Some(34 | 37) => n == 15,
        Some(_) | None => false,
    }
}

fn digits_of(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// The fewest digits a detected number has: a passport number's 7 (`E`, a letter and 7
/// digits); mobile, card and ID numbers have more.
const MIN_NUMBER_DIGITS: usize = 7;

/// Whether `text` (already normalised) could hold an item at all: an `@` or at least
/// [`MIN_NUMBER_DIGITS`] digits. Most text holds neither, and is spared the patterns (a write
/// classifies its texts on the writer thread).
fn may_hold_items(text: &str) -> bool {
    let mut digits = 0;
    for b in text.bytes() {
        match b {
            b'@' => return true,
            b'0'..=b'9' => {
                digits += 1;
                if digits >= MIN_NUMBER_DIGITS {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Every item of personal data in `text` (already normalised), in order, none overlapping.
fn detect_normalised(text: &str) -> Vec<Finding> {
    if !may_hold_items(text) {
        return Vec::new();
    }
    find_items(text)
}

/// [`detect_normalised`] without the first look for digits and `@`.
fn find_items(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    let add = |kind: PiiKind, start: usize, end: usize, found: &mut Vec<Finding>| {
        if !found.iter().any(|f| start < f.end && f.start < end) {
            found.push(Finding { kind, start, end });
        }
    };
    // Numbers, merged where candidates overlap (see [`numbers`]).
    for c in numbers::merged(&numbers::candidates(text)) {
        add(c.kind, c.start, c.end, &mut found);
    }
    // Passport numbers and e-mail addresses must stand alone.
    for m in PASSPORT.find_iter(text) {
        if stands_alone(text, m.start(), m.end()) {
            add(PiiKind::Passport, m.start(), m.end(), &mut found);
        }
    }
    for m in EMAIL.find_iter(text) {
        if stands_alone(text, m.start(), m.end()) {
            add(PiiKind::Email, m.start(), m.end(), &mut found);
        }
    }
    found.sort_by_key(|f| f.start);
    found
}

/// Every item of personal data in `text`, in order, none overlapping, as byte ranges of
/// `text` (full-width forms are found like their ASCII counterparts).
pub fn detect(text: &str) -> Vec<Finding> {
    let norm = Normalised::new(text);
    let mut found = detect_normalised(&norm.text);
    for f in &mut found {
        f.start = norm.original(f.start);
        f.end = norm.original(f.end);
    }
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

/// An identifier as it is anchored: its letters and digits alone, upper case; a
/// first-generation ID number in its 18-character form. `None` if an ID number's finding
/// holds more than one (overlapping candidates merged).
fn anchor_value(kind: AnchorKind, item: &str) -> Option<String> {
    let compact: String = item
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    match (kind, compact.len()) {
        (AnchorKind::ResidentId, 15) => Some(numbers::second_generation(&compact)),
        (AnchorKind::ResidentId, 18) | (AnchorKind::Passport, _) => Some(compact),
        (AnchorKind::ResidentId, _) => None,
    }
}

/// The resident ID and passport numbers in `text`, normalised, each once, in order.
pub fn anchors_in(text: &str) -> Vec<(AnchorKind, String)> {
    let norm = Normalised::new(text);
    let findings = detect_normalised(&norm.text);
    let ids: Vec<numbers::Candidate> = if findings.iter().any(|f| f.kind == PiiKind::ResidentId) {
        numbers::candidates(&norm.text)
            .into_iter()
            .filter(|c| c.kind == PiiKind::ResidentId)
            .collect()
    } else {
        Vec::new()
    };
    let mut found: Vec<(AnchorKind, String)> = Vec::new();
    for f in findings {
        let Some(kind) = anchor_kind(f.kind) else {
            continue;
        };
        // An ID number's finding may be merged with overlapping numbers: its own candidates.
        let items: Vec<&str> = if kind == AnchorKind::ResidentId {
            ids.iter()
                .filter(|c| f.start <= c.start && c.end <= f.end)
                .map(|c| &norm.text[c.start..c.end])
                .collect()
        } else {
            vec![&norm.text[f.start..f.end]]
        };
        for item in items {
            if let Some(value) = anchor_value(kind, item) {
                let anchor = (kind, value);
                if !found.contains(&anchor) {
                    found.push(anchor);
                }
            }
        }
    }
    found
}

/// `value` as one resident ID or passport number (surrounding white space ignored),
/// normalised; `None` if it is anything else.
pub fn anchor_of(value: &str) -> Option<(AnchorKind, String)> {
    let norm = Normalised::new(value);
    let value = norm.text.trim();
    match detect_normalised(value).as_slice() {
        [f] if f.start == 0 && f.end == value.len() => {
            let kind = anchor_kind(f.kind)?;
            Some((kind, anchor_value(kind, value)?))
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

/// The highest level of the items in `texts`; a text naming a health condition
/// ([`health`]) is `high`.
pub fn level_of<'a>(texts: impl IntoIterator<Item = &'a str>) -> PiiLevel {
    let mut level = PiiLevel::None;
    for text in texts {
        if health::names_condition(text) {
            return PiiLevel::High;
        }
        if let Some(found) = detect(text)
            .into_iter()
            .map(|f| f.kind.level())
            .max_by_key(|l| rank(*l))
            && rank(found) > rank(level)
        {
            level = found;
        }
    }
    level
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
        PiiKind::ResidentId => keep(
            &item
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>(),
            0,
            4,
        ),
        PiiKind::BankCard => keep(&digits_of(item), 0, 4),
        PiiKind::Passport => keep(item, 0, 2),
        PiiKind::Mobile => {
            let digits = digits_of(item);
            keep(&digits[digits.len().saturating_sub(11)..], 0, 4)
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
    let norm = Normalised::new(text);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in detect_normalised(&norm.text) {
        if rank(f.kind.level()) < rank(from) {
            continue;
        }
        let (start, end) = (norm.original(f.start), norm.original(f.end));
        out.push_str(&text[at..start]);
        out.push_str(&mask_item(f.kind, &norm.text[f.start..f.end]));
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// `text` as a gateway may see it: ID, bank card, passport and mobile numbers masked, and
/// what is left of a number that a cut went through ([`mask_cut_digits`]).
pub fn for_gateway(text: &str) -> String {
    // What a cut left first: a number's head ending in an item (`110105-19400101003…` holds
    // a mobile-shaped `19400101003`) is masked whole, not around the item.
    mask(&mask_cut_digits(text), PiiLevel::Medium)
}

/// Whether `text` holds an identifier a gateway sees masked (an ID, card, passport or mobile
/// number): how many, each once.
pub fn identifiers_in(text: &str) -> usize {
    let norm = Normalised::new(text);
    let mut seen: Vec<String> = Vec::new();
    for f in detect_normalised(&norm.text) {
        if rank(f.kind.level()) >= rank(PiiLevel::Medium) {
            let item: String = norm.text[f.start..f.end]
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .map(|c| c.to_ascii_uppercase())
                .collect();
            if !seen.contains(&item) {
                seen.push(item);
            }
        }
    }
    seen.len()
}

/// The mask of a number standing alone (a JSON number), if it is an identifier a gateway
/// sees masked: an ID or mobile number, or a card number with a scheme's prefix and length
/// (a 13-digit timestamp in milliseconds passes Luhn one time in ten, never a scheme).
pub fn mask_number(number: &str) -> Option<String> {
    let found = detect(number);
    let identifier = found.iter().any(|f| match f.kind {
        PiiKind::BankCard => issuer_shaped(&digits_of(&number[f.start..f.end])),
        PiiKind::ResidentId | PiiKind::Passport | PiiKind::Mobile => true,
        PiiKind::Email => false,
    });
    identifier.then(|| mask(number, PiiLevel::Medium))
}

/// The cut mark of a cut text.
pub const CUT: char = '…';

/// Digits right before a cut mark: the head of a number a cut went through.
static HEAD_CUT: LazyLock<Regex> = LazyLock::new(|| regex(r"[0-9](?:[ .\-]?[0-9])*[Xx]?[ .\-]?…"));
/// More than 4 digits right after a cut mark: the tail of a number a cut went through, longer
/// than the last four characters a mask keeps.
static TAIL_CUT: LazyLock<Regex> = LazyLock::new(|| regex(r"…[0-9](?:[ .\-]?[0-9Xx]){4,}"));

/// `text` with what is left of numbers that a cut went through (digits right before `…`,
/// more than 4 right after it) replaced by `*`: a cut made before masking leaves a number's head (an ID number's
/// region and birth date, a card's issuer) that no longer reads as a number to mask. Texts
/// cut now are masked first or cut at an item's edge; this covers texts stored cut before.
pub fn mask_cut_digits(text: &str) -> String {
    let norm = Normalised::new(text);
    if !norm.text.contains(CUT) {
        return text.to_owned();
    }
    let mut spans: Vec<(usize, usize)> = HEAD_CUT
        .find_iter(&norm.text)
        .chain(TAIL_CUT.find_iter(&norm.text))
        .map(|m| (norm.original(m.start()), norm.original(m.end())))
        .collect();
    spans.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in spans {
        let start = start.max(at);
        if start >= end {
            continue;
        }
        out.push_str(&text[at..start]);
        for c in text[start..end].chars() {
            match ascii_form(c) {
                Some('0'..='9' | 'X' | 'x') => out.push('*'),
                Some(_) => out.push(c),
                None => {}
            }
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

pub mod health;
mod numbers;

/// Text as a gateway may see it: ID, bank card, passport and mobile numbers masked, and what
/// is left of a number that a cut went through ([`mask_cut_digits`]).
pub fn gateway_text(text: &str) -> String {
    for_gateway(text)
}

#[cfg(test)]
mod leaks;
#[cfg(test)]
mod tests;
