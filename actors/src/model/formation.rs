//! Trigger-based formation: which memories a turn or a piece of feedback forms, and why.
//!
//! - A turn the gateway marks successful becomes an episodic candidate (its extractive
//!   summary). Failed turns form nothing.
//! - An explicit preference statement ("I prefer line charts", "以后都按月汇总") becomes an
//!   active profile memory with a normalised topic and value.
//! - A dislike with a corrected SQL and a comment becomes a correction candidate with
//!   confidence 0.8 (as the seed forms it; contexts serve candidates, see [`super::context`]).
//! - The same choice made three times becomes a profile candidate (counted by the actor).
//! - A clarification the user accepted (the assistant's question and the chosen answer)
//!   becomes an active episodic memory: the user confirmed it.

use std::sync::LazyLock;

use engram_storage::types::{MemoryKind, MemoryStatus, Trigger, Turn};
use regex::Regex;
use serde_json::json;

use super::text::{extractive_summary, truncate_chars};

/// The namespace of memories that name none.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The scope of memories that name none.
pub const DEFAULT_SCOPE: &str = "global";

/// A memory the model wants written; the actor gives it an id, times and a TTL.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// Layer.
    pub kind: MemoryKind,
    /// Text shown in contexts.
    pub summary_text: String,
    /// Structured payload; profile memories carry `topic` and `value`.
    pub payload: serde_json::Value,
    /// Why it exists.
    pub trigger: Trigger,
    /// Initial status.
    pub status: MemoryStatus,
    /// Initial confidence.
    pub confidence: f32,
    /// Initial salience.
    pub salience: f32,
    /// Namespace ("default").
    pub namespace: String,
    /// Scope ("global").
    pub scope: String,
}

impl NewMemory {
    /// The normalised topic of a profile memory, if it has one.
    pub fn topic(&self) -> Option<&str> {
        self.payload.get("topic").and_then(|t| t.as_str())
    }

    /// The normalised value of a profile memory, if it has one.
    pub fn value(&self) -> Option<&str> {
        self.payload.get("value").and_then(|t| t.as_str())
    }
}

/// A preference found in a user's words: a topic, a canonical value, and the phrase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preference {
    /// Normalised topic (`chart_type`, `region`, `granularity`, ... or `pref:<words>`).
    pub topic: String,
    /// Canonical value within the topic.
    pub value: String,
    /// The phrase as the user said it.
    pub phrase: String,
}

static STATEMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)\b(?:i|we)\s+(?:really\s+|usually\s+|always\s+)?(?:prefer|like to see|like|want|love|use)\s+",
        r"(?P<en>[^.,;!?\n]{2,80})",
        r"|\bplease\s+(?:always\s+)?(?:use|show(?:\s+me)?)\s+(?P<en2>[^.,;!?\n]{2,80})",
        r"|(?:我|我们)(?:更|比较|一般|通常|总是)?(?:喜欢|偏好|习惯|倾向于|希望|想要)(?P<zh>[^，。！？,.!?\n]{1,40})",
        r"|以后(?:都|请|就)?(?P<zh2>(?:用|按|给我|看)[^，。！？,.!?\n]{1,40})",
    ))
    .unwrap()
});

/// Topics with canonical values, matched by keyword (English lower-case or Chinese).
/// A canonical value and the keywords that select it.
type TopicValue = (&'static str, &'static [&'static str]);

const TOPICS: &[(&str, &[TopicValue])] = &[
    (
        "chart_type",
        &[
            ("line", &["line chart", "line graph", "折线"]),
            (
                "bar",
                &["bar chart", "bar graph", "column chart", "柱状", "条形"],
            ),
            ("pie", &["pie chart", "饼图", "饼状"]),
            ("table", &["table", "表格", "明细表"]),
        ],
    ),
    (
        "granularity",
        &[
            (
                "daily",
                &["daily", "by day", "per day", "按天", "按日", "每天"],
            ),
            ("weekly", &["weekly", "by week", "per week", "按周", "每周"]),
            (
                "monthly",
                &["monthly", "by month", "per month", "按月", "每月"],
            ),
            (
                "quarterly",
                &["quarterly", "by quarter", "按季度", "每季度"],
            ),
        ],
    ),
    (
        "region",
        &[
            ("east_china", &["east china", "华东"]),
            ("south_china", &["south china", "华南"]),
            ("north_china", &["north china", "华北"]),
            ("central_china", &["central china", "华中"]),
            ("southwest", &["southwest", "西南"]),
            ("northwest", &["northwest", "西北"]),
            ("northeast", &["northeast", "东北"]),
        ],
    ),
    (
        "language",
        &[
            ("chinese", &["chinese", "中文"]),
            ("english", &["english", "英文"]),
        ],
    ),
    (
        "unit",
        &[
            ("ten_thousand_yuan", &["万元"]),
            ("yuan", &["yuan", "元"]),
            ("usd", &["dollar", "usd", "美元"]),
        ],
    ),
];

/// Normalises a preference phrase into (topic, value): a known topic by keyword, else a
/// topic of its own named after its first words (so unrelated preferences never collide).
pub fn normalise_preference(phrase: &str) -> (String, String) {
    let lower = phrase.to_lowercase();
    for (topic, values) in TOPICS {
        for (value, keywords) in *values {
            if keywords.iter().any(|k| lower.contains(k)) {
                return (topic.to_string(), value.to_string());
            }
        }
    }
    let words: Vec<&str> = lower.split_whitespace().take(3).collect();
    let key = if words.is_empty() {
        lower.trim().to_owned()
    } else {
        words.join("_")
    };
    (
        format!("pref:{}", truncate_chars(&key, 40)),
        lower.trim().to_owned(),
    )
}

/// The explicit preferences stated in `text`.
pub fn preferences(text: &str) -> Vec<Preference> {
    STATEMENT
        .captures_iter(text)
        .filter_map(|c| {
            let phrase = ["en", "en2", "zh", "zh2"]
                .iter()
                .find_map(|n| c.name(n))?
                .as_str()
                .trim();
            let (topic, value) = normalise_preference(phrase);
            Some(Preference {
                topic,
                value,
                phrase: phrase.to_owned(),
            })
        })
        .collect()
}

/// What a turn's texts form, worked out before its transaction (the rules read the texts
/// only, so the storage's one writer thread does not run them): the episodic memory's
/// summary and the preferences the user's text states.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnForm {
    /// The episodic memory's summary ([`extractive_summary`]).
    pub summary: String,
    /// The explicit preferences in the user's text.
    pub preferences: Vec<Preference>,
}

impl TurnForm {
    /// The form of a turn's texts as stored (the assistant's text cut to its cap) and the
    /// entities they name.
    pub fn of(user_text: &str, assistant_text: &str, entities: &[String]) -> Self {
        Self {
            summary: extractive_summary(user_text, assistant_text, entities),
            preferences: preferences(user_text),
        }
    }
}

/// The memories a written turn forms, from its [`TurnForm`]: nothing for a failed turn; an
/// episodic candidate for a successful one; an active profile memory per explicit
/// preference in the user's text.
pub fn from_turn(turn: &Turn, form: &TurnForm, success: bool) -> Vec<NewMemory> {
    if !success {
        return Vec::new();
    }
    let mut out = vec![NewMemory {
        kind: MemoryKind::Episodic,
        summary_text: form.summary.clone(),
        payload: json!({ "session": turn.session_id, "turn": turn.seq, "entities": turn.entities }),
        trigger: Trigger::SuccessfulTurn,
        status: MemoryStatus::Candidate,
        confidence: 0.5,
        salience: 0.5,
        namespace: DEFAULT_NAMESPACE.into(),
        scope: DEFAULT_SCOPE.into(),
    }];
    out.extend(
        form.preferences
            .iter()
            .map(|p| profile(p, Trigger::ExplicitStatement)),
    );
    out
}

/// A profile memory from a preference, active when stated explicitly and a candidate when
/// inferred from repeated choices.
pub fn profile(p: &Preference, trigger: Trigger) -> NewMemory {
    let explicit = trigger == Trigger::ExplicitStatement;
    NewMemory {
        kind: MemoryKind::Profile,
        summary_text: format!("prefers {}", truncate_chars(&p.phrase, 80)),
        payload: json!({ "topic": p.topic, "value": p.value }),
        trigger,
        status: if explicit {
            MemoryStatus::Active
        } else {
            MemoryStatus::Candidate
        },
        confidence: if explicit { 0.8 } else { 0.6 },
        salience: 0.6,
        namespace: DEFAULT_NAMESPACE.into(),
        scope: DEFAULT_SCOPE.into(),
    }
}

/// The text of an accepted clarification's memory.
pub fn clarification_text(question: &str, answer: &str) -> String {
    truncate_chars(
        &format!("clarified: {} → {}", question.trim(), answer.trim()),
        200,
    )
}

/// The episodic memory an accepted clarification forms: active (the user chose the answer),
/// confidence 0.7, indexed by its own text (not its turn's).
pub fn from_clarification(question: &str, answer: &str, turn: &Turn) -> NewMemory {
    NewMemory {
        kind: MemoryKind::Episodic,
        summary_text: clarification_text(question, answer),
        payload: json!({
            "question": question,
            "answer": answer,
            "session": turn.session_id,
            "turn": turn.seq,
        }),
        trigger: Trigger::Clarification,
        status: MemoryStatus::Active,
        confidence: 0.7,
        salience: 0.6,
        namespace: DEFAULT_NAMESPACE.into(),
        scope: DEFAULT_SCOPE.into(),
    }
}

/// Feedback on a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    /// Whether the user liked the answer.
    pub liked: bool,
    /// The SQL the user says is right.
    pub corrected_sql: Option<String>,
    /// The user's explanation.
    pub comment: Option<String>,
}

/// The memories feedback forms: a dislike with a corrected SQL and a comment becomes a
/// correction candidate, confidence 0.8 (the comment is its text, the SQL its payload).
pub fn from_feedback(feedback: &Feedback, turn: Option<&Turn>) -> Vec<NewMemory> {
    match (feedback.liked, &feedback.corrected_sql, &feedback.comment) {
        (false, Some(sql), Some(comment))
            if !sql.trim().is_empty() && !comment.trim().is_empty() =>
        {
            vec![NewMemory {
                kind: MemoryKind::Correction,
                summary_text: truncate_chars(comment.trim(), 200),
                payload: json!({
                    "corrected_sql": sql,
                    "comment": comment,
                    "turn": turn.map(|t| t.seq),
                    "entities": turn.map(|t| t.entities.clone()).unwrap_or_default(),
                }),
                trigger: Trigger::Feedback,
                status: MemoryStatus::Candidate,
                confidence: 0.8,
                salience: 0.8,
                namespace: DEFAULT_NAMESPACE.into(),
                scope: DEFAULT_SCOPE.into(),
            }]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
