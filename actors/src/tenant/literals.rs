//! The literals of a question that its SQL depends on and its meaning barely does: numbers and
//! time expressions. "Orders last week" and "orders last month" are close in an embedding
//! space (about 0.97 with multilingual-e5-small) and need different SQL; so do "top 5" and
//! "top 10". The SQL cache's literal guard lets a cached SQL answer a question only when both
//! questions carry the same literals, whatever their similarity.
//!
//! Literals are canonical: `last week`, `past week`, `previous week`, `上周` and `上星期` are one
//! literal (`week-1`); digits are numbers whatever surrounds them (`Q3` is `3`, `2024年` is
//! `2024`), with thousands separators and scales read (`10,000`, `10k` and `1万` are `10000`);
//! English number words are numbers (`eight` is `8`); a few Chinese numerals are read where
//! they count (`前十` is `10`, `五万` is `50000`).

use std::collections::BTreeSet;

/// English relative time: (words, canonical). Matched on the normalised (lower-case)
/// question, as whole words.
const EN_RELATIVE: [(&str, &str); 28] = [
    ("today", "day+0"),
    ("tonight", "day+0"),
    ("yesterday", "day-1"),
    ("tomorrow", "day+1"),
    ("this week", "week+0"),
    ("current week", "week+0"),
    ("last week", "week-1"),
    ("past week", "week-1"),
    ("previous week", "week-1"),
    ("next week", "week+1"),
    ("this month", "month+0"),
    ("current month", "month+0"),
    ("last month", "month-1"),
    ("past month", "month-1"),
    ("previous month", "month-1"),
    ("next month", "month+1"),
    ("this quarter", "quarter+0"),
    ("current quarter", "quarter+0"),
    ("last quarter", "quarter-1"),
    ("previous quarter", "quarter-1"),
    ("next quarter", "quarter+1"),
    ("this year", "year+0"),
    ("current year", "year+0"),
    ("last year", "year-1"),
    ("past year", "year-1"),
    ("previous year", "year-1"),
    ("next year", "year+1"),
    ("year to date", "ytd"),
];

/// English calendar words (months and weekdays), canonical as themselves.
const EN_CALENDAR: [&str; 19] = [
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "weekend",
];

/// English number words, read as numbers where they stand alone.
const EN_NUMBERS: [(&str, u32); 21] = [
    ("zero", 0),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("eleven", 11),
    ("twelve", 12),
    ("fifteen", 15),
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("hundred", 100),
    ("thousand", 1000),
    ("million", 1_000_000),
];

/// Chinese relative time: (words, canonical), matched as substrings, longest first.
const ZH_RELATIVE: [(&str, &str); 39] = [
    ("上个季度", "quarter-1"),
    ("下个季度", "quarter+1"),
    ("这个季度", "quarter+0"),
    ("上个星期", "week-1"),
    ("上个礼拜", "week-1"),
    ("下个星期", "week+1"),
    ("这个星期", "week+0"),
    ("上个月", "month-1"),
    ("下个月", "month+1"),
    ("这个月", "month+0"),
    ("上星期", "week-1"),
    ("上礼拜", "week-1"),
    ("下星期", "week+1"),
    ("本星期", "week+0"),
    ("上季度", "quarter-1"),
    ("下季度", "quarter+1"),
    ("本季度", "quarter+0"),
    ("这季度", "quarter+0"),
    ("今年以来", "ytd"),
    ("年初至今", "ytd"),
    ("今天", "day+0"),
    ("今日", "day+0"),
    ("昨天", "day-1"),
    ("昨日", "day-1"),
    ("前天", "day-2"),
    ("明天", "day+1"),
    ("后天", "day+2"),
    ("本周", "week+0"),
    ("这周", "week+0"),
    ("上周", "week-1"),
    ("下周", "week+1"),
    ("本月", "month+0"),
    ("上月", "month-1"),
    ("下月", "month+1"),
    ("今年", "year+0"),
    ("本年", "year+0"),
    ("去年", "year-1"),
    ("明年", "year+1"),
    ("前年", "year-2"),
];

/// Chinese numerals read as numbers after `前` ("the first N") or before a counter.
const ZH_DIGITS: [(char, u32); 11] = [
    ('零', 0),
    ('一', 1),
    ('二', 2),
    ('两', 2),
    ('三', 3),
    ('四', 4),
    ('五', 5),
    ('六', 6),
    ('七', 7),
    ('八', 8),
    ('九', 9),
];

/// Counters after which a Chinese numeral counts something.
const ZH_COUNTERS: [char; 9] = ['个', '名', '天', '周', '月', '年', '位', '条', '季'];

/// The value of a Chinese numeral of up to two digits with `十` (`十` 10, `十五` 15, `三十`
/// 30, `三十五` 35), or of one digit.
fn zh_number(chars: &[char]) -> Option<u32> {
    let digit = |c: &char| ZH_DIGITS.iter().find(|(d, _)| d == c).map(|(_, v)| *v);
    match chars {
        [c] if *c == '十' => Some(10),
        [c] => digit(c),
        ['十', b] => Some(10 + digit(b)?),
        [a, '十'] => Some(digit(a)? * 10),
        [a, '十', b] => Some(digit(a)? * 10 + digit(b)?),
        _ => None,
    }
}

/// A number's canonical text: no leading zeros, scaled (`10k` is `10000`).
fn canonical_number(digits: &str, scale: u32) -> String {
    if scale == 1 {
        let trimmed = digits.trim_start_matches('0');
        return match trimmed {
            "" => "0".to_owned(),
            t if t.starts_with('.') => digits.to_owned(),
            t => t.to_owned(),
        };
    }
    match digits.parse::<f64>() {
        Ok(value) => format!("{}", (value * f64::from(scale)).round() as u64),
        Err(_) => digits.to_owned(),
    }
}

fn is_zh_numeral(c: char) -> bool {
    c == '十' || ZH_DIGITS.iter().any(|(d, _)| *d == c)
}

/// The literals of a normalised (lower-case) question.
pub fn literals(question: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = question.to_owned();
    for (words, canonical) in ZH_RELATIVE {
        if rest.contains(words) {
            found.insert(canonical.to_owned());
            rest = rest.replace(words, " ");
        }
    }
    // English phrases as whole words: pad, and match " words ".
    let spaced = format!(
        " {} ",
        rest.chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut spaced = spaced;
    for (words, canonical) in EN_RELATIVE {
        let padded = format!(" {words} ");
        if spaced.contains(&padded) {
            found.insert(canonical.to_owned());
            spaced = spaced.replace(&padded, " ");
        }
    }
    for word in spaced.split_whitespace() {
        if EN_CALENDAR.contains(&word) {
            found.insert(word.to_owned());
        } else if let Some((_, n)) = EN_NUMBERS.iter().find(|(w, _)| *w == word) {
            found.insert(n.to_string());
        }
    }
    // Numbers: every run of ASCII digits (with a decimal part), leading zeros dropped.
    let chars: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = i;
            // Digits, a decimal part, and thousands separators (`10,000`: a comma followed by
            // exactly three digits).
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || (chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
                    || (chars[i] == ','
                        && chars
                            .get(i + 1..i + 4)
                            .is_some_and(|d| d.iter().all(char::is_ascii_digit))
                        && !chars.get(i + 4).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            let number: String = chars[start..i].iter().filter(|c| **c != ',').collect();
            // A scale right after the number: `10k`, `2m`, `5万`.
            let scale = match chars.get(i) {
                Some('k') if !chars.get(i + 1).is_some_and(|c| c.is_alphanumeric()) => 1_000,
                Some('m') if !chars.get(i + 1).is_some_and(|c| c.is_alphanumeric()) => 1_000_000,
                Some('万') => 10_000,
                _ => 1,
            };
            found.insert(canonical_number(&number, scale));
        } else if is_zh_numeral(chars[i]) {
            let start = i;
            while i < chars.len() && is_zh_numeral(chars[i]) {
                i += 1;
            }
            let after_qian = start > 0 && chars[start - 1] == '前';
            let before_counter = chars.get(i).is_some_and(|c| ZH_COUNTERS.contains(c));
            let before_wan = chars.get(i) == Some(&'万');
            if (after_qian || before_counter || before_wan)
                && let Some(n) = zh_number(&chars[start..i])
            {
                let n = if before_wan { n * 10_000 } else { n };
                found.insert(n.to_string());
            }
        } else {
            i += 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(q: &str) -> Vec<String> {
        literals(q).into_iter().collect()
    }

    #[test]
    fn relative_times_in_either_language_are_one_literal() {
        assert_eq!(of("how many orders did we get last week"), vec!["week-1"]);
        assert_eq!(literals("orders in the past week"), literals("上周的订单"));
        assert_eq!(literals("上个星期的订单"), literals("上周订单"));
        assert_ne!(literals("orders last week"), literals("orders last month"));
        assert_ne!(literals("上周订单"), literals("上个月订单"));
        assert_eq!(of("sales this year vs last year"), vec!["year+0", "year-1"]);
    }

    #[test]
    fn numbers_are_literals_wherever_they_stand() {
        assert_eq!(of("top 5 customers in q3 2024"), vec!["2024", "3", "5"]);
        assert_eq!(literals("top 05 products"), literals("top 5 products"));
        assert_eq!(literals("前十名客户"), literals("top 10 customers"));
        assert_eq!(of("销售额前5的门店"), vec!["5"]);
        assert_eq!(of("三个月内的退款"), vec!["3"]);
        assert_eq!(of("amount over 1000.50"), vec!["1000.50"]);
        assert_eq!(literals("over $10,000"), literals("over 10k"));
        assert_eq!(literals("超过1万元的订单"), literals("orders over 10000"));
        assert_eq!(literals("超过五万的订单"), literals("orders over 50,000"));
        assert_eq!(
            literals("the last eight weeks"),
            literals("the last 8 weeks")
        );
        assert_eq!(
            of("2,3 and 4"),
            vec!["2", "3", "4"],
            "a list is not a number"
        );
        assert_eq!(literals("上个季度的营收"), literals("上季度营收"));
    }

    #[test]
    fn words_that_merely_contain_numerals_or_months_are_not_literals() {
        // 一共 (in all), 统一 (unified), "marching", "maybe" carry no literal.
        assert!(of("一共有多少统一客户").is_empty());
        assert!(of("marching orders and maybe sundays").is_empty());
        assert_eq!(of("orders in march"), vec!["march"]);
    }
}
