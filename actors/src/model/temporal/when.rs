//! The instant a request asks for ("下周三上午", "明天", "月底", "tomorrow at 4pm", "next
//! Tuesday morning"), resolved forward against the time the message was written: the day
//! the request names, at the hour it names.
//!
//! Days: 今天/today, 明天/tomorrow, 后天, 大后天, "the day after tomorrow"; 下周三/next
//! Wednesday (that day of the next Monday-to-Sunday week), 这周六/this Saturday (of the
//! current week), 周三/Wednesday alone (the next one after the day of writing); 月底/"end of
//! the month" (its last day); 15号/"the 15th" (this month's, or next month's once passed);
//! and the absolute dates temporal grounding reads (`2024-06-19`, `6月19日`, `June 19`).
//! Hours: as written (下午三点 15:00, 九点半 09:30, 7pm, 16:30); else by the part of the day
//! (上午/morning 09:00, 中午/noon 12:00, 下午/afternoon 14:00, 晚上/傍晚/evening/tonight
//! 19:00); a day without an hour at 09:00; an hour without a day on the day of writing while
//! it is ahead, else the next day. Times are UTC, as every time of the node (it does not know
//! the user's zone). Pure; it never logs the text.

use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, NaiveTime, Weekday};
use engram_storage::types::Timestamp;
use regex::Regex;

use super::pattern;

/// The hour a named day without an hour resolves to.
const DEFAULT_HOUR: u32 = 9;

static DAY_ZH: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(大后天)|(后天)|(明天|明早|明晚|明儿|明日)|(今天|今晚|今早|今儿|今日)|(下个?(?:周|星期|礼拜)|下个星期)([一二三四五六日天])|(这|本)(?:个)?(?:周|星期|礼拜)([一二三四五六日天])|(?:周|星期|礼拜)([一二三四五六日天])|(月底|月末)|([0-9]{1,2}|[一二三四五六七八九十]{1,3})[号日]",
    )
});

static DAY_EN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b(?:(the day after tomorrow)|(tomorrow)|(today|tonight)|(next|this|on)?\s*(monday|tuesday|wednesday|thursday|friday|saturday|sunday)|(end of (?:the |this )?month)|(?:the\s+)?(\d{1,2})(?:st|nd|rd|th))\b",
    )
});

static CLOCK_ZH: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(早上|早晨|上午|中午|下午|傍晚|晚上|今晚|明晚|明早|今早)?\s*([0-9]{1,2}|[一二三四五六七八九十两]{1,3})\s*[点:：]\s*(半|[0-9]{1,2}分?|[一二三四五六七八九十]{1,3}分)?",
    )
});

static CLOCK_EN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)\b(\d{1,2})(?::(\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)|\b(\d{1,2}):(\d{2})\b|\bat (\d{1,2})\b",
    )
});

static PART_OF_DAY: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)(早上|早晨|上午|明早|今早|\bmorning\b)|(中午|\bnoon\b|\bmidday\b)|(下午|\bafternoon\b)|(傍晚|晚上|今晚|明晚|\bevening\b|\btonight\b)",
    )
});

/// The instant `text`, written at `written`, asks for; `None` when it names no day and no
/// hour.
pub fn requested(text: &str, written: Timestamp) -> Option<Timestamp> {
    let now = DateTime::from_timestamp_millis(written.0)?.naive_utc();
    let today = now.date();
    // A date temporal grounding reads (`6月19日`, `June 19`, 明天), of one day, not before
    // the day of writing; else the days only a request names.
    let written_day = super::day_of(written);
    let day = super::mentioned(text, written)
        .into_iter()
        .find(|(a, b)| a == b && *a >= written_day)
        .and_then(|(d, _)| {
            NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_days(Days::new(u64::try_from(d).ok()?))
        })
        .or_else(|| day_zh(text, today))
        .or_else(|| day_en(text, today));
    let part = PART_OF_DAY.captures(text).map(|c| {
        (1..=4)
            .find(|i| c.get(*i).is_some())
            .map_or(DEFAULT_HOUR, |i| [9, 12, 14, 19][i - 1])
    });
    let clock = clock_zh(text).or_else(|| clock_en(text, part));
    let time = match (clock, part) {
        (Some(t), _) => Some(t),
        (None, Some(hour)) => NaiveTime::from_hms_opt(hour, 0, 0),
        (None, None) => None,
    };
    let at = match (day, time) {
        (Some(day), Some(time)) => day.and_time(time),
        (Some(day), None) => day.and_hms_opt(DEFAULT_HOUR, 0, 0)?,
        (None, Some(time)) => {
            let at = today.and_time(time);
            if at > now {
                at
            } else {
                at.checked_add_days(Days::new(1))?
            }
        }
        (None, None) => return None,
    };
    Some(Timestamp(at.and_utc().timestamp_millis()))
}

/// `at` as the seed writes instants: RFC 3339 in UTC, to the second (`2024-06-16T09:00:00Z`).
pub fn rfc3339(at: Timestamp) -> Option<String> {
    DateTime::from_timestamp_millis(at.0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

fn weekday_of(word: &str) -> Option<Weekday> {
    Some(match word {
        "一" => Weekday::Mon,
        "二" => Weekday::Tue,
        "三" => Weekday::Wed,
        "四" => Weekday::Thu,
        "五" => Weekday::Fri,
        "六" => Weekday::Sat,
        "日" | "天" => Weekday::Sun,
        w => match w.to_ascii_lowercase().as_str() {
            "monday" => Weekday::Mon,
            "tuesday" => Weekday::Tue,
            "wednesday" => Weekday::Wed,
            "thursday" => Weekday::Thu,
            "friday" => Weekday::Fri,
            "saturday" => Weekday::Sat,
            "sunday" => Weekday::Sun,
            _ => return None,
        },
    })
}

/// `day` of the Monday-to-Sunday week `weeks` after the week of `today`.
fn in_week(today: NaiveDate, weeks: i64, day: Weekday) -> Option<NaiveDate> {
    let monday =
        today.checked_sub_days(Days::new(u64::from(today.weekday().num_days_from_monday())))?;
    let offset = weeks * 7 + i64::from(day.num_days_from_monday());
    monday.checked_add_days(Days::new(u64::try_from(offset).ok()?))
}

/// The next `day` after `today` (today excluded).
fn next_weekday(today: NaiveDate, day: Weekday) -> Option<NaiveDate> {
    let ahead = (7 + day.num_days_from_monday() - today.weekday().num_days_from_monday()) % 7;
    today.checked_add_days(Days::new(u64::from(if ahead == 0 { 7 } else { ahead })))
}

fn month_end(today: NaiveDate) -> Option<NaiveDate> {
    today
        .with_day(1)?
        .checked_add_months(Months::new(1))?
        .checked_sub_days(Days::new(1))
}

/// Day `dom` of this month, or of the next once it has passed.
fn day_of_month(today: NaiveDate, dom: u32) -> Option<NaiveDate> {
    if dom < today.day() {
        today
            .with_day(1)?
            .checked_add_months(Months::new(1))?
            .with_day(dom)
    } else {
        today.with_day(dom)
    }
}

/// A Chinese number of one to ninety-nine (一, 十二, 二十三, 两), or digits.
fn number_zh(word: &str) -> Option<u32> {
    if let Ok(n) = word.parse() {
        return Some(n);
    }
    let digit = |c: char| "一二三四五六七八九".find(c).map(|i| i as u32 / 3 + 1);
    let chars: Vec<char> = word.chars().collect();
    match chars.as_slice() {
        ['两'] => Some(2),
        ['十'] => Some(10),
        [d] => digit(*d),
        ['十', d] => Some(10 + digit(*d)?),
        [t, '十'] => Some(10 * digit(*t)?),
        [t, '十', d] => Some(10 * digit(*t)? + digit(*d)?),
        _ => None,
    }
}

/// Characters after a number that make it a building, line or counter, not a day ("1号楼").
const NOT_A_DAY_AFTER: &str = "楼线门窗床柜台房口位桌";

/// Characters before "一点" that make it "a little" ("快一点", "便宜一点"), not one o'clock.
const A_LITTLE_BEFORE: &str = "快早晚慢多少好宜大小高低近远轻重有点再";

fn day_zh(text: &str, today: NaiveDate) -> Option<NaiveDate> {
    let c = DAY_ZH.captures_iter(text).find(|c| {
        c.get(11).is_none()
            || !text[c.get(0).map_or(0, |m| m.end())..]
                .chars()
                .next()
                .is_some_and(|n| NOT_A_DAY_AFTER.contains(n))
    })?;
    let add = |n: u64| today.checked_add_days(Days::new(n));
    if c.get(1).is_some() {
        add(3)
    } else if c.get(2).is_some() {
        add(2)
    } else if c.get(3).is_some() {
        add(1)
    } else if c.get(4).is_some() {
        Some(today)
    } else if let Some(day) = c.get(6) {
        in_week(today, 1, weekday_of(day.as_str())?)
    } else if let Some(day) = c.get(8) {
        in_week(today, 0, weekday_of(day.as_str())?)
    } else if let Some(day) = c.get(9) {
        next_weekday(today, weekday_of(day.as_str())?)
    } else if c.get(10).is_some() {
        month_end(today)
    } else {
        day_of_month(today, number_zh(c.get(11)?.as_str())?)
    }
}

fn day_en(text: &str, today: NaiveDate) -> Option<NaiveDate> {
    let c = DAY_EN.captures(text)?;
    let add = |n: u64| today.checked_add_days(Days::new(n));
    if c.get(1).is_some() {
        add(2)
    } else if c.get(2).is_some() {
        add(1)
    } else if c.get(3).is_some() {
        Some(today)
    } else if let Some(day) = c.get(5) {
        let day = weekday_of(day.as_str())?;
        match c.get(4).map(|m| m.as_str().to_ascii_lowercase()).as_deref() {
            Some("next") => in_week(today, 1, day),
            Some("this") => in_week(today, 0, day),
            _ => next_weekday(today, day),
        }
    } else if c.get(6).is_some() {
        month_end(today)
    } else {
        day_of_month(today, c.get(7)?.as_str().parse().ok()?)
    }
}

/// Whether the part of the day makes an hour under 12 an afternoon or evening one.
fn is_pm(part: &str) -> bool {
    matches!(part, "下午" | "傍晚" | "晚上" | "今晚" | "明晚")
}

fn clock_zh(text: &str) -> Option<NaiveTime> {
    let c = CLOCK_ZH.captures_iter(text).find(|c| {
        let whole = c.get(0).map_or("", |m| m.as_str());
        let before = text[..c.get(0).map_or(0, |m| m.start())]
            .chars()
            .next_back();
        !(c.get(1).is_none()
            && c.get(3).is_none()
            && whole.starts_with('一')
            && before.is_some_and(|b| A_LITTLE_BEFORE.contains(b)))
    })?;
    let mut hour = number_zh(c.get(2)?.as_str())?;
    let part = c
        .get(1)
        .map(|m| m.as_str())
        .or_else(|| PART_OF_DAY.find(text).map(|m| m.as_str()));
    if part.is_some_and(is_pm) && hour < 12 {
        hour += 12;
    }
    let minute = match c.get(3).map(|m| m.as_str().trim_end_matches('分')) {
        None => 0,
        Some("半") => 30,
        Some(m) => number_zh(m)?,
    };
    NaiveTime::from_hms_opt(hour, minute, 0)
}

fn clock_en(text: &str, part: Option<u32>) -> Option<NaiveTime> {
    let c = CLOCK_EN.captures(text)?;
    let (hour, minute, pm) = if let Some(h) = c.get(1) {
        let pm = c.get(3)?.as_str().to_ascii_lowercase().starts_with('p');
        let minute = c.get(2).map_or(Some(0), |m| m.as_str().parse().ok())?;
        (h.as_str().parse::<u32>().ok()?, minute, Some(pm))
    } else if let Some(h) = c.get(4) {
        (
            h.as_str().parse().ok()?,
            c.get(5)?.as_str().parse().ok()?,
            None,
        )
    } else {
        (c.get(6)?.as_str().parse().ok()?, 0, None)
    };
    let hour = match pm {
        Some(true) if hour < 12 => hour + 12,
        Some(false) if hour == 12 => 0,
        Some(_) => hour,
        // "at 4" in the afternoon or evening, or an hour no one books at night.
        None if hour < 12 && (part.is_some_and(|p| p >= 12) || hour < 8) => hour + 12,
        None => hour,
    };
    NaiveTime::from_hms_opt(hour, minute, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wednesday 2024-06-12 10:30 UTC.
    const WRITTEN: &str = "2024-06-12T10:30:00Z";

    fn at(text: &str) -> Option<String> {
        let written = DateTime::parse_from_rfc3339(WRITTEN)
            .unwrap()
            .timestamp_millis();
        requested(text, Timestamp(written)).and_then(rfc3339)
    }

    #[test]
    fn chinese_days_and_hours_resolve_forward_from_the_message() {
        for (text, want) in [
            ("我要预约明天体检", "2024-06-13T09:00:00Z"),
            (
                "我想预约下周三上午去社保中心办理养老认证",
                "2024-06-19T09:00:00Z",
            ),
            ("下周三下午三点洗牙", "2024-06-19T15:00:00Z"),
            ("这周六晚上7点订个包间", "2024-06-15T19:00:00Z"),
            ("周三帮我约个理发", "2024-06-19T09:00:00Z"),
            ("月底前来修一下空调", "2024-06-30T09:00:00Z"),
            ("15号上午九点半", "2024-06-15T09:30:00Z"),
            ("10号来", "2024-07-10T09:00:00Z"),
            ("后天中午", "2024-06-14T12:00:00Z"),
            ("今晚八点", "2024-06-12T20:00:00Z"),
            ("下午两点可以吗", "2024-06-12T14:00:00Z"),
            ("上午九点", "2024-06-13T09:00:00Z"),
            ("6月28日下午", "2024-06-28T14:00:00Z"),
            ("明天去体检中心1号楼", "2024-06-13T09:00:00Z"),
        ] {
            assert_eq!(at(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn english_days_and_hours_resolve_forward_from_the_message() {
        for (text, want) in [
            ("book me in tomorrow at 4pm", "2024-06-13T16:00:00Z"),
            ("next Tuesday morning please", "2024-06-18T09:00:00Z"),
            ("this Friday", "2024-06-14T09:00:00Z"),
            (
                "can you come on Wednesday at 10:30am",
                "2024-06-19T10:30:00Z",
            ),
            ("a table for two tonight", "2024-06-12T19:00:00Z"),
            ("the 20th in the afternoon", "2024-06-20T14:00:00Z"),
            ("any time on June 28", "2024-06-28T09:00:00Z"),
            ("at 3 tomorrow", "2024-06-13T15:00:00Z"),
        ] {
            assert_eq!(at(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn a_request_naming_no_day_or_hour_has_no_time() {
        for text in [
            "帮我约个洗牙",
            "I'd like to book a massage",
            "我想预约体检",
            "能不能快一点",
        ] {
            assert_eq!(at(text), None, "{text}");
        }
    }
}
