//! Health data in text: the conditions a message names ("癌症", "高血压", "diabetes") and the
//! age a user gives of themself ("我今年35岁", "I'm 35 years old"), the identity facts the
//! distiller keeps in an intent's identity anchor.
//!
//! A text naming a health condition is high-level personal data ([`super::level_of`]): the
//! turns, memories and intents holding one are read only as sensitive reads, counted by the
//! breaker. Conditions are not masked (an assistant must be able to act on "I have
//! hypertension"); the breaker bounds how often a key may read them. Conditions are named by
//! one English word each, whatever the language of the message, so the stored anchor does
//! not depend on how the user wrote it. A negated mention ("没有高血压") is health data too.
//!
//! Pure; nothing here logs.

use std::sync::LazyLock;

use regex::Regex;

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file: a typo fails every test at once.
    Regex::new(&pattern.replace(r"\b", r"(?-u:\b)"))
        .unwrap_or_else(|err| panic!("health pattern {pattern:?}: {err}"))
}

/// Conditions, each with its name and the words for it (case-insensitive unless the pattern
/// says otherwise: "AIDS" is the disease, "aids" a device).
const CONDITIONS: &[(&str, &str)] = &[
    (
        "cancer",
        r"(?i)癌|肿瘤|化疗|\bcancer\b|\btumou?rs?\b|\bchemo(therapy)?\b|\bcarcinoma\b",
    ),
    (
        "hypertension",
        r"(?i)高血压|\bhypertension\b|\bhigh blood pressure\b",
    ),
    ("diabetes", r"(?i)糖尿病|\bdiabet(es|ic)\b"),
    (
        "heart disease",
        r"(?i)心脏病|冠心病|心衰|心肌梗|\bheart (disease|failure|attack)\b",
    ),
    ("asthma", r"(?i)哮喘|\basthma(tic)?\b"),
    (
        "depression",
        r"(?i)抑郁症|焦虑症|\bclinical depression\b|\bdepressive disorder\b|\banxiety disorder\b|\bdiagnosed with (depression|anxiety)\b",
    ),
    ("hiv", r"艾滋|\bHIV\b|\bAIDS\b"),
    ("hepatitis", r"(?i)乙肝|丙肝|肝炎|\bhepatitis\b"),
    (
        "stroke",
        r"(?i)中风|脑卒中|脑梗|\bhad a stroke\b|\bsuffered a stroke\b",
    ),
    ("epilepsy", r"(?i)癫痫|\bepilep(sy|tic)\b"),
    (
        "dementia",
        r"(?i)痴呆|阿尔茨海默|\bdementia\b|\balzheimer'?s\b",
    ),
    ("schizophrenia", r"(?i)精神分裂|\bschizophreni(a|c)\b"),
    (
        "kidney disease",
        r"(?i)肾衰|尿毒症|透析|\bkidney (failure|disease)\b|\bdialysis\b",
    ),
    ("pregnancy", r"(?i)怀孕|孕期|\bpregnan(t|cy)\b"),
];

static PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    CONDITIONS
        .iter()
        .map(|(name, pattern)| (*name, re(pattern)))
        .collect()
});

/// One regex of every condition's words, to rule most texts out in one pass.
static ANY: LazyLock<Regex> = LazyLock::new(|| {
    re(&CONDITIONS
        .iter()
        .map(|(_, p)| format!("(?:{p})"))
        .collect::<Vec<_>>()
        .join("|"))
});

/// The health conditions `text` names, by name, each once, in the order of [`CONDITIONS`].
pub fn conditions_in(text: &str) -> Vec<&'static str> {
    if !ANY.is_match(text) {
        return Vec::new();
    }
    PATTERNS
        .iter()
        .filter(|(_, re)| re.is_match(text))
        .map(|(name, _)| *name)
        .collect()
}

/// Whether `text` names a health condition.
pub fn names_condition(text: &str) -> bool {
    ANY.is_match(text)
}

static AGE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)我(?:今年|现在|已经|都)?\s*([0-9]{1,3}|[一二三四五六七八九十百]{1,4})\s*(?:岁|周岁)|(?:我的)?(?:年龄|岁数)(?:是|为|:|：)?\s*([0-9]{1,3})|\b(?:i'?m|i am) (\d{1,3}) (?:years old|yrs old|y/?o)\b|\bmy age is (\d{1,3})\b|\bi turned (\d{1,3})\b",
    )
});

/// The age a user gives of themself, 1 to 120.
pub fn age_in(text: &str) -> Option<u32> {
    let c = AGE.captures(text)?;
    let word = (1..=5).find_map(|i| c.get(i))?.as_str();
    let age = word.parse().ok().or_else(|| chinese_number(word))?;
    (1..=120).contains(&age).then_some(age)
}

/// A Chinese number below 200 (三十五, 十八, 一百零二).
fn chinese_number(word: &str) -> Option<u32> {
    let digit = |c: char| "零一二三四五六七八九".find(c).map(|i| i as u32 / 3);
    let mut total = 0;
    let mut current = 0;
    for c in word.chars() {
        match c {
            '百' => {
                total += current.max(1) * 100;
                current = 0;
            }
            '十' => {
                total += current.max(1) * 10;
                current = 0;
            }
            c => current = digit(c)?,
        }
    }
    Some(total + current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_named_in_one_word_whatever_the_language() {
        assert_eq!(
            conditions_in("医生说我是肺癌早期，还有高血压"),
            ["cancer", "hypertension"]
        );
        assert_eq!(
            conditions_in("I was diagnosed with diabetes last year"),
            ["diabetes"]
        );
        assert_eq!(conditions_in("He has AIDS"), ["hiv"]);
        assert_eq!(conditions_in("我没有高血压"), ["hypertension"]);
        for plain in [
            "My hearing aids need new batteries",
            "Each brush stroke carries a part of me",
            "I felt some anxiety about the launch",
            "帮我预约明天体检",
            "cancel my plan",
        ] {
            assert!(conditions_in(plain).is_empty(), "{plain}");
            assert!(!names_condition(plain), "{plain}");
        }
    }

    #[test]
    fn the_age_a_user_gives_of_themself_is_read_in_both_languages() {
        for (text, age) in [
            ("我今年35岁，有高血压", Some(35)),
            ("我三十五岁", Some(35)),
            ("年龄：42", Some(42)),
            ("I'm 67 years old and diabetic", Some(67)),
            ("my age is 29", Some(29)),
            ("I'm 5 minutes away", None),
            ("我女儿5岁", None),
            ("我今年300岁", None),
        ] {
            assert_eq!(age_in(text), age, "{text}");
        }
    }
}
