//! Property tests of what a gateway reads: for any identifier (ID number of either
//! generation, card, mobile or passport number), written with any of the separators people
//! use (`-`, space, `.`, non-breaking spaces, zero-width characters), at any position of a
//! text, through any way a text reaches a gateway (masked whole, cut then masked, masked then
//! cut, summarised, intent fields), no answer holds more than the identifier's last four
//! characters, and a query holding it counts as a guess.

use proptest::prelude::*;
use serde_json::Value;

use super::gateway_text;
use crate::model::intent::masked_fields;
use crate::model::text::{extractive_summary, truncate_chars};

/// What an identifier is.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Id18,
    Id15,
    Card,
    Mobile,
    Passport,
}

const KINDS: [Kind; 5] = [
    Kind::Id18,
    Kind::Id15,
    Kind::Card,
    Kind::Mobile,
    Kind::Passport,
];

/// Separators between an identifier's groups.
const SEPARATORS: [&str; 7] = ["", "-", " ", ".", "\u{A0}", "\u{202F}", "\u{3000}"];

/// Characters that may be slipped between any two characters of an identifier.
const ZERO_WIDTH: [char; 5] = ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}'];

fn check_character(first17: &str) -> char {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    let sum: u32 = first17
        .bytes()
        .zip(WEIGHTS)
        .map(|(b, w)| u32::from(b - b'0') * w)
        .sum();
    char::from(b"10X98765432"[(sum % 11) as usize])
}

fn luhn_digit(body: &str) -> char {
    (0..10u8)
        .map(|d| char::from(b'0' + d))
        .find(|d| super::luhn_valid(&format!("{body}{d}")))
        .unwrap_or('0')
}

/// An identifier of `kind` made from `seed` digits: its characters and its groups' sizes.
fn identifier(kind: Kind, seed: &[u8]) -> (String, Vec<usize>) {
    let d = |i: usize| char::from(b'0' + seed[i % seed.len()] % 10);
    let digits = |from: usize, n: usize| (from..from + n).map(d).collect::<String>();
    let date = |year: String| {
        let month = 1 + seed[3] % 12;
        let day = 1 + seed[4] % 28;
        format!("{year}{month:02}{day:02}")
    };
    match kind {
        Kind::Id18 => {
            let year = 1940 + u32::from(seed[2]) * 7 % 80;
            let body = format!(
                "11{}{}{}",
                digits(5, 4),
                date(year.to_string()),
                digits(9, 3)
            );
            let check = check_character(&body);
            (format!("{body}{check}"), vec![6, 8, 4])
        }
        Kind::Id15 => {
            let year = 40 + u32::from(seed[2]) * 7 % 60;
            (
                format!(
                    "32{}{}{}",
                    digits(5, 4),
                    date(year.to_string()),
                    digits(9, 3)
                ),
                vec![6, 6, 3],
            )
        }
        Kind::Card => {
            let len = 16 + usize::from(seed[0] % 4);
            let body = format!("62{}", digits(1, len - 3));
            let check = luhn_digit(&body);
            let card = format!("{body}{check}");
            let mut groups = vec![4; len / 4];
            if len % 4 > 0 {
                groups.push(len % 4);
            }
            (card, groups)
        }
        Kind::Mobile => (
            format!("1{}{}", 3 + seed[0] % 7, digits(1, 9)),
            vec![3, 4, 4],
        ),
        Kind::Passport => (format!("E{}", digits(1, 8)), vec![9]),
    }
}

/// `value` written in `groups` with `separator` between them, and a zero-width character
/// after each character `slips` marks.
fn written(value: &str, groups: &[usize], separator: &str, slips: &[u8]) -> String {
    let mut out = String::new();
    let mut at = 0;
    for (g, size) in groups.iter().enumerate() {
        if g > 0 {
            out.push_str(separator);
        }
        for c in value[at..at + size].chars() {
            out.push(c);
            let slip = slips[(at + g) % slips.len()];
            if slip < 5 {
                out.push(ZERO_WIDTH[usize::from(slip)]);
            }
            at += 1;
        }
    }
    out
}

/// The digits and `X`s of `text`: what a reader could learn of an identifier from it.
fn revealed(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_digit() || *c == 'X')
        .collect()
}

/// A cut made the way texts were cut before masking: the first `max` characters, `…`.
fn naive_cut(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.chars().count() < text.chars().count() {
        out.push('…');
    }
    out
}

/// Every way the text reaches a gateway, by number.
const WAYS: usize = 10;

fn as_read(way: usize, text: &str, max: usize, value: &str) -> String {
    let fields = |value: Value| masked_fields(&value.to_string());
    match way {
        // A turn, a record, a session listing.
        0 => gateway_text(text),
        // Cut where it was stored (the assistant text's cap, a memory's summary), then read.
        1 => gateway_text(&truncate_chars(text, max)),
        // Masked, then cut to fit a context.
        2 => truncate_chars(&gateway_text(text), max),
        // An episodic memory's summary formed on write (the text as the question, then as
        // the answer), read.
        3 => gateway_text(&extractive_summary(text, "好的", &[])),
        4 => gateway_text(&extractive_summary("查询", text, &[])),
        // A turn summarised in a context.
        5 => gateway_text(&extractive_summary("查询", &gateway_text(text), &[])),
        // A text stored cut before texts were masked first or cut at item edges.
        6 => gateway_text(&naive_cut(text, max)),
        // Intent fields: the text as a string at depth, and as an object key.
        7 => fields(serde_json::json!({ "f": { "g": [text] } })),
        8 => {
            let mut key = serde_json::Map::new();
            key.insert(text.to_owned(), Value::Bool(true));
            fields(serde_json::json!({ "f": [Value::Object(key)] }))
        }
        // Intent fields: the identifier as a JSON number, when it is one.
        _ => match value.parse::<u64>() {
            Ok(n) => fields(serde_json::json!({ "deep": [{ "phone": n }] })),
            Err(_) => fields(serde_json::json!({ "v": value })),
        },
    }
}

fn surrounding() -> impl Strategy<Value = String> {
    "[\\u4e00-\\u4e40a-z ，。：]{0,40}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// No answer holds more of an identifier than its last four characters, whatever its
    /// spelling, its position and the way the text reaches a gateway.
    #[test]
    fn no_answer_holds_more_than_the_last_four_characters(
        kind in prop::sample::select(KINDS.to_vec()),
        seed in prop::collection::vec(0u8..10, 20),
        separator in prop::sample::select(SEPARATORS.to_vec()),
        slips in prop::collection::vec(0u8..40, 1..8),
        before in surrounding(),
        after in surrounding(),
        max in 1usize..80,
        way in 0usize..WAYS,
    ) {
        let (value, groups) = identifier(kind, &seed);
        let written = written(&value, &groups, separator, &slips);
        let text = format!("{before}号{written}。{after}");
        let read = as_read(way, &text, max, &value);
        let shown = revealed(&read);
        let last_four = &value[value.len() - 4..];
        prop_assert!(
            last_four.contains(&shown),
            "way {} of {:?} shows {:?} of {:?}: {:?}", way, text, shown, value, read
        );
        if way >= 7 {
            prop_assert!(serde_json::from_str::<Value>(&read).is_ok(), "{}", read);
        }
    }

    /// A query holding an identifier, however written, is a guess the breaker counts.
    #[test]
    fn a_query_holding_an_identifier_counts_as_a_guess(
        kind in prop::sample::select(KINDS.to_vec()),
        seed in prop::collection::vec(0u8..10, 20),
        separator in prop::sample::select(SEPARATORS.to_vec()),
        slips in prop::collection::vec(0u8..40, 1..8),
        before in surrounding(),
        after in surrounding(),
    ) {
        let (value, groups) = identifier(kind, &seed);
        let query = format!("{before} {} {after}", written(&value, &groups, separator, &slips));
        prop_assert_eq!(super::identifiers_in(&query), 1, "{:?}", query);
        let mut counts = crate::breaker::Counts::default();
        let policy = crate::breaker::Policy { threshold: 5, match_threshold: 1, window_ms: 1_000 };
        let now = engram_storage::types::Timestamp(1);
        let guess = crate::breaker::Counter::Match;
        let n = u32::try_from(super::identifiers_in(&query)).unwrap_or(u32::MAX);
        prop_assert_eq!(counts.count_many("gw", guess, policy, now, n), crate::breaker::Verdict::Allowed);
        prop_assert_eq!(
            counts.count_many("gw", guess, policy, now, n),
            crate::breaker::Verdict::Refused { reads: 1 }
        );
    }
}
