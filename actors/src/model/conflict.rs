//! Conflict resolution between a newly formed memory and the user's existing ones.
//!
//! - Profile: a memory on the same topic (same kind, namespace and scope, and a topic the
//!   caller's `same_topic` accepts) with the same value reinforces the existing one; with another value it
//!   supersedes it (the old one becomes suppressed with `valid_to` set) - unless the new one
//!   was only inferred (repeated choices) and the old one was stated explicitly: that
//!   contradiction is flagged for review instead.
//! - Corrections are kept side by side (listed newest first); episodic memories coexist.
//!
//! "Same topic" is decided by the caller: the user actor accepts equal normalised topics and
//! topics whose phrases' embeddings have a cosine above the model's threshold (the memory
//! model's 0.85, calibrated per model: see `ModelKind::same_topic_threshold` and
//! docs/architecture.md, "Memory model").

use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus, Trigger};

use super::formation::NewMemory;

/// What to do with a new memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Write it; nothing conflicts.
    Insert,
    /// Do not write it; confirm the existing memory instead.
    Reinforce {
        /// The memory confirmed.
        memory_id: String,
    },
    /// Write it and suppress these memories (setting their `valid_to`).
    Supersede {
        /// The memories superseded.
        memory_ids: Vec<String>,
    },
    /// Write it suppressed and flag the contradiction for review.
    Flag {
        /// The memory it contradicts.
        memory_id: String,
        /// Why it could not be resolved automatically.
        reason: &'static str,
    },
}

fn payload_field<'a>(payload: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    payload.get(field).and_then(|v| v.as_str())
}

/// The topic of a stored profile record, if it has one.
pub fn record_topic(record: &MemoryRecord) -> Option<(String, String)> {
    let payload: serde_json::Value = serde_json::from_str(&record.payload).ok()?;
    Some((
        payload_field(&payload, "topic")?.to_owned(),
        payload_field(&payload, "value")?.to_owned(),
    ))
}

/// Decides how `new` relates to `existing` (the user's records of the same kind);
/// `same_topic(new, old)` says whether two normalised topics are the same topic.
pub fn resolve(
    new: &NewMemory,
    existing: &[MemoryRecord],
    same_topic: &dyn Fn(&str, &str) -> bool,
) -> Resolution {
    if new.kind != MemoryKind::Profile {
        return Resolution::Insert;
    }
    let (Some(topic), Some(value)) = (new.topic(), new.value()) else {
        return Resolution::Insert;
    };
    let live = existing.iter().filter(|r| {
        r.kind == MemoryKind::Profile
            && r.namespace == new.namespace
            && r.scope == new.scope
            && matches!(r.status, MemoryStatus::Active | MemoryStatus::Candidate)
    });
    let mut superseded = Vec::new();
    for record in live {
        let Some((old_topic, old_value)) = record_topic(record) else {
            continue;
        };
        if !same_topic(topic, &old_topic) {
            continue;
        }
        if old_value == value {
            return Resolution::Reinforce {
                memory_id: record.memory_id.clone(),
            };
        }
        if new.trigger == Trigger::RepeatedChoice && record.trigger == Trigger::ExplicitStatement {
            return Resolution::Flag {
                memory_id: record.memory_id.clone(),
                reason: "an inferred preference contradicts one the user stated",
            };
        }
        superseded.push(record.memory_id.clone());
    }
    if superseded.is_empty() {
        Resolution::Insert
    } else {
        Resolution::Supersede {
            memory_ids: superseded,
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_storage::types::{PiiLevel, RedactionLevel, Timestamp};
    use serde_json::json;

    use super::*;
    use crate::model::formation::{Preference, profile};

    fn equal(a: &str, b: &str) -> bool {
        a == b
    }

    fn stored(id: &str, topic: &str, value: &str, trigger: Trigger) -> MemoryRecord {
        MemoryRecord {
            memory_id: id.into(),
            tenant: "t".into(),
            user_id: "u".into(),
            session_id: None,
            turn_id: None,
            trace_id: None,
            kind: MemoryKind::Profile,
            scope: "global".into(),
            namespace: "default".into(),
            summary_text: String::new(),
            payload: json!({ "topic": topic, "value": value }).to_string(),
            source_route: None,
            source_agent: None,
            confidence: 0.8,
            salience: 0.5,
            status: MemoryStatus::Active,
            pii_level: PiiLevel::None,
            redaction_level: RedactionLevel::Full,
            trigger,
            created_at: Timestamp(0),
            last_seen_at: Timestamp(0),
            last_accessed_at: None,
            expires_at: None,
            valid_from: None,
            valid_to: None,
        }
    }

    fn new(topic: &str, value: &str, trigger: Trigger) -> NewMemory {
        profile(
            &Preference {
                topic: topic.into(),
                value: value.into(),
                phrase: value.into(),
            },
            trigger,
        )
    }

    #[test]
    fn same_topic_same_value_reinforces() {
        let existing = [stored(
            "m1",
            "chart_type",
            "line",
            Trigger::ExplicitStatement,
        )];
        assert_eq!(
            resolve(
                &new("chart_type", "line", Trigger::ExplicitStatement),
                &existing,
                &equal
            ),
            Resolution::Reinforce {
                memory_id: "m1".into()
            }
        );
    }

    #[test]
    fn a_new_value_on_the_same_topic_supersedes_the_old() {
        let existing = [
            stored("m1", "chart_type", "line", Trigger::ExplicitStatement),
            stored("m2", "region", "east_china", Trigger::ExplicitStatement),
        ];
        assert_eq!(
            resolve(
                &new("chart_type", "bar", Trigger::ExplicitStatement),
                &existing,
                &equal
            ),
            Resolution::Supersede {
                memory_ids: vec!["m1".into()]
            }
        );
    }

    #[test]
    fn suppressed_memories_and_other_namespaces_do_not_conflict() {
        let mut old = stored("m1", "chart_type", "line", Trigger::ExplicitStatement);
        old.status = MemoryStatus::Suppressed;
        let mut other = stored("m2", "chart_type", "line", Trigger::ExplicitStatement);
        other.namespace = "finance".into();
        assert_eq!(
            resolve(
                &new("chart_type", "bar", Trigger::ExplicitStatement),
                &[old, other],
                &equal
            ),
            Resolution::Insert
        );
    }

    #[test]
    fn an_inferred_value_against_a_stated_one_is_flagged() {
        let existing = [stored(
            "m1",
            "chart_type",
            "line",
            Trigger::ExplicitStatement,
        )];
        assert!(matches!(
            resolve(&new("chart_type", "bar", Trigger::RepeatedChoice), &existing, &equal),
            Resolution::Flag { memory_id, .. } if memory_id == "m1"
        ));
        // A stated value overrides an inferred one.
        let inferred = [stored("m1", "chart_type", "line", Trigger::RepeatedChoice)];
        assert!(matches!(
            resolve(
                &new("chart_type", "bar", Trigger::ExplicitStatement),
                &inferred,
                &equal
            ),
            Resolution::Supersede { .. }
        ));
    }

    #[test]
    fn a_similar_topic_counts_as_the_same_topic() {
        let existing = [stored(
            "m1",
            "chart_type",
            "line",
            Trigger::ExplicitStatement,
        )];
        let similar =
            |a: &str, b: &str| a == b || matches!((a, b), ("pref:chart_style", "chart_type"));
        assert_eq!(
            resolve(
                &new("pref:chart_style", "bar", Trigger::ExplicitStatement),
                &existing,
                &similar
            ),
            Resolution::Supersede {
                memory_ids: vec!["m1".into()]
            }
        );
        assert_eq!(
            resolve(
                &new("pref:chart_style", "bar", Trigger::ExplicitStatement),
                &existing,
                &equal
            ),
            Resolution::Insert
        );
    }
}
