//! What a write computes before its transaction: what a turn's texts give (entities,
//! anchors, personal-data level, what the memory model forms), embeddings, from the node's
//! pool, of the topics it may compare, and (without the pipeline) of the texts it may store;
//! and a query's embedding for reads.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use engram_storage::Result as StorageResult;
use engram_storage::data::UserData;
use engram_storage::types::{
    AnchorKind, Embedding, MemoryKind, PendingInference, PiiLevel, Timestamp, Trigger,
};

use super::UserState;
use crate::embed::{Fallback, QueryVector};
use crate::error::Result;
use crate::model::conflict::record_topic;
use crate::model::entities::EntityExtractor;
use crate::model::formation::{
    Preference, TurnForm, clarification_text, normalise_preference, profile,
};
use crate::model::pii;
use crate::model::policy::{ASSISTANT_TEXT_CAP, REPEATED_CHOICE_THRESHOLD};
use crate::model::text::truncate_chars;
use crate::request::user::TurnRequest;

/// What a write computed before its transaction: embeddings of the texts it may store and of
/// the topics it may compare. Empty when the node does not embed.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// The model of the vectors (`None`: the node does not embed).
    pub model: Option<String>,
    /// Passage embeddings, by text (none when the pipeline embeds them).
    pub vectors: HashMap<String, Vec<f32>>,
    /// Whether texts without a vector here are queued for the pipeline (in the write's own
    /// transaction) rather than left without one.
    pub write_behind: bool,
    /// Embeddings of topic phrases ([`topic_phrase`]), by normalised topic (shared with the
    /// node's cache and the user's actor).
    pub topics: HashMap<String, Arc<[f32]>>,
    /// The cosine above which two topics are the same topic.
    pub topic_threshold: f32,
    /// Whether the write queues a message for distillation (the distillation lane is told
    /// after the commit).
    pub distil_queued: bool,
}

impl Prepared {
    /// Whether two normalised topics are the same topic: equal, or their phrases' embeddings
    /// are closer than the model's threshold.
    pub fn same_topic(&self, a: &str, b: &str) -> bool {
        a == b
            || match (self.topics.get(a), self.topics.get(b)) {
                (Some(x), Some(y)) => {
                    x.iter().zip(y.iter()).map(|(p, q)| p * q).sum::<f32>() > self.topic_threshold
                }
                (Some(_) | None, Some(_) | None) => false,
            }
    }

    /// Stores the embedding of `text` as `memory_id`'s; or, with the pipeline, removes the
    /// vector of an earlier text and queues `text` for embedding; or removes a stale vector
    /// when there is none (the text changed on a node that does not embed).
    pub(super) fn store(
        &self,
        u: &mut UserData<'_>,
        kind: MemoryKind,
        memory_id: &str,
        text: &str,
        now: Timestamp,
    ) -> StorageResult<()> {
        match (&self.model, self.vectors.get(text)) {
            (Some(model), Some(vector)) => u.put_embedding(
                memory_id,
                &Embedding {
                    model: model.clone(),
                    vector: vector.clone(),
                },
            ),
            (Some(_), None) if self.write_behind => {
                u.remove_embedding(memory_id)?;
                u.put_pending(
                    memory_id,
                    &PendingInference {
                        kind,
                        text: text.to_owned(),
                        queued_at: now,
                    },
                )
            }
            (Some(_) | None, Some(_) | None) => u.remove_embedding(memory_id),
        }
    }
}

/// What a turn's texts give, read before its transaction (some tens of microseconds for a
/// short turn, off the storage's writer thread): the entities they name, the assistant's text
/// as stored, and, for a turn that succeeded (the only kind stored), the identifiers its user
/// text gives (to anchor), their personal-data level and what the memory model forms.
#[derive(Debug, Clone)]
pub struct TurnTexts {
    /// Entities named in the user's and the assistant's texts.
    pub entities: Vec<String>,
    /// The assistant's text as stored: cut to [`ASSISTANT_TEXT_CAP`] characters.
    pub assistant_text: String,
    /// Identifiers to anchor (none for a failed turn).
    pub anchors: Vec<(AnchorKind, String)>,
    /// The personal-data level of the texts as given (`None` for a failed turn).
    pub pii_level: PiiLevel,
    /// What the memory model forms from the texts as stored (empty for a failed turn).
    pub form: TurnForm,
}

impl TurnTexts {
    /// Reads a turn's texts; of a failed turn, only what its answer reports (the entities).
    pub fn read(
        extractor: &EntityExtractor,
        user_text: &str,
        assistant_text: &str,
        success: bool,
    ) -> Self {
        let entities = extractor.extract(&format!("{user_text}\n{assistant_text}"));
        let stored = truncate_chars(assistant_text, ASSISTANT_TEXT_CAP);
        if !success {
            return Self {
                entities,
                assistant_text: stored,
                anchors: Vec::new(),
                pii_level: PiiLevel::None,
                form: TurnForm::default(),
            };
        }
        Self {
            anchors: pii::anchors_in(user_text),
            pii_level: pii::level_of([user_text, assistant_text]),
            form: TurnForm::of(user_text, &stored, &entities),
            assistant_text: stored,
            entities,
        }
    }
}

/// The phrase a normalised topic is embedded as: `chart_type` is "chart type",
/// `pref:spicy_food` is "spicy food".
pub fn topic_phrase(topic: &str) -> String {
    topic
        .strip_prefix("pref:")
        .unwrap_or(topic)
        .replace('_', " ")
}

impl UserState {
    /// Embeds, before a write's transaction, the topics it may compare (with the user's
    /// existing profile topics, through the node's cache) and, without the pipeline, the texts
    /// it may store. Nothing when the node does not embed.
    pub(super) async fn prepare(
        &mut self,
        texts: Vec<String>,
        new_topics: Vec<String>,
    ) -> Result<Prepared> {
        let Some(embedder) = self.args.services.embedder.clone() else {
            return Ok(Prepared::default());
        };
        let write_behind = self.args.services.writes_behind();
        let mut topics: Vec<String> = Vec::new();
        if !new_topics.is_empty() {
            let existing = self
                .index
                .records()
                .filter(|r| r.kind == MemoryKind::Profile)
                .filter_map(|r| record_topic(r).map(|(topic, _)| topic));
            for topic in new_topics.into_iter().chain(existing) {
                if !topics.contains(&topic) {
                    topics.push(topic);
                }
            }
        }
        let missing: Vec<String> = topics
            .iter()
            .filter(|t| !self.topics.contains_key(*t))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let phrases: Vec<String> = missing.iter().map(|t| topic_phrase(t)).collect();
            let vectors = embedder
                .cached_passages(&self.args.key.tenant, &phrases)
                .await?;
            self.topics.extend(missing.into_iter().zip(vectors));
        }
        let vectors = if write_behind {
            HashMap::new()
        } else {
            let mut texts: Vec<String> = texts.into_iter().filter(|t| !t.is_empty()).collect();
            texts.sort();
            texts.dedup();
            let vectors = embedder
                .passages(&self.args.key.tenant, texts.clone())
                .await?;
            texts.into_iter().zip(vectors).collect()
        };
        Ok(Prepared {
            distil_queued: false,
            model: Some(embedder.model_name().to_owned()),
            vectors,
            write_behind,
            topics: topics
                .into_iter()
                .filter_map(|t| self.topics.get(&t).map(|v| (t, Arc::clone(v))))
                .collect(),
            topic_threshold: embedder.topic_threshold(),
        })
    }

    /// The texts and topics a turn may store: its own text (its episodic memory), the profile
    /// memories its words state (its `form`), and those its choices reach the threshold with.
    pub(super) async fn turn_plan(
        &self,
        req: &TurnRequest,
        stored_text: &str,
        form: &TurnForm,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut texts = vec![stored_text.to_owned()];
        let mut topics = Vec::new();
        let mut formed: Vec<_> = form
            .preferences
            .iter()
            .map(|p| profile(p, Trigger::ExplicitStatement))
            .collect();
        if !req.choices.is_empty() {
            let choices = req.choices.clone();
            let counts = self
                .read(move |u| {
                    choices
                        .iter()
                        .map(|(topic, value)| u.choice_count(topic, value))
                        .collect::<engram_storage::Result<Vec<u64>>>()
                })
                .await?;
            for ((topic, value), count) in req.choices.iter().zip(counts) {
                if count + 1 >= REPEATED_CHOICE_THRESHOLD {
                    formed.push(profile(
                        &choice_preference(topic, value),
                        Trigger::RepeatedChoice,
                    ));
                }
            }
        }
        if let Some(c) = &req.clarification {
            texts.push(clarification_text(&c.question, &c.answer));
        }
        for memory in formed {
            texts.push(memory.summary_text.clone());
            if let Some(topic) = memory.topic() {
                topics.push(topic.to_owned());
            }
        }
        Ok((texts, topics))
    }

    /// The query's embedding, within the query deadline, or why the read goes on without it
    /// (`None`: the node does not embed, or there is nothing to rank).
    /// A read embedded off the actor's turn brings its vector (`asked`).
    pub(super) async fn query_vector(&mut self, query: &str) -> Option<QueryVector> {
        let embedder = self.args.services.embedder.as_ref()?;
        let asked = self.asked.take().filter(|(question, _)| question == query);
        if query.trim().is_empty() || self.index.is_empty() {
            // Nothing to rank: spare the pool.
            return None;
        }
        let vector = match asked {
            Some((_, vector)) => vector,
            None => embedder.query(&self.args.key.tenant, query).await,
        };
        if let QueryVector::Fallback(why) = &vector {
            tracing::debug!(user = %self.args.services.log_id(&self.args.key), why = why.as_str(), "query ranked without its vector");
            self.args
                .services
                .metrics
                .contexts_without_vector
                .fetch_add(1, Ordering::Relaxed);
        }
        Some(vector)
    }
}

/// The vector of a query, if it was embedded, and why not otherwise.
pub(super) fn split(
    vector: Option<QueryVector>,
) -> (Option<std::sync::Arc<[f32]>>, Option<Fallback>) {
    match vector {
        Some(QueryVector::Embedded(v)) => (Some(v), None),
        Some(QueryVector::Fallback(why)) => (None, Some(why)),
        None => (None, None),
    }
}

/// The preference a choice counts towards: its topic as given (or one found in its value
/// when the topic is empty) and its value.
pub fn choice_preference(topic: &str, value: &str) -> Preference {
    let phrase = format!("{topic}: {value}");
    let (topic, value) = if topic.is_empty() {
        normalise_preference(value)
    } else {
        (topic.to_owned(), value.to_owned())
    };
    Preference {
        topic,
        value,
        phrase,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn that succeeded gets its anchors, level and form from its texts, the assistant's
    /// cut to its cap; a failed one, which is not stored, only the entities its answer reports.
    #[test]
    fn only_a_turn_that_succeeded_is_read_whole() {
        let extractor = EntityExtractor::default();
        let user = "I prefer window seats; my passport is E12345678, for Lisbon";
        let assistant = "x".repeat(ASSISTANT_TEXT_CAP + 10);

        let read = TurnTexts::read(&extractor, user, &assistant, true);
        assert_eq!(read.assistant_text.chars().count(), ASSISTANT_TEXT_CAP);
        assert!(!read.anchors.is_empty(), "the passport number is anchored");
        assert!(read.pii_level > PiiLevel::None);
        assert_eq!(
            read.form,
            TurnForm::of(user, &read.assistant_text, &read.entities)
        );
        assert!(!read.form.summary.is_empty());

        let failed = TurnTexts::read(&extractor, user, &assistant, false);
        assert_eq!(failed.entities, read.entities);
        assert_eq!(failed.assistant_text, read.assistant_text);
        assert!(failed.anchors.is_empty());
        assert_eq!(failed.pii_level, PiiLevel::None);
        assert_eq!(failed.form, TurnForm::default());
    }
}
