//! Each kind of expression resolved against a known day of writing (Monday 8 May 2023).

use chrono::NaiveDate;
use engram_storage::types::Timestamp;

use super::{DaySpan, day_of, mentioned, overlaps};

/// Monday 8 May 2023, 13:56 UTC.
fn written() -> Timestamp {
    Timestamp(1_683_554_160_000)
}

fn d(y: i32, m: u32, day: u32) -> i64 {
    NaiveDate::from_ymd_opt(y, m, day)
        .unwrap()
        .signed_duration_since(NaiveDate::default())
        .num_days()
}

fn one(y: i32, m: u32, day: u32) -> DaySpan {
    (d(y, m, day), d(y, m, day))
}

/// Each text names exactly its span, as of [`written`].
fn resolves_each(cases: &[(&str, DaySpan)]) {
    for (text, want) in cases {
        assert_eq!(mentioned(text, written()), [*want], "{text}");
    }
}

#[test]
fn the_day_of_writing_is_a_utc_day() {
    assert_eq!(day_of(written()), d(2023, 5, 8));
}

#[test]
fn english_days_weeks_months_and_years_relative_to_the_writing() {
    let cases: &[(&str, DaySpan)] = &[
        ("I went there yesterday", one(2023, 5, 7)),
        ("Last night was fun", one(2023, 5, 7)),
        ("the day before yesterday", one(2023, 5, 6)),
        ("Tonight we cook", one(2023, 5, 8)),
        ("see you tomorrow", one(2023, 5, 9)),
        ("three days ago", one(2023, 5, 5)),
        ("2 weeks ago", (d(2023, 4, 24), d(2023, 4, 30))),
        ("last week", (d(2023, 5, 1), d(2023, 5, 7))),
        ("next week", (d(2023, 5, 15), d(2023, 5, 21))),
        ("last weekend", (d(2023, 5, 6), d(2023, 5, 7))),
        ("last month", (d(2023, 4, 1), d(2023, 4, 30))),
        ("a month ago", (d(2023, 4, 1), d(2023, 4, 30))),
        ("last year", (d(2022, 1, 1), d(2022, 12, 31))),
        ("last Friday", one(2023, 5, 5)),
        ("last Monday", one(2023, 5, 1)),
    ];
    resolves_each(cases);
}

#[test]
fn chinese_relative_expressions() {
    let cases: &[(&str, DaySpan)] = &[
        ("我昨天去了医院", one(2023, 5, 7)),
        ("前天下雨", one(2023, 5, 6)),
        ("后天见", one(2023, 5, 10)),
        ("三天前买的", one(2023, 5, 5)),
        ("上周去了北京", (d(2023, 5, 1), d(2023, 5, 7))),
        ("上个星期", (d(2023, 5, 1), d(2023, 5, 7))),
        ("上周末", (d(2023, 5, 6), d(2023, 5, 7))),
        ("下个月", (d(2023, 6, 1), d(2023, 6, 30))),
        ("去年", (d(2022, 1, 1), d(2022, 12, 31))),
    ];
    resolves_each(cases);
}

#[test]
fn absolute_dates_and_months_in_both_languages() {
    let cases: &[(&str, DaySpan)] = &[
        ("on 2023-10-13", one(2023, 10, 13)),
        ("on October 13, 2023", one(2023, 10, 13)),
        ("[1:56 pm on 8 May, 2023]", one(2023, 5, 8)),
        ("on the 3rd of June", one(2023, 6, 3)),
        ("in July 2023", (d(2023, 7, 1), d(2023, 7, 31))),
        ("in December", (d(2023, 12, 1), d(2023, 12, 31))),
        ("2023年7月", (d(2023, 7, 1), d(2023, 7, 31))),
        ("3月5日", one(2023, 3, 5)),
    ];
    resolves_each(cases);
}

#[test]
fn words_that_only_look_like_dates_are_not_read_as_dates() {
    for text in [
        "I may go",
        "she decided 3 things",
        "the marathon 5 km",
        "sept is a prefix",
        "",
    ] {
        assert_eq!(mentioned(text, written()), [], "{text}");
    }
}

#[test]
fn several_mentions_keep_their_order_once_each() {
    let spans = mentioned(
        "Yesterday, and last week, and yesterday again on 8 May 2023",
        written(),
    );
    assert_eq!(
        spans,
        [
            one(2023, 5, 7),
            (d(2023, 5, 1), d(2023, 5, 7)),
            one(2023, 5, 8)
        ]
    );
    assert!(overlaps(&spans, &[one(2023, 5, 3)]));
    assert!(!overlaps(&spans, &[one(2023, 5, 20)]));
}

proptest::proptest! {
    /// Any text at any time of writing gives spans whose first day is not after their last,
    /// and never panics (months and days out of range, far years, mixed scripts).
    #[test]
    fn any_text_gives_well_formed_spans(
        text in "([0-9]{1,5}|[ -~]{0,6}|年|月|日|号|上周|昨天|天前|last|week|May|October|ago|, ){0,12}",
        millis in -9_000_000_000_000i64..9_000_000_000_000i64,
    ) {
        for (first, last) in mentioned(&text, Timestamp(millis)) {
            proptest::prop_assert!(first <= last, "{first} > {last}");
        }
    }
}

/// English words and ISO dates written right against Chinese characters are found: the
/// patterns' word boundaries are ASCII ones (a Unicode `\b` sees none between 在 and 2).
#[test]
fn dates_and_english_words_against_chinese_characters_are_found() {
    resolves_each(&[
        ("会议改在2023-05-20举行", one(2023, 5, 20)),
        ("我yesterday已经付过了", one(2023, 5, 7)),
    ]);
}
