//! Structured targets: what a distilled intent is about, by field, per type, read from the
//! message beside the rules' or the model's short target.
//!
//! - `appointment`: `{"time", "location", "what"}`: the instant asked for, resolved against the
//!   message's time ([`when::requested`], RFC 3339 in UTC; null when none is named), the place
//!   as written (null when none), and what is booked (the short target);
//! - `complaint`: `{"service", "problem"}`: what it is about (the short target) and what went
//!   wrong, as written (null when no phrase of a grievance is found);
//! - `subscription_renewal`, `subscription_cancel`: `{"product", "cycle"}`: the subscription
//!   as written (null when the message names none) and its period, `monthly`, `quarterly` or
//!   `yearly` (null when none is named).
//!
//! Other types keep the short target as a string. Pure; it never logs the text.

use std::sync::LazyLock;

use engram_storage::types::Timestamp;
use regex::Regex;
use serde_json::{Value, json};

use crate::model::temporal::when;

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file: a typo fails every test at once.
    Regex::new(&pattern.replace(r"\b", r"(?-u:\b)"))
        .unwrap_or_else(|err| panic!("target pattern {pattern:?}: {err}"))
}

/// A place in Chinese: a name ending in a kind of place, with a hall, floor or area after it
/// ("社保中心", "体检中心A区", "人民医院3号楼", "朝阳门店").
static PLACE_ZH: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\p{Han}{1,10}?(?:中心|医院|诊所|门诊部|门诊|分店|门店|旗舰店|专卖店|营业厅|服务厅|办事处|派出所|大厅|校区|分行|支行|银行|网点|服务点|4S店|店|馆|所|局|站|院|厅|室|部)(?:[A-Za-z0-9一二三四五六七八九十]{1,3}(?:区|楼|层|号楼|号窗口|号厅|室|号))?",
    )
});

/// Where a Chinese place begins: after a verb of going, or "在".
static PLACE_ZH_AFTER: LazyLock<Regex> = LazyLock::new(|| re(r"(?:去|到|在|来)"));

/// A place in English: "at the Main Street branch", "to the clinic on 5th Avenue".
static PLACE_EN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:at|to|in)\s+((?:the|your|our)\s+)?((?:[\w'-]+\s+){0,3}(?:branch|clinic|cent(?:er|re)|office|store|shop|hospital|salon|studio|gym|location|site|surgery|garage|bank))\b",
    )
});

/// Characters a Chinese place's name does not start with (a verb, a time, a pronoun).
const NOT_IN_A_PLACE: &str =
    "我你他她帮约预订要想去到在来明今后天上下午晚早周号点办理做看把给的了个和跟";

/// The subscription a message names: a kind of plan, with up to four characters naming it.
static PRODUCT_ZH: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"\p{Han}{0,4}?(?:会员|年卡|月卡|季卡|次卡|健身卡|宽带|套餐|订阅|杂志|报纸|会籍|合约|保险|保单|课程|流量包|云盘|网盘|服务|险|卡)",
    )
});

static PRODUCT_EN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b((?:[\w'-]+\s+){0,2}(?:subscriptions?|memberships?|plans?|contracts?|polic(?:y|ies)|packages?|pass|licen[cs]e|newsletters?|deliver(?:y|ies)|boxe?s?|kits?|insurance|magazines?))\b",
    )
});

/// Words before a subscription's kind that are not part of its name.
const NOT_IN_A_PRODUCT: &str = "我你帮把取消续费订停掉关的了个给将这那要想不需用再和跟开通办";

static CYCLE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(包月|月卡|月费|每个?月|按月|连续包月|一个月|\bmonthly\b|\bper month\b|\ba month\b|\bevery month\b|\bmonth[- ]to[- ]month\b)|(季卡|季度|每季|按季|\bquarterly\b|\bper quarter\b)|(年卡|包年|年费|每年|按年|一年|1年|全年|\byearly\b|\bannual(ly)?\b|\bper year\b|\b(a|another|one) year\b|\bevery year\b|\b12 months\b)",
    )
});

/// What went wrong, as a customer writes it.
static PROBLEM: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(还没(到|来|收到|送到|到账|发货|处理|人管)|没人(来|管|理|处理|回)|没收到|坏了|破损|漏发|错发|发错|送错|态度(很|太)?(差|冲|凶)|不耐烦|又?不(转|动|亮|响|通|灵|制冷|出水)了|(又|还是)(坏|停|断)了|太慢|太差|\bleak(s|ing|ed)?\b|\bstill nothing\b|\bnever (showed|arrived|came|turned up)\b|\b(dropped|drops|dropping) out\b|\bcut (\w+ ){0,3}(more|less|too much)( off)?\b|多扣|扣错|重复扣|乱扣|多收|收错|算错|不制冷|不出水|打不开|用不了|不能用|登不上|凉了|洒了|迟到|\bnot (arrived|delivered|working|fixed)\b|\bnever (arrived|came|showed up)\b|\bhasn'?t (arrived|come)\b|\b(is|are|was|were) (broken|damaged|late|cold|wrong|missing)\b|\bbroken\b|\bdamaged\b|\blate\b|\brude\b|\bcharged twice\b|\bdouble[- ]charged\b|\bovercharged\b|\bmissing\b|\bwrong (item|order|size|colou?r)\b|\bstopped working\b|\bdoesn'?t work\b)",
    )
});

/// The structured target of an intent of `intent_type` found in `message` (written at
/// `written`), with `short` the rules' or the model's target; `None` for a type kept as a
/// string.
pub fn structured(
    intent_type: &str,
    message: &str,
    short: &str,
    written: Timestamp,
) -> Option<Value> {
    let short = short.trim();
    let or_null = |s: Option<String>| s.map_or(Value::Null, Value::String);
    match intent_type {
        "appointment" => Some(json!({
            "time": when::requested(message, written).and_then(when::rfc3339),
            "location": or_null(location(message)),
            "what": or_null(Some(short.to_owned()).filter(|s| !s.is_empty())),
        })),
        "complaint" => Some(json!({
            "service": or_null(Some(short.to_owned()).filter(|s| !s.is_empty())),
            "problem": or_null(PROBLEM.find(message).map(|m| m.as_str().to_owned())),
        })),
        "subscription_renewal" | "subscription_cancel" => Some(json!({
            "product": or_null(product(message)),
            "cycle": cycle(message),
        })),
        _ => None,
    }
}

/// The place a message names, as written.
pub fn location(message: &str) -> Option<String> {
    if let Some(c) = PLACE_EN.captures(message) {
        return c.get(2).map(|m| m.as_str().trim().to_owned());
    }
    // A Chinese place after 去/到/在, else the first that starts its clause or follows a
    // particle.
    let after_verb = PLACE_ZH_AFTER.find_iter(message).find_map(|m| {
        let rest = &message[m.end()..];
        PLACE_ZH
            .find(rest)
            .filter(|p| p.start() == 0)
            .map(|p| p.as_str())
    });
    after_verb
        .or_else(|| PLACE_ZH.find_iter(message).map(|m| m.as_str()).next())
        .map(|p| p.trim_start_matches(|c| NOT_IN_A_PLACE.contains(c)))
        .filter(|p| p.chars().count() >= 2)
        .map(str::to_owned)
}

/// The subscription a message names, as written.
pub fn product(message: &str) -> Option<String> {
    if let Some(m) = PRODUCT_ZH.find(message) {
        let name = m
            .as_str()
            .trim_start_matches(|c| NOT_IN_A_PRODUCT.contains(c));
        if !name.is_empty() {
            return Some(name.to_owned());
        }
    }
    PRODUCT_EN.captures(message).and_then(|c| {
        let words: Vec<&str> = c[1]
            .split_whitespace()
            .skip_while(|w| {
                matches!(
                    w.to_ascii_lowercase().as_str(),
                    "my" | "the" | "our" | "your" | "this" | "that" | "a" | "an" | "of" | "for"
                )
            })
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    })
}

/// The billing period a message names.
pub fn cycle(message: &str) -> Value {
    match CYCLE.captures(message) {
        Some(c) if c.get(1).is_some() => json!("monthly"),
        Some(c) if c.get(2).is_some() => json!("quarterly"),
        Some(_) => json!("yearly"),
        None => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Saturday 2024-06-15 08:00 UTC.
    const WRITTEN: Timestamp = Timestamp(1_718_438_400_000);

    #[test]
    fn an_appointment_keeps_its_time_resolved_and_its_place_as_written() {
        let t = structured(
            "appointment",
            "我想预约下周三上午去社保中心办理养老认证",
            "社保中心养老认证",
            WRITTEN,
        )
        .unwrap();
        assert_eq!(t["time"], "2024-06-19T09:00:00Z", "{t}");
        assert_eq!(t["location"], "社保中心", "{t}");
        assert_eq!(t["what"], "社保中心养老认证");
        let t = structured("appointment", "我要预约明天体检", "明天体检", WRITTEN).unwrap();
        assert_eq!(
            (&t["time"], &t["location"]),
            (&json!("2024-06-16T09:00:00Z"), &Value::Null),
            "{t}"
        );
        let t = structured("appointment", "明天上午在体检中心A区体检", "体检", WRITTEN).unwrap();
        assert_eq!(t["location"], "体检中心A区", "{t}");
        let t = structured(
            "appointment",
            "Can I book a haircut at the Main Street branch next Tuesday at 4pm?",
            "haircut",
            WRITTEN,
        )
        .unwrap();
        assert_eq!(
            (&t["time"], &t["location"]),
            (&json!("2024-06-18T16:00:00Z"), &json!("Main Street branch")),
            "{t}"
        );
    }

    #[test]
    fn a_complaint_names_its_service_and_what_went_wrong() {
        let t = structured("complaint", "我要投诉，快递五天了还没到", "快递", WRITTEN).unwrap();
        assert_eq!(
            (&t["service"], &t["problem"]),
            (&json!("快递"), &json!("还没到"))
        );
        let t = structured(
            "complaint",
            "The heater you installed is broken again",
            "heater",
            WRITTEN,
        )
        .unwrap();
        assert_eq!(t["problem"], "is broken", "{t}");
    }

    #[test]
    fn a_subscription_names_its_product_and_cycle() {
        for (message, product, cycle) in [
            ("帮我把视频会员续费一年", json!("视频会员"), json!("yearly")),
            ("帮我取消视频会员的自动续费", json!("视频会员"), Value::Null),
            ("宽带包月不续了", json!("宽带"), json!("monthly")),
            ("我不需要续订了", Value::Null, Value::Null),
            (
                "Please renew my annual gym membership",
                json!("annual gym membership"),
                json!("yearly"),
            ),
            (
                "cancel my streaming plan, the monthly one",
                json!("streaming plan"),
                json!("monthly"),
            ),
        ] {
            let t = structured("subscription_renewal", message, "", WRITTEN).unwrap();
            assert_eq!(
                (&t["product"], &t["cycle"]),
                (&product, &cycle),
                "{message}"
            );
        }
    }

    #[test]
    fn other_types_keep_a_string_target() {
        assert_eq!(structured("refund", "退款", "退款", WRITTEN), None);
    }
}
