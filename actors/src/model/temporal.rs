//! Temporal grounding: the days a text speaks of, resolved against the time it was written.
//!
//! "Yesterday" in a turn written on 8 May 2023 is 7 May 2023; "last week" is the Monday to
//! Sunday before; "in July 2023" and "2023年7月" are that month. The retriever indexes each
//! document with the days it was written and speaks of, and a query that names a time ranks
//! the candidates that speak of it higher (see `RetrieverParams::date_weight`).
//!
//! Days are counted in UTC from the Unix epoch (the node does not know a user's time zone, so
//! a turn written late in the evening may land on the next day). Expressions resolved:
//! - relative, in English: today, tonight, this morning/afternoon/evening, yesterday, last
//!   night, the day before yesterday, tomorrow, N days/weeks/months/years ago (digits or one
//!   to ten, "a", "a couple of"), last/this/next week, weekend, month and year, last Monday to
//!   Sunday;
//! - relative, in Chinese: 今天 今晚 昨天 昨晚 前天 明天 后天 N天前, 上周 (上星期, 上个星期)
//!   本周 这周 下周, 上周末 这周末, 上个月 (上月) 这个月 下个月, 去年 今年 明年;
//! - absolute: `2023-05-08`, `8 May 2023`, `May 8, 2023`, `May 2023`, `2023年5月8日`,
//!   `2023年5月`, and a month or day without a year in the year of writing.
//!
//! Pure and allocation-light; it never logs the text.

use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, Weekday};
use engram_storage::types::Timestamp;
use regex::Regex;

use super::policy::DAY_MS;

pub mod when;

/// A span of days, both ends included, in days since 1970-01-01 (UTC).
pub type DaySpan = (i64, i64);

/// Spans longer than this in a query say too little to rank by (a year matches everything
/// written that year).
pub const MAX_QUERY_SPAN_DAYS: i64 = 62;

/// A pattern of this file, its word boundaries ASCII ones: the words are English, a Unicode
/// `\b` sees none between a Chinese character and a digit or a Latin letter ("昨天yesterday"),
/// and it keeps the regex engine from its fast automaton on any non-ASCII text.
fn pattern(pattern: &str) -> Regex {
    // The patterns are constants of this file: a typo fails every test at once.
    Regex::new(&pattern.replace(r"\b", r"(?-u:\b)"))
        .unwrap_or_else(|err| panic!("date pattern {pattern:?}: {err}"))
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

static RELATIVE_EN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b(?:(the day before yesterday)|(today|tonight|this morning|this afternoon|this evening)|(yesterday|last night)|(tomorrow)|(\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|a|a couple of)\s+(day|week|month|year)s?\s+ago|(last|this|next)\s+(week|weekend|month|year)|last\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
    )
});

static RELATIVE_ZH: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(前天)|(今天|今晚)|(昨天|昨晚)|(明天)|(后天)|(\d{1,2}|[一二三四五六七八九十两])天前|(上个?星期|上周|本周|这周|这个星期|下个?星期|下周)(末)?|(上个?月|这个月|本月|下个?月)|(去年|今年|明年)",
    )
});

static ISO: LazyLock<Regex> = LazyLock::new(|| pattern(r"\b(\d{4})-(\d{2})-(\d{2})\b"));

/// A month's name or its usual abbreviation (`decided` is not December).
const MONTH: &str = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?";

static DAY_MONTH: LazyLock<Regex> = LazyLock::new(|| {
    pattern(&format!(
        r"(?i)\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{MONTH}\b,?(?:\s+(\d{{4}})\b)?"
    ))
});

static MONTH_DAY: LazyLock<Regex> = LazyLock::new(|| {
    pattern(&format!(
        r"(?i)\b{MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?\b,?(?:\s+(\d{{4}})\b)?"
    ))
});

static MONTH_YEAR: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b(?:in\s+)?(january|february|march|april|may|june|july|august|september|october|november|december)(?:,?\s+(\d{4}))?\b",
    )
});

static ZH_DATE: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(?:(\d{4})年)?(\d{1,2})月(?:(\d{1,2})[日号])?"));

/// The spans of days `text` speaks of, resolved against `written` (its time of writing).
/// Each span once, in order of first mention.
pub fn mentioned(text: &str, written: Timestamp) -> Vec<DaySpan> {
    let Some(now) = DateTime::from_timestamp_millis(written.0).map(|t| t.date_naive()) else {
        return Vec::new();
    };
    let mut found: Vec<(usize, DaySpan)> = Vec::new();
    relative_en(text, now, &mut found);
    relative_zh(text, now, &mut found);
    absolute(text, now, &mut found);
    found.sort_by_key(|(at, _)| *at);
    let mut spans: Vec<DaySpan> = Vec::with_capacity(found.len());
    for (_, span) in found {
        if !spans.contains(&span) {
            spans.push(span);
        }
    }
    spans
}

/// The day `at` falls on.
pub fn day_of(at: Timestamp) -> i64 {
    at.0.div_euclid(DAY_MS)
}

/// Whether any span of `a` overlaps any of `b`.
pub fn overlaps(a: &[DaySpan], b: &[DaySpan]) -> bool {
    a.iter()
        .any(|&(s, e)| b.iter().any(|&(s2, e2)| s <= e2 && s2 <= e))
}

fn days(date: NaiveDate) -> i64 {
    date.signed_duration_since(NaiveDate::default()).num_days()
}

fn day(date: NaiveDate) -> DaySpan {
    (days(date), days(date))
}

fn span(first: NaiveDate, last: NaiveDate) -> DaySpan {
    (days(first), days(last))
}

fn shift(date: NaiveDate, by: i64) -> NaiveDate {
    if by >= 0 {
        date.checked_add_days(Days::new(by.unsigned_abs()))
    } else {
        date.checked_sub_days(Days::new(by.unsigned_abs()))
    }
    .unwrap_or(date)
}

/// The Monday to Sunday week `offset` weeks from the one holding `date`.
fn week(date: NaiveDate, offset: i64) -> DaySpan {
    let monday = shift(date, -i64::from(date.weekday().num_days_from_monday()));
    let monday = shift(monday, 7 * offset);
    span(monday, shift(monday, 6))
}

/// The Saturday and Sunday of the week `offset` weeks from the one holding `date`.
fn weekend(date: NaiveDate, offset: i64) -> DaySpan {
    let (monday, _) = week(date, offset);
    (monday + 5, monday + 6)
}

fn month_of(year: i32, month: u32) -> Option<DaySpan> {
    let first = NaiveDate::from_ymd_opt(year, month, 1)?;
    let last = first.checked_add_months(Months::new(1))?.pred_opt()?;
    Some(span(first, last))
}

fn shifted_month(date: NaiveDate, offset: i32) -> Option<DaySpan> {
    let index = date.year() * 12 + date.month0() as i32 + offset;
    month_of(index.div_euclid(12), index.rem_euclid(12) as u32 + 1)
}

fn year_of(year: i32) -> Option<DaySpan> {
    Some(span(
        NaiveDate::from_ymd_opt(year, 1, 1)?,
        NaiveDate::from_ymd_opt(year, 12, 31)?,
    ))
}

fn number(word: &str) -> Option<i64> {
    Some(match word.to_ascii_lowercase().as_str() {
        "a" | "one" | "一" => 1,
        "a couple of" | "two" | "二" | "两" => 2,
        "three" | "三" => 3,
        "four" | "四" => 4,
        "five" | "五" => 5,
        "six" | "六" => 6,
        "seven" | "七" => 7,
        "eight" | "八" => 8,
        "nine" | "九" => 9,
        "ten" | "十" => 10,
        digits => digits.parse().ok()?,
    })
}

fn relative_en(text: &str, now: NaiveDate, found: &mut Vec<(usize, DaySpan)>) {
    for caps in RELATIVE_EN.captures_iter(text) {
        let at = caps.get(0).map_or(0, |m| m.start());
        let group = |i: usize| caps.get(i).map(|m| m.as_str().to_ascii_lowercase());
        let resolved = if caps.get(1).is_some() {
            Some(day(shift(now, -2)))
        } else if caps.get(2).is_some() {
            Some(day(now))
        } else if caps.get(3).is_some() {
            Some(day(shift(now, -1)))
        } else if caps.get(4).is_some() {
            Some(day(shift(now, 1)))
        } else if let (Some(n), Some(unit)) = (group(5), group(6)) {
            number(&n).and_then(|n| ago(now, n, &unit))
        } else if let (Some(which), Some(unit)) = (group(7), group(8)) {
            let offset = match which.as_str() {
                "last" => -1,
                "next" => 1,
                _ => 0,
            };
            period(now, offset, &unit)
        } else if let Some(name) = group(9) {
            name.parse::<Weekday>().ok().map(|weekday| {
                // The last such day before today.
                let back =
                    (7 + now.weekday().num_days_from_monday() - weekday.num_days_from_monday()) % 7;
                day(shift(now, -i64::from(if back == 0 { 7 } else { back })))
            })
        } else {
            None
        };
        found.extend(resolved.map(|span| (at, span)));
    }
}

fn ago(now: NaiveDate, n: i64, unit: &str) -> Option<DaySpan> {
    match unit {
        "day" => Some(day(shift(now, -n))),
        "week" => Some(week(now, -n)),
        "month" => shifted_month(now, -i32::try_from(n).ok()?),
        _ => year_of(now.year() - i32::try_from(n).ok()?),
    }
}

fn period(now: NaiveDate, offset: i64, unit: &str) -> Option<DaySpan> {
    match unit {
        "week" => Some(week(now, offset)),
        "weekend" => Some(weekend(now, offset)),
        "month" => shifted_month(now, i32::try_from(offset).ok()?),
        _ => year_of(now.year() + i32::try_from(offset).ok()?),
    }
}

fn relative_zh(text: &str, now: NaiveDate, found: &mut Vec<(usize, DaySpan)>) {
    for caps in RELATIVE_ZH.captures_iter(text) {
        let at = caps.get(0).map_or(0, |m| m.start());
        let group = |i: usize| caps.get(i).map(|m| m.as_str());
        let offset_of = |word: &str| {
            if word.starts_with('上') || word.starts_with('去') {
                -1
            } else if word.starts_with('下') || word.starts_with('明') {
                1
            } else {
                0
            }
        };
        let resolved = if group(1).is_some() {
            Some(day(shift(now, -2)))
        } else if group(2).is_some() {
            Some(day(now))
        } else if group(3).is_some() {
            Some(day(shift(now, -1)))
        } else if group(4).is_some() {
            Some(day(shift(now, 1)))
        } else if group(5).is_some() {
            Some(day(shift(now, 2)))
        } else if let Some(n) = group(6) {
            number(n).map(|n| day(shift(now, -n)))
        } else if let Some(which) = group(7) {
            let offset = offset_of(which);
            Some(if group(8).is_some() {
                weekend(now, offset)
            } else {
                week(now, offset)
            })
        } else if let Some(which) = group(9) {
            shifted_month(now, offset_of(which) as i32)
        } else if let Some(which) = group(10) {
            year_of(now.year() + offset_of(which) as i32)
        } else {
            None
        };
        found.extend(resolved.map(|span| (at, span)));
    }
}

fn month_number(name: &str) -> Option<u32> {
    let name = name.get(..3)?.to_ascii_lowercase();
    MONTHS.iter().position(|m| *m == name).map(|i| i as u32 + 1)
}

fn date_or_month(year: i32, month: u32, dom: Option<u32>) -> Option<DaySpan> {
    match dom {
        Some(d) => NaiveDate::from_ymd_opt(year, month, d).map(day),
        None => month_of(year, month),
    }
}

fn absolute(text: &str, now: NaiveDate, found: &mut Vec<(usize, DaySpan)>) {
    let year_or_now = |m: Option<regex::Match<'_>>| {
        m.and_then(|y| y.as_str().parse::<i32>().ok())
            .unwrap_or(now.year())
    };
    // Where a longer form matched, a shorter one inside it is not read again.
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut push = |at: usize, end: usize, span: Option<DaySpan>| {
        if taken.iter().any(|&(s, e)| at < e && s < end) {
            return;
        }
        if let Some(span) = span {
            taken.push((at, end));
            found.push((at, span));
        }
    };
    for caps in ISO.captures_iter(text) {
        let whole = caps.get(0).unwrap();
        let part = |i: usize| caps.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
        let resolved = match (part(1), part(2), part(3)) {
            (Some(y), Some(m), Some(d)) => {
                NaiveDate::from_ymd_opt(i32::try_from(y).unwrap_or(0), m, d).map(day)
            }
            _ => None,
        };
        push(whole.start(), whole.end(), resolved);
    }
    // `8 May 2023` (day, then month) and `May 8, 2023` (month, then day).
    for (pattern, day_group, month_group) in [(&*DAY_MONTH, 1, 2), (&*MONTH_DAY, 2, 1)] {
        for caps in pattern.captures_iter(text) {
            let whole = caps.get(0).unwrap();
            let dom = caps.get(day_group).and_then(|m| m.as_str().parse().ok());
            let resolved = caps
                .get(month_group)
                .and_then(|m| month_number(m.as_str()))
                .and_then(|month| date_or_month(year_or_now(caps.get(3)), month, dom));
            push(whole.start(), whole.end(), resolved);
        }
    }
    for caps in MONTH_YEAR.captures_iter(text) {
        let whole = caps.get(0).unwrap();
        let name = caps.get(1).map_or("", |m| m.as_str());
        // "may" alone is a verb far more often than a month.
        if caps.get(2).is_none() && name.eq_ignore_ascii_case("may") {
            continue;
        }
        let resolved = month_number(name)
            .and_then(|month| date_or_month(year_or_now(caps.get(2)), month, None));
        push(whole.start(), whole.end(), resolved);
    }
    for caps in ZH_DATE.captures_iter(text) {
        let whole = caps.get(0).unwrap();
        let month = caps.get(2).and_then(|m| m.as_str().parse().ok());
        let dom = caps.get(3).and_then(|m| m.as_str().parse().ok());
        let resolved = month.and_then(|month| date_or_month(year_or_now(caps.get(1)), month, dom));
        push(whole.start(), whole.end(), resolved);
    }
}

#[cfg(test)]
mod tests;
