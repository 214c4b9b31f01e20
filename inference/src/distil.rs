//! Intent distillation (seed design 004): rules first ([`rules`]), then the generative model
//! under a JSON schema ([`intent_schema`], [`intent_prompt`]), whose answer
//! [`parse_answer`] reads. What is done with the result (the validation gate, versions,
//! TTL) is the memory model's, in `engram-actors`.
//!
//! The model sees one message and answers a flat object: `intent_type` from the tenant's
//! types or `none`, `target` (what the intent is about, at most 24 characters), `priority`
//! and `key_reason` (at most 24 characters). Bounded strings bound the answer: at most
//! [`MAX_ANSWER_TOKENS`] tokens, so a distillation's cost is known in advance.

pub mod rules;
pub mod shots;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::constrain::Schema;

/// The intent types of a tenant that configures none (the seed's).
pub const DEFAULT_INTENT_TYPES: [&str; 4] = [
    "appointment",
    "complaint",
    "subscription_renewal",
    "subscription_cancel",
];

/// The model's answer for a message that carries no intent.
pub const NO_INTENT: &str = "none";

/// Characters the model may spend on `target` and on `key_reason`.
pub const FIELD_CHARS: usize = 24;

/// Tokens an answer takes at most: the object's fixed text, the longest type, and two
/// bounded strings (a character is at most one token; most tokens hold several).
pub const MAX_ANSWER_TOKENS: usize = 32 + 2 * FIELD_CHARS;

/// How urgent an intent is (`decision_basis.priority` in the seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// No hurry.
    Low,
    /// The default.
    Medium,
    /// Something is missing, late or not done.
    High,
}

impl Priority {
    /// The seed's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
        }
    }
}

/// What a stage found in a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Distilled {
    /// One of the tenant's types, or [`NO_INTENT`].
    pub intent_type: String,
    /// What it is about (empty when unknown).
    pub target: String,
    /// How urgent.
    pub priority: Priority,
    /// Why, in a few words.
    pub key_reason: String,
}

impl Distilled {
    /// Whether it is an intent at all.
    pub fn is_intent(&self) -> bool {
        self.intent_type != NO_INTENT
    }
}

/// The schema of the model's answer for a tenant with `types`.
pub fn intent_schema(types: &[String]) -> Schema {
    let mut options: Vec<&str> = types.iter().map(String::as_str).collect();
    options.push(NO_INTENT);
    let schema = json!({
        "type": "object",
        "properties": {
            "intent_type": {"enum": options},
            "target": {"type": "string", "maxLength": FIELD_CHARS},
            "priority": {"enum": ["low", "medium", "high"]},
            "key_reason": {"type": "string", "maxLength": FIELD_CHARS},
        },
        "required": ["intent_type", "target", "priority", "key_reason"],
    });
    // The schema is built here from non-empty names: it is always of the supported subset.
    Schema::from_json(&schema).unwrap_or_else(|err| panic!("the intent schema: {err}"))
}

/// The system prompt for a tenant with `types`: the task, what each default type means, and
/// a few examples (none of them from the evaluation set). It is the same for every message
/// of the tenant, so the decoder computes its keys and values once.
pub fn intent_prompt(types: &[String]) -> String {
    let mut described = String::new();
    for t in types {
        let meaning = match t.as_str() {
            "appointment" => "book or schedule a visit, a service call or a slot",
            "complaint" => "unhappy about a product, a delivery, a service or staff",
            "subscription_renewal" => {
                "renew, extend or keep paying for a subscription, membership, plan or contract"
            }
            "subscription_cancel" => {
                "cancel, stop or not renew a subscription, membership, plan or service"
            }
            _ => "as its name says",
        };
        described.push_str(&format!("- {t}: {meaning}\n"));
    }
    format!(
        "You read one message a customer sent to a service assistant and extract the business intent it carries, as JSON.\n\
         intent_type is one of:\n{described}- {NO_INTENT}: questions about how things work or cost, asking about the status of an earlier request, greetings, thanks, small talk, or only giving personal details\n\
         target: what the intent is about, a few words in the message's language (empty for {NO_INTENT}).\n\
         priority: high for a complaint about something missing, late, broken or not done; low for {NO_INTENT}; else medium.\n\
         key_reason: why, a few words.\n\
         Examples:\n\
         下周一帮我约个洗车 -> {{\"intent_type\": \"appointment\", \"target\": \"下周一洗车\", \"priority\": \"medium\", \"key_reason\": \"要约洗车\"}}\n\
         The heater you installed stopped working again -> {{\"intent_type\": \"complaint\", \"target\": \"heater\", \"priority\": \"high\", \"key_reason\": \"broken again\"}}\n\
         我的会员什么时候到期？ -> {{\"intent_type\": \"{NO_INTENT}\", \"target\": \"\", \"priority\": \"low\", \"key_reason\": \"询问到期时间\"}}\n\
         以后别再给我寄杂志了，订阅停掉吧 -> {{\"intent_type\": \"subscription_cancel\", \"target\": \"杂志订阅\", \"priority\": \"medium\", \"key_reason\": \"不再需要\"}}\n\
         Keep my music plan going for another year -> {{\"intent_type\": \"subscription_renewal\", \"target\": \"music plan\", \"priority\": \"medium\", \"key_reason\": \"extend a year\"}}\n\
         我报修的单子处理到哪一步了？ -> {{\"intent_type\": \"{NO_INTENT}\", \"target\": \"\", \"priority\": \"low\", \"key_reason\": \"询问旧请求进度\"}}\n\
         My new address is 12 Park Road -> {{\"intent_type\": \"{NO_INTENT}\", \"target\": \"\", \"priority\": \"low\", \"key_reason\": \"only personal details\"}}\n\
         Thanks, have a nice day -> {{\"intent_type\": \"{NO_INTENT}\", \"target\": \"\", \"priority\": \"low\", \"key_reason\": \"small talk\"}}"
    )
}

/// Characters of a turn's summary, at least and at most.
pub const SUMMARY_CHARS: (usize, usize) = (20, 60);

/// Tokens a summary's answer takes at most.
pub const MAX_SUMMARY_TOKENS: usize = 16 + SUMMARY_CHARS.1;

/// The system prompt of turn summaries.
pub fn summary_prompt() -> String {
    format!(
        "You summarise one turn of a conversation between a user and an assistant, for the assistant's memory. \
         Write one sentence of {} to {} characters, in the language of the user's message, saying what the user asked or stated and what the assistant answered. \
         Answer as JSON: {{\"summary\": \"...\"}}.",
        SUMMARY_CHARS.0, SUMMARY_CHARS.1
    )
}

/// The user message of a turn's summary.
pub fn summary_input(user_text: &str, assistant_text: &str) -> String {
    format!("user: {user_text}\nassistant: {assistant_text}")
}

/// The schema of a summary's answer.
pub fn summary_schema() -> Schema {
    let schema = json!({
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": SUMMARY_CHARS.0, "maxLength": SUMMARY_CHARS.1},
        },
        "required": ["summary"],
    });
    Schema::from_json(&schema).unwrap_or_else(|err| panic!("the summary schema: {err}"))
}

/// Reads a summary's answer.
pub fn parse_summary(answer: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(answer).ok()?;
    Some(value.get("summary")?.as_str()?.trim().to_owned()).filter(|s| !s.is_empty())
}

/// An answer in the layout constrained decoding writes (`{"a": "x", "b": "y"}`).
pub fn answer_text(
    intent_type: &str,
    target: &str,
    priority: Priority,
    key_reason: &str,
) -> String {
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        "{{\"intent_type\": {}, \"target\": {}, \"priority\": {}, \"key_reason\": {}}}",
        quoted(intent_type),
        quoted(target),
        quoted(priority.as_str()),
        quoted(key_reason)
    )
}

/// Reads the model's answer (constrained decoding makes it valid; anything else is `None`).
pub fn parse_answer(answer: &str) -> Option<Distilled> {
    serde_json::from_str(answer).ok()
}

/// Whether an intent of `intent_type` needs a target to pass the validation gate (a renewal,
/// a cancellation or an appointment names what it is about; a complaint may not).
pub fn needs_target(intent_type: &str) -> bool {
    matches!(
        intent_type,
        "appointment" | "subscription_renewal" | "subscription_cancel"
    )
}

/// What the stages decide together for `message`: a rule hit fixes the type (the rules are
/// precise; the model fills the target when the rule's clause is all there is); a message
/// the rules see no new intent in ([`rules::no_new_intent`]: a negation, a question after an
/// earlier request, a plain question) has none, whatever the model says; else the model's
/// answer.
pub fn combine(
    message: &str,
    rule: Option<&Distilled>,
    model: Option<&Distilled>,
) -> Option<Distilled> {
    if rule.is_none() && rules::no_new_intent(message) {
        return None;
    }
    match (rule, model) {
        (Some(rule), Some(model)) if model.intent_type == rule.intent_type => {
            let mut merged = model.clone();
            if merged.target.trim().is_empty() {
                merged.target = rule.target.clone();
            }
            if rule.priority == Priority::High {
                merged.priority = Priority::High;
            }
            Some(merged)
        }
        (Some(rule), Some(_) | None) => Some(rule.clone()),
        (None, Some(model)) => Some(model.clone()),
        (None, None) => None,
    }
}
