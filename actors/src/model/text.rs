//! Text measures of the memory model: the token estimate that budgets contexts (a CJK
//! character counts one token, other text four characters a token) and the extractive
//! summary of a turn (20-60 characters keeping table names, metric names and the result).

use std::sync::LazyLock;

use regex::Regex;

use super::pii;

/// Whether `c` is a CJK character for token counting: ideographs, kana, hangul, and CJK or
/// full-width punctuation.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F | 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x3134F)
}

/// The token estimate of `text`: one per CJK character plus one per four other characters
/// (rounded up).
pub fn count_tokens(text: &str) -> usize {
    let (cjk, other) = text.chars().fold((0usize, 0usize), |(cjk, other), c| {
        if is_cjk(c) {
            (cjk + 1, other)
        } else {
            (cjk, other + 1)
        }
    });
    cjk + other.div_ceil(4)
}

/// `text` cut to at most `max` characters, with "…" marking a cut. A cut never goes through
/// an item of personal data ([`pii::detect`]): one it would cut is left out whole, so no
/// number's head (an ID number's region and birth date, a card's issuer) is left that no
/// longer reads as a number to mask.
pub fn truncate_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let end = byte_at(text, max.saturating_sub(1));
    let end = safe_end(&pii::detect(text), end);
    let mut out = text[..end].to_owned();
    out.push(pii::CUT);
    out
}

/// The byte offset of character `n` of `text` (its length past the end).
fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(at, _)| at)
}

/// `end`, or the start of the item of `found` it falls inside.
fn safe_end(found: &[pii::Finding], end: usize) -> usize {
    found
        .iter()
        .find(|f| f.start < end && end < f.end)
        .map_or(end, |f| f.start)
}

/// `start`, or the end of the item of `found` it falls inside.
fn safe_start(found: &[pii::Finding], start: usize) -> usize {
    found
        .iter()
        .find(|f| f.start < start && start < f.end)
        .map_or(start, |f| f.end)
}

/// Longest summary of one turn, in characters.
pub const SUMMARY_MAX_CHARS: usize = 60;
/// Shortest summary of one turn when the turn itself is long enough.
pub const SUMMARY_MIN_CHARS: usize = 20;

static CLAUSE_END: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[。！？；\n]|[.!?;](?:\s|$)").unwrap());

/// Sentences of `text`; a period inside `dw.orders` or `1.5` does not end one.
fn clauses(text: &str) -> impl Iterator<Item = &str> {
    CLAUSE_END
        .split(text)
        .map(str::trim)
        .filter(|c| !c.is_empty())
}

/// At most `max` characters of `clause` around its first digit, "…" marking cuts (never
/// through an item of personal data: see [`truncate_chars`]).
fn around_number(clause: &str, max: usize) -> String {
    let chars: Vec<char> = clause.chars().collect();
    if chars.len() <= max || max < 3 {
        return truncate_chars(clause, max);
    }
    let digit = chars.iter().position(char::is_ascii_digit).unwrap_or(0);
    let inner = max - 2;
    let start = digit.saturating_sub(inner / 3).min(chars.len() - inner);
    let found = pii::detect(clause);
    let from = safe_start(&found, byte_at(clause, start));
    let to = safe_end(&found, byte_at(clause, start + inner)).max(from);
    let mut out = String::new();
    if from > 0 {
        out.push(pii::CUT);
    }
    out.push_str(&clause[from..to]);
    if to < clause.len() {
        out.push(pii::CUT);
    }
    out
}

/// An extractive summary of a turn for older working memory: the user's first clause, the
/// assistant's key result (its first clause with a number, else its first clause) and the
/// entities, in at most 60 characters. Entities are kept first when space runs out, then the
/// result, then the question.
pub fn extractive_summary(user_text: &str, assistant_text: &str, entities: &[String]) -> String {
    let question = clauses(user_text).next().unwrap_or("");
    let result = clauses(assistant_text)
        .find(|c| c.chars().any(|ch| ch.is_ascii_digit()))
        .or_else(|| clauses(assistant_text).next())
        .unwrap_or("");
    let missing: Vec<&str> = entities
        .iter()
        .map(String::as_str)
        .filter(|e| !question.contains(e) && !result.contains(e))
        .collect();
    let tags = if missing.is_empty() {
        String::new()
    } else {
        format!(" [{}]", missing.join(","))
    };
    let tags = truncate_chars(&tags, SUMMARY_MAX_CHARS / 2);
    let room = SUMMARY_MAX_CHARS - tags.chars().count();
    let arrow = if result.is_empty() { "" } else { " → " };
    let avail = room.saturating_sub(arrow.chars().count());
    // The result keeps what the question does not need, the question at least 15 characters.
    let result = around_number(
        result,
        avail.saturating_sub(question.chars().count().min(15)),
    );
    let question = truncate_chars(question, avail.saturating_sub(result.chars().count()));
    let summary = format!("{question}{arrow}{result}{tags}");
    debug_assert!(summary.chars().count() <= SUMMARY_MAX_CHARS);
    summary
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cjk_counts_one_token_a_character_and_other_text_four_characters() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("abcd"), 1);
        assert_eq!(count_tokens("abcde"), 2);
        assert_eq!(count_tokens("华东销售额"), 5);
        assert_eq!(count_tokens("GMV 华东"), 3);
        assert_eq!(count_tokens("，。"), 2);
    }

    #[test]
    fn summaries_keep_tables_metrics_and_the_result() {
        let s = extractive_summary(
            "Show me the GMV of East China last month from the orders table, excluding refunds.",
            "I queried dw.orders. The GMV of East China last month was 1,234,567 yuan. It rose 3% on the month before.",
            &["orders".into(), "GMV".into(), "dw_orders_daily".into()],
        );
        assert!(
            s.chars().count() <= SUMMARY_MAX_CHARS && s.chars().count() >= SUMMARY_MIN_CHARS,
            "{s}"
        );
        assert!(
            s.contains("1,234,567") || s.contains("1,234"),
            "keeps the result: {s}"
        );
        assert!(s.contains("dw_orders_daily"), "keeps table names: {s}");
        assert!(s.contains("GMV"), "keeps metric names: {s}");
        let zh = extractive_summary(
            "查询华东地区上个月的销售额",
            "华东地区上个月销售额为1234万元。同比增长3%。",
            &["销售额".into()],
        );
        assert!(zh.contains("1234万元"), "{zh}");
        assert!(zh.chars().count() <= SUMMARY_MAX_CHARS);
    }

    proptest! {
        #[test]
        fn summaries_never_exceed_sixty_characters(
            user in "\\PC{0,200}", assistant in "\\PC{0,300}", entities in proptest::collection::vec("[a-z_]{1,30}", 0..8),
        ) {
            let s = extractive_summary(&user, &assistant, &entities);
            prop_assert!(s.chars().count() <= SUMMARY_MAX_CHARS, "{} chars: {}", s.chars().count(), s);
        }

        #[test]
        fn token_count_is_additive_up_to_rounding(a in "\\PC{0,50}", b in "\\PC{0,50}") {
            let joined = format!("{a}{b}");
            let sum = count_tokens(&a) + count_tokens(&b);
            prop_assert!(count_tokens(&joined) <= sum && sum <= count_tokens(&joined) + 1);
        }

        #[test]
        fn truncation_respects_the_limit(text in "\\PC{0,100}", max in 1usize..80) {
            prop_assert!(truncate_chars(&text, max).chars().count() <= max);
        }
    }
}
