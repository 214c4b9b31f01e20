//! The dynamic few-shot library: question/SQL pairs that worked, recorded by the gateway
//! (`record_success`, pending review), approved, rejected or edited by the tenant's admins,
//! and served as examples to the LLM: approved ones with similarity at least 0.95 to the
//! question, confidence at least 0.9 and at most three failures, the best three. A failure
//! report counts; past three failures, or 30 days without use, an example expires.
//!
//! Only one read-only SQL query enters the library ([`super::statement`]), and only such a
//! query is served, whenever it was stored.
//!
//! Auto-promotion (off unless the tenant turns it on): a pending example recorded successful
//! by at least three distinct keys (a key recording it again counts once; the key ids are
//! stored with the example, so the count survives restarts) whose question is at least 0.98
//! similar to an approved example of the same route, whose SQL reads the same tables (as
//! parsed), is approved without a reviewer, and the approval is written to the audit trail
//! (principal `auto-promotion`) in the same transaction.

use engram_storage::access::AuditEntry;
use engram_storage::shared::{Example, ExampleStatus};
use engram_storage::types::Timestamp;

use super::sets::id_of;
use super::sql::{question, servable_sql, sql_text};
use super::statement::read_query;
use super::{EXAMPLE_TTL_MS, MAX_FAILURES, TenantState};
use crate::error::{Error, Result};
use crate::request::Reader;
use crate::request::tenant::{
    ExampleAck, ExampleExport, ExampleFailure, ExampleHit, ExampleImport, ExampleList,
    ExampleRecord, ExampleReview, ExampleSearch, ExampleSearchReply, ImportAck, MAX_EXAMPLE_PAGE,
    MAX_EXAMPLES_SERVED, PortableExample, ReviewAction,
};
use crate::user::check_id;

/// Examples a tenant's library holds at most.
pub const MAX_EXAMPLES: usize = 50_000;
/// Least similarity of a served example to the question.
pub const SERVE_SIMILARITY: f32 = 0.95;
/// Least confidence of a served example.
pub const SERVE_CONFIDENCE: f32 = 0.9;
/// Distinct keys that must record an example successful before it may be promoted
/// automatically.
pub const PROMOTE_SUCCESSES: u32 = 3;
/// Least similarity to an approved example for an automatic promotion.
pub const PROMOTE_SIMILARITY: f32 = 0.98;
/// Approved examples nearest to a recorded one whose tables auto-promotion compares.
const PROMOTE_CANDIDATES: usize = 8;
/// The principal automatic promotions are audited under.
pub const AUTO_PROMOTION: &str = "auto-promotion";

/// The key of what an example holds: its route, question and SQL (a new example's id).
pub(super) fn content_key(example: &Example) -> String {
    id_of(&[&example.route, &example.question, &example.sql])
}

/// Whether `example` has expired at `now`: too many failures, or unused for 30 days.
pub(super) fn expired(example: &Example, now: Timestamp) -> bool {
    example.fail_count > MAX_FAILURES || now.0 - example.last_used_at.0 >= EXAMPLE_TTL_MS
}

/// Whether `example` may be served, but for its SQL (parsed for the examples found only:
/// [`servable_sql`]).
fn servable(example: &Example) -> bool {
    example.status == ExampleStatus::Approved
        && example.confidence >= SERVE_CONFIDENCE
        && example.fail_count <= MAX_FAILURES
}

fn confidence(value: f32) -> Result<f32> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(Error::invalid("confidence", "must be between 0 and 1"))
    }
}

/// An example as it leaves the actor: without its embedding.
fn shown(mut example: Example) -> Example {
    example.vector = Vec::new();
    example
}

impl TenantState {
    pub(super) async fn record_example(
        &mut self,
        reader: &Reader,
        q: ExampleRecord,
    ) -> Result<ExampleAck> {
        let normalised = question(&q.question)?;
        sql_text(&q.sql)?;
        check_id("route", &q.route)?;
        let confidence = confidence(q.confidence)?;
        let sql = q.sql.trim().to_owned();
        let id = self.example_id(&q.route, &normalised, &sql);
        let now = self.now();
        let existing = self.examples.get(&id).cloned();
        if existing.is_none() && self.examples.len() >= MAX_EXAMPLES {
            return Err(Error::invalid(
                "question",
                format!("the tenant's library holds {MAX_EXAMPLES} examples already"),
            ));
        }
        let mut example = match existing {
            Some(mut e) => {
                e.successes = e.successes.saturating_add(1);
                e.confidence = e.confidence.max(confidence);
                e.last_used_at = now;
                e.updated_at = now;
                e
            }
            None => {
                let (vector, model) = self.write_vector(&normalised, q.vector.clone()).await?;
                Example {
                    id: id.clone(),
                    question: normalised,
                    sql,
                    route: q.route,
                    confidence,
                    status: ExampleStatus::PendingReview,
                    successes: 1,
                    fail_count: 0,
                    created_at: now,
                    updated_at: now,
                    last_used_at: now,
                    reviewed_by: None,
                    vector,
                    model,
                }
            }
        };
        // The distinct keys that recorded a pending example are counted in the transaction
        // (whether auto-promotion is on or not); it is promoted when they reach the bar.
        let pending = example.status == ExampleStatus::PendingReview;
        let eligible = self.settings.auto_promote
            && pending
            && self.near_approved(&example) >= PROMOTE_SIMILARITY;
        let (recorded, tenant, key) = (
            example.clone(),
            self.tenant().to_owned(),
            reader.principal.clone(),
        );
        let written = self
            .write(&q.request_id, move |t, now| {
                let mut stored = recorded.clone();
                let keep = PROMOTE_SUCCESSES as usize;
                let keys = match pending {
                    true => t.add_example_recorder(&stored.id, &key, keep)?,
                    false => 0,
                };
                let promoted = eligible && keys >= keep;
                if promoted {
                    stored.status = ExampleStatus::Approved;
                    stored.reviewed_by = Some(AUTO_PROMOTION.to_owned());
                }
                t.put_example(&stored)?;
                if promoted {
                    let entry = AuditEntry {
                        id: format!("{:032x}", rand::random::<u128>()),
                        at: now,
                        principal: AUTO_PROMOTION.to_owned(),
                        tenant: tenant.clone(),
                        user: None,
                        action: "fewshot.auto_approve".to_owned(),
                        ids: vec![stored.id.clone()],
                        client: None,
                        outcome: 200,
                    };
                    t.audit(&entry)?;
                }
                Ok(Ok(ExampleAck {
                    example: Some(shown(stored)),
                    promoted,
                    removed: false,
                    replayed: false,
                }))
            })
            .await;
        let promoted = written.as_ref().is_ok_and(|a| a.promoted && !a.replayed);
        if promoted {
            example.status = ExampleStatus::Approved;
            example.reviewed_by = Some(AUTO_PROMOTION.to_owned());
        }
        self.settle(&written, example).await;
        if promoted {
            tracing::info!(tenant = %self.tenant(), "few-shot example approved automatically");
        }
        written
    }

    /// Brings the cache in line with a write of `example`: the example as written when this
    /// actor applied it, else what storage holds now (a replay, or an error after which the
    /// commit is unknown).
    async fn settle(&mut self, written: &Result<ExampleAck>, example: Example) {
        match written {
            Ok(ack) if !ack.replayed => self.cache_example(example),
            _ => self.refresh_examples(vec![example.id]).await,
        }
    }

    /// The id of the example holding (route, normalised question, SQL): the one that holds
    /// them now (an edited example keeps its first id), or a new example's.
    fn example_id(&self, route: &str, question: &str, sql: &str) -> String {
        let key = id_of(&[route, question, sql]);
        self.example_ids.get(&key).cloned().unwrap_or(key)
    }

    /// The highest similarity of `example`'s question to an approved example of its route
    /// whose SQL reads the same tables, among the nearest few approved examples of the route.
    fn near_approved(&self, example: &Example) -> f32 {
        // Only one read-only query reads tables; anything else never promotes.
        let Ok(tables) = read_query(&example.sql) else {
            return 0.0;
        };
        if example.vector.is_empty() {
            return 0.0;
        }
        // Only approved examples of the route whose SQL reads the same tables: a question
        // alone must not carry any SQL into the served set. The index filters on status and
        // route; the tables are parsed for the few nearest only.
        let examples = &self.examples;
        self.example_index
            .nearest(&example.vector, PROMOTE_CANDIDATES, |id| {
                id != example.id
                    && examples.get(id).is_some_and(|e| {
                        e.status == ExampleStatus::Approved && e.route == example.route
                    })
            })
            .into_iter()
            .filter(|(_, similarity)| *similarity >= PROMOTE_SIMILARITY)
            .find(|(id, _)| {
                examples
                    .get(id)
                    .is_some_and(|e| read_query(&e.sql).is_ok_and(|t| t == tables))
            })
            .map_or(0.0, |(_, s)| s)
    }

    pub(super) async fn search_examples(&mut self, q: ExampleSearch) -> Result<ExampleSearchReply> {
        let normalised = question(&q.question)?;
        check_id("route", &q.route)?;
        if !(1..=MAX_EXAMPLES_SERVED).contains(&q.limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_EXAMPLES_SERVED}"),
            ));
        }
        let now = self.now();
        let ok = |e: &Example| e.route == q.route && servable(e) && !expired(e, now);
        let (mut hits, fallback) = match self.vector_of(&normalised, q.vector.clone()).await {
            Ok(None) => (Vec::new(), None),
            Err(why) => (Vec::new(), Some(why)),
            Ok(Some(vector)) => {
                {
                    let examples = &self.examples;
                    let found = self
                        .example_index
                        .nearest(&vector, q.limit, |id| examples.get(id).is_some_and(ok))
                        .into_iter()
                        .filter(|(_, s)| *s >= SERVE_SIMILARITY)
                        .filter_map(|(id, similarity)| {
                            // The same normalised question is a perfect match, whatever the
                            // float rounding.
                            examples.get(&id).map(|e| {
                                let similarity = if e.question == normalised {
                                    1.0
                                } else {
                                    similarity.min(1.0)
                                };
                                (e.clone(), similarity)
                            })
                        })
                        .collect();
                    (found, None)
                }
            }
        };
        // Without a vector, or when the index has it below the bar, the same question still
        // finds its examples.
        if hits.is_empty() {
            let mut same: Vec<(Example, f32)> = self
                .examples
                .values()
                .filter(|e| ok(e) && e.question == normalised)
                .map(|e| (e.clone(), 1.0))
                .collect();
            same.sort_by(|a, b| a.0.id.cmp(&b.0.id));
            same.truncate(q.limit);
            hits = same;
        }
        // Only a single read-only query is served, whenever it was stored.
        hits.retain(|(example, _)| servable_sql(&example.sql));
        // Served is used: the cache knows at once, storage at the next flush.
        for (example, _) in &hits {
            if let Some(cached) = self.examples.get_mut(&example.id) {
                cached.last_used_at = now;
            }
            self.used.insert(example.id.clone(), now);
        }
        Ok(ExampleSearchReply {
            hits: hits
                .into_iter()
                .map(|(example, similarity)| ExampleHit {
                    example: shown(example),
                    similarity,
                })
                .collect(),
            fallback,
        })
    }

    pub(super) fn list_examples(&self, q: &ExampleList) -> Result<Vec<Example>> {
        if !(1..=MAX_EXAMPLE_PAGE).contains(&q.limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_EXAMPLE_PAGE}"),
            ));
        }
        let now = self.now();
        let mut listed: Vec<&Example> = self
            .examples
            .values()
            .filter(|e| !expired(e, now))
            .filter(|e| q.status.is_none_or(|s| e.status == s))
            .filter(|e| q.route.as_ref().is_none_or(|r| &e.route == r))
            .filter(|e| q.after.as_ref().is_none_or(|a| &e.id > a))
            .collect();
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(listed
            .into_iter()
            .take(q.limit)
            .cloned()
            .map(shown)
            .collect())
    }

    fn example_named(&self, id: &str) -> Result<Example> {
        check_id("example_id", id)?;
        self.examples
            .get(id)
            .filter(|e| !expired(e, self.now()))
            .cloned()
            .ok_or_else(|| Error::NotFound {
                what: format!("few-shot example {id}"),
            })
    }

    pub(super) async fn review_example(
        &mut self,
        reader: &Reader,
        q: ExampleReview,
    ) -> Result<ExampleAck> {
        let mut example = self.example_named(&q.example_id)?;
        let now = self.now();
        match q.action {
            ReviewAction::Approve => example.status = ExampleStatus::Approved,
            ReviewAction::Reject => example.status = ExampleStatus::Rejected,
            ReviewAction::Edit {
                question: None,
                sql: None,
            } => {
                return Err(Error::invalid("edit", "names neither a question nor a SQL"));
            }
            ReviewAction::Edit {
                question: text,
                sql,
            } => {
                if let Some(sql) = sql {
                    sql_text(&sql)?;
                    example.sql = sql.trim().to_owned();
                }
                if let Some(text) = text {
                    let normalised = question(&text)?;
                    if normalised != example.question {
                        let (vector, model) = self.question_vector(&normalised).await?;
                        example.question = normalised;
                        example.vector = vector;
                        example.model = model;
                    }
                }
            }
        }
        example.reviewed_by = Some(reader.principal.clone());
        example.updated_at = now;
        example.last_used_at = example.last_used_at.max(now);
        let stored = example.clone();
        let written = self
            .write(&q.request_id, move |t, _| {
                t.put_example(&stored)?;
                Ok(Ok(ExampleAck {
                    example: Some(shown(stored.clone())),
                    promoted: false,
                    removed: false,
                    replayed: false,
                }))
            })
            .await;
        self.settle(&written, example).await;
        written
    }

    pub(super) async fn example_failed(&mut self, q: ExampleFailure) -> Result<ExampleAck> {
        let mut example = self.example_named(&q.example_id)?;
        example.fail_count = example.fail_count.saturating_add(1);
        example.updated_at = self.now();
        let removed = example.fail_count > MAX_FAILURES;
        let stored = example.clone();
        let written = self
            .write(&q.request_id, move |t, _| {
                if removed {
                    t.delete_example(&stored.id)?;
                } else {
                    t.put_example(&stored)?;
                }
                Ok(Ok(ExampleAck {
                    example: (!removed).then(|| shown(stored.clone())),
                    promoted: false,
                    removed,
                    replayed: false,
                }))
            })
            .await;
        match &written {
            Ok(ack) if !ack.replayed && removed => self.uncache_example(&example.id),
            _ => self.settle(&written, example).await,
        }
        written
    }

    pub(super) fn export_examples(&self, q: &ExampleExport) -> Vec<PortableExample> {
        let now = self.now();
        let mut listed: Vec<&Example> = self
            .examples
            .values()
            .filter(|e| !expired(e, now) && q.status.is_none_or(|s| e.status == s))
            .collect();
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        listed
            .into_iter()
            .map(|e| PortableExample {
                question: e.question.clone(),
                sql: e.sql.clone(),
                route: e.route.clone(),
                confidence: e.confidence,
                status: e.status,
                successes: e.successes,
                fail_count: e.fail_count,
            })
            .collect()
    }

    pub(super) async fn import_examples(&mut self, q: ExampleImport) -> Result<ImportAck> {
        if q.examples.is_empty() || q.examples.len() > MAX_EXAMPLE_PAGE {
            return Err(Error::invalid(
                "examples",
                format!("must hold 1 to {MAX_EXAMPLE_PAGE} examples"),
            ));
        }
        let now = self.now();
        let mut prepared = Vec::with_capacity(q.examples.len());
        for (i, p) in q.examples.iter().enumerate() {
            let at = |e: Error| {
                if let Error::InvalidInput { field, reason } = e {
                    Error::invalid(&format!("examples[{i}].{field}"), reason)
                } else {
                    e
                }
            };
            let normalised = question(&p.question).map_err(at)?;
            sql_text(&p.sql).map_err(at)?;
            check_id("route", &p.route).map_err(at)?;
            confidence(p.confidence).map_err(at)?;
            if p.fail_count > MAX_FAILURES {
                return Err(Error::invalid(
                    &format!("examples[{i}].fail_count"),
                    format!("is past {MAX_FAILURES}: such an example has expired"),
                ));
            }
            let sql = p.sql.trim().to_owned();
            let id = self.example_id(&p.route, &normalised, &sql);
            prepared.push((id, normalised, sql, p));
        }
        let new: Vec<usize> = (0..prepared.len())
            .filter(|&i| {
                self.examples
                    .get(&prepared[i].0)
                    .is_none_or(|e| e.vector.is_empty())
            })
            .collect();
        let texts: Vec<String> = new.iter().map(|&i| prepared[i].1.clone()).collect();
        let (vectors, model) = self.question_vectors(&texts).await?;
        let mut fresh = std::collections::HashMap::new();
        for (i, vector) in new.into_iter().zip(vectors) {
            fresh.insert(i, vector);
        }
        let mut examples: Vec<Example> = Vec::with_capacity(prepared.len());
        let (mut created, mut updated) = (0, 0);
        for (i, (id, normalised, sql, p)) in prepared.into_iter().enumerate() {
            let existing = self.examples.get(&id);
            // The same example twice in one document: the later one stands.
            if let Some(at) = examples.iter().position(|e| e.id == id) {
                examples.remove(at);
            } else if existing.is_some() {
                updated += 1;
            } else {
                created += 1;
            }
            let (vector, model) = match (fresh.remove(&i), existing) {
                (Some(v), _) => (v, model.clone()),
                (None, Some(e)) => (e.vector.clone(), e.model.clone()),
                (None, None) => (Vec::new(), String::new()),
            };
            examples.push(Example {
                id,
                question: normalised,
                sql,
                route: p.route.clone(),
                confidence: p.confidence,
                status: p.status,
                successes: p.successes,
                fail_count: p.fail_count,
                created_at: existing.map_or(now, |e| e.created_at),
                updated_at: now,
                last_used_at: now,
                reviewed_by: Some("import".to_owned()),
                vector,
                model,
            });
        }
        if self.examples.len() + created > MAX_EXAMPLES {
            return Err(Error::invalid(
                "examples",
                format!("the library would hold more than {MAX_EXAMPLES} examples"),
            ));
        }
        let stored = examples.clone();
        let written = self
            .write(&q.request_id, move |t, _| {
                for e in &stored {
                    t.put_example(e)?;
                }
                Ok(Ok(ImportAck {
                    created,
                    updated,
                    replayed: false,
                }))
            })
            .await;
        match &written {
            Ok(ack) if !ack.replayed => {
                for example in examples {
                    self.cache_example(example);
                }
            }
            _ => {
                let ids = examples.into_iter().map(|e| e.id).collect();
                self.refresh_examples(ids).await;
            }
        }
        written
    }
}
