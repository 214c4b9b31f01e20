//! Examples for the model chosen per message: the labelled messages most like the one to
//! distil, shown to the model as earlier turns of the chat (a message and the answer it
//! should get) before the message itself. The system prompt's fixed examples say what the
//! types mean; these show how messages worded like this one are labelled (a question that
//! names a booking, an earlier request asked after, details given without a request).
//!
//! Likeness is the overlap of character bigrams weighted by their rarity in the library
//! (cosine over IDF weights): it needs no model, reads Chinese and English alike, and costs
//! microseconds against a library of a few thousand messages.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use super::{NO_INTENT, Priority, answer_text};

/// One labelled message (a line of `inference/data`'s sets), as the library and the
/// distillation benchmark read it.
#[derive(Debug, Clone, Deserialize)]
pub struct Labelled {
    /// Its id in its set.
    #[serde(default)]
    pub id: String,
    /// `zh` or `en`.
    pub lang: String,
    /// The labelled set's category (`appointment`, `question`, `past_intent`, ...).
    pub category: String,
    /// The message.
    pub message: String,
    /// Its intent type, or `none`.
    pub intent_type: String,
    /// Acceptable targets, the first the one shown.
    #[serde(default)]
    pub target_any: Vec<String>,
    /// Its priority (absent for none).
    #[serde(default)]
    pub priority: Option<Priority>,
}

impl Labelled {
    /// The answer the model should give, in the layout constrained decoding writes.
    pub fn answer(&self) -> String {
        let target = if self.intent_type == NO_INTENT {
            ""
        } else {
            self.target_any.first().map_or("", String::as_str)
        };
        let priority = if self.intent_type == NO_INTENT {
            Priority::Low
        } else {
            self.priority.unwrap_or(Priority::Medium)
        };
        answer_text(&self.intent_type, target, priority, self.reason())
    }

    /// A short reason by category, in the message's language.
    fn reason(&self) -> &'static str {
        let zh = self.lang == "zh";
        match (self.category.as_str(), zh) {
            ("appointment", false) => "wants a slot",
            ("appointment", true) => "要预约",
            ("complaint", false) => "unhappy, wants it fixed",
            ("complaint", true) => "不满意，要处理",
            ("renewal", false) => "wants to keep it going",
            ("renewal", true) => "要续订",
            ("cancellation", false) => "wants to stop it",
            ("cancellation", true) => "要取消",
            ("question", false) => "a plain question",
            ("question", true) => "普通提问",
            ("past_intent", false) => "asks after an earlier request",
            ("past_intent", true) => "询问之前的请求",
            ("personal_data", false) => "only personal details",
            ("personal_data", true) => "只提供个人信息",
            ("small_talk", false) => "small talk",
            ("small_talk", true) => "闲聊",
            (_, false) => "as labelled",
            (_, true) => "如标注",
        }
    }
}

/// Examples shown with each message by default (docs/benchmarks.md, "Examples chosen per
/// message").
pub const DEFAULT_SHOTS: usize = 2;

/// The labelled sets of `inference/data` whose errors have been read (the tuning set and
/// held-out sets 1 to 18), built in: the node's library. Later held-out sets stay out of it,
/// so that they measure it.
pub const LIBRARY: [(&str, &str); 19] = [
    ("intents.jsonl", include_str!("../../data/intents.jsonl")),
    (
        "intents_check_1.jsonl",
        include_str!("../../data/intents_check_1.jsonl"),
    ),
    (
        "intents_check_2.jsonl",
        include_str!("../../data/intents_check_2.jsonl"),
    ),
    (
        "intents_check_3.jsonl",
        include_str!("../../data/intents_check_3.jsonl"),
    ),
    (
        "intents_check_4.jsonl",
        include_str!("../../data/intents_check_4.jsonl"),
    ),
    (
        "intents_check_5.jsonl",
        include_str!("../../data/intents_check_5.jsonl"),
    ),
    (
        "intents_check_6.jsonl",
        include_str!("../../data/intents_check_6.jsonl"),
    ),
    (
        "intents_check_7.jsonl",
        include_str!("../../data/intents_check_7.jsonl"),
    ),
    (
        "intents_check_8.jsonl",
        include_str!("../../data/intents_check_8.jsonl"),
    ),
    (
        "intents_check_9.jsonl",
        include_str!("../../data/intents_check_9.jsonl"),
    ),
    (
        "intents_check_10.jsonl",
        include_str!("../../data/intents_check_10.jsonl"),
    ),
    (
        "intents_check_11.jsonl",
        include_str!("../../data/intents_check_11.jsonl"),
    ),
    (
        "intents_check_12.jsonl",
        include_str!("../../data/intents_check_12.jsonl"),
    ),
    (
        "intents_check_13.jsonl",
        include_str!("../../data/intents_check_13.jsonl"),
    ),
    (
        "intents_check_14.jsonl",
        include_str!("../../data/intents_check_14.jsonl"),
    ),
    (
        "intents_check_15.jsonl",
        include_str!("../../data/intents_check_15.jsonl"),
    ),
    (
        "intents_check_16.jsonl",
        include_str!("../../data/intents_check_16.jsonl"),
    ),
    (
        "intents_check_17.jsonl",
        include_str!("../../data/intents_check_17.jsonl"),
    ),
    (
        "intents_check_18.jsonl",
        include_str!("../../data/intents_check_18.jsonl"),
    ),
];

/// Labelled messages, searchable by likeness.
#[derive(Debug, Clone, Default)]
pub struct ShotLibrary {
    examples: Vec<Labelled>,
    /// Each example's bigrams.
    grams: Vec<Vec<u64>>,
    /// Each example's norm (over IDF weights).
    norms: Vec<f32>,
    idf: HashMap<u64, f32>,
}

impl ShotLibrary {
    /// A library of `examples`.
    pub fn new(examples: Vec<Labelled>) -> Self {
        let grams: Vec<Vec<u64>> = examples.iter().map(|e| bigrams(&e.message)).collect();
        let mut df: HashMap<u64, u32> = HashMap::new();
        for g in &grams {
            for &b in g {
                *df.entry(b).or_default() += 1;
            }
        }
        let n = grams.len() as f32;
        let idf: HashMap<u64, f32> = df
            .into_iter()
            .map(|(b, d)| (b, (1.0 + n / d as f32).ln()))
            .collect();
        let norms = grams
            .iter()
            .map(|g| g.iter().map(|b| idf[b].powi(2)).sum::<f32>().sqrt())
            .collect();
        ShotLibrary {
            examples,
            grams,
            norms,
            idf,
        }
    }

    /// A library of the JSON lines of `texts` (blank lines skipped).
    pub fn from_jsonl<'a>(
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, serde_json::Error> {
        let mut examples = Vec::new();
        for text in texts {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                examples.push(serde_json::from_str(line)?);
            }
        }
        Ok(Self::new(examples))
    }

    /// The built-in library ([`LIBRARY`]), less the set named `except` (a benchmark measuring
    /// one of them).
    pub fn builtin(except: Option<&str>) -> Self {
        Self::from_jsonl(
            LIBRARY
                .iter()
                .filter(|(name, _)| Some(*name) != except)
                .map(|(_, text)| *text),
        )
        .unwrap_or_else(|err| panic!("the built-in labelled sets: {err}"))
    }

    /// How many examples it holds.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }

    /// The `n` examples most like `message` (never one of the same text) whose type is one
    /// of `types` or none, least like first, so that the likest stands next to the message;
    /// each as (message, answer).
    pub fn nearest(&self, message: &str, n: usize, types: &[String]) -> Vec<(String, String)> {
        let query = bigrams(message);
        let weight = |b: &u64| self.idf.get(b).copied().unwrap_or(0.0);
        let norm = query.iter().map(|b| weight(b).powi(2)).sum::<f32>().sqrt();
        if n == 0 || norm == 0.0 {
            return Vec::new();
        }
        let query: HashSet<u64> = query.into_iter().collect();
        let mut scored: Vec<(f32, usize)> = self
            .grams
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let example = &self.examples[*i];
                example.message.trim() != message.trim()
                    && (example.intent_type == NO_INTENT || types.contains(&example.intent_type))
            })
            .map(|(i, g)| {
                let shared: f32 = g
                    .iter()
                    .filter(|b| query.contains(b))
                    .map(|b| weight(b).powi(2))
                    .sum();
                (shared / (norm * self.norms[i]).max(f32::MIN_POSITIVE), i)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.truncate(n);
        scored.reverse();
        scored
            .into_iter()
            .map(|(_, i)| (self.examples[i].message.clone(), self.examples[i].answer()))
            .collect()
    }
}

/// The distinct character bigrams of `text`, lower-cased, with every run of characters that
/// are neither letters nor digits read as one space.
fn bigrams(text: &str) -> Vec<u64> {
    let mut chars: Vec<char> = Vec::with_capacity(text.len() + 2);
    chars.push(' ');
    for c in text.chars().flat_map(char::to_lowercase) {
        let c = if c.is_alphanumeric() { c } else { ' ' };
        if !(c == ' ' && chars.last() == Some(&' ')) {
            chars.push(c);
        }
    }
    if chars.last() != Some(&' ') {
        chars.push(' ');
    }
    let mut grams: Vec<u64> = chars
        .windows(2)
        .filter(|w| !(w[0] == ' ' && w[1] == ' '))
        .map(|w| (u64::from(w[0]) << 32) | u64::from(w[1]))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    grams
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(lang: &str, category: &str, message: &str, intent_type: &str) -> Labelled {
        Labelled {
            id: String::new(),
            lang: lang.into(),
            category: category.into(),
            message: message.into(),
            intent_type: intent_type.into(),
            target_any: vec!["haircut".into()],
            priority: Some(Priority::Medium),
        }
    }

    /// The likest examples come last, the message itself is never its own example, and an
    /// answer is in the layout constrained decoding writes.
    #[test]
    fn the_likest_examples_stand_next_to_the_message() {
        let library = ShotLibrary::new(vec![
            labelled(
                "en",
                "appointment",
                "Can I book a haircut for Friday?",
                "appointment",
            ),
            labelled(
                "en",
                "past_intent",
                "Did my haircut booking for Friday go through?",
                NO_INTENT,
            ),
            labelled("zh", "small_talk", "谢谢你，祝你周末愉快", NO_INTENT),
            labelled("zh", "appointment", "帮我约周五下午理发", "appointment"),
        ]);
        let types = vec!["appointment".to_owned()];
        let shots = library.nearest("Did my booking for the haircut go through?", 2, &types);
        assert_eq!(shots.len(), 2);
        assert_eq!(shots[1].0, "Did my haircut booking for Friday go through?");
        assert_eq!(shots[0].0, "Can I book a haircut for Friday?");
        assert_eq!(
            shots[1].1,
            r#"{"intent_type": "none", "target": "", "priority": "low", "key_reason": "asks after an earlier request"}"#
        );
        let zh = library.nearest("周五下午能约理发吗", 1, &types);
        assert_eq!(zh[0].0, "帮我约周五下午理发");
        assert!(
            library
                .nearest("Can I book a haircut for Friday?", 4, &types)
                .iter()
                .all(|(m, _)| m != "Can I book a haircut for Friday?")
        );
        assert!(
            library.nearest("？？", 3, &types).is_empty(),
            "no bigram in common"
        );
        // A tenant without appointments is shown none.
        let other = vec!["complaint".to_owned()];
        assert!(
            library
                .nearest("周五下午能约理发吗", 4, &other)
                .iter()
                .all(|(_, answer)| answer.contains("\"none\""))
        );
    }

    /// The built-in library reads: every labelled line of the read sets, one set left out on
    /// request.
    #[test]
    fn the_built_in_library_holds_the_read_sets() {
        assert_eq!(ShotLibrary::builtin(None).len(), 186 + 18 * 84);
        assert_eq!(
            ShotLibrary::builtin(Some("intents_check_18.jsonl")).len(),
            186 + 17 * 84
        );
    }
}
