//! The semantic SQL cache: a question close enough to one answered within the entry's lifetime
//! (cosine similarity of the two questions' embeddings at least the tenant's or the domain's
//! threshold, 0.92 and 15 minutes by default), in the same route and domain, reuses its SQL.
//! Entries hold the normalised question, its embedding, the route and domain and the SQL text,
//! never results. A schema change of a table drops every entry whose SQL mentions it.

use engram_storage::shared::{SharedSettings, SqlEntry};

use super::TenantState;
use super::literals::literals;
use super::sets::{id_of, normalise_question};
use super::statement;
use crate::error::{Error, Result};
use crate::request::tenant::{
    InvalidateAck, MAX_QUESTION_CHARS, MAX_SQL_BYTES, SqlHit, SqlInvalidate, SqlLookup,
    SqlLookupReply, SqlPut, SqlPutAck,
};
use crate::user::check_id;

/// Candidates above the threshold a lookup checks for the question's literals.
const GUARD_CANDIDATES: usize = 5;
/// Entries a tenant's cache holds at most; a new one past it replaces the oldest.
pub const MAX_SQL_ENTRIES: usize = 100_000;
/// Deletions per transaction of an invalidation.
const INVALIDATE_BATCH: usize = 2_000;
/// Longest lifetime of an entry: a day.
pub const MAX_TTL_MS: i64 = 24 * 3_600_000;

/// Checks a question and returns it normalised.
pub(super) fn question(text: &str) -> Result<String> {
    if text.chars().count() > MAX_QUESTION_CHARS {
        return Err(Error::invalid(
            "question",
            format!("is longer than {MAX_QUESTION_CHARS} characters"),
        ));
    }
    let normalised = normalise_question(text);
    if normalised.is_empty() {
        return Err(Error::invalid("question", "must not be empty"));
    }
    Ok(normalised)
}

/// Checks a SQL text the sets would store: exactly one read-only query
/// ([`statement::read_query`]). Returns the tables it reads.
pub(super) fn sql_text(sql: &str) -> Result<Vec<String>> {
    if sql.trim().is_empty() {
        return Err(Error::invalid("sql", "must not be empty"));
    }
    if sql.len() > MAX_SQL_BYTES {
        return Err(Error::invalid(
            "sql",
            format!("is {} bytes long; at most {MAX_SQL_BYTES}", sql.len()),
        ));
    }
    statement::read_query(sql).map_err(|why| Error::invalid("sql", why.reason()))
}

/// Whether a stored SQL may be served: one read-only query (an entry stored before the sets
/// read SQL with a parser may not be).
pub(super) fn servable_sql(sql: &str) -> bool {
    statement::read_query(sql).is_ok()
}

/// Checks settings of the shared sets.
pub(super) fn check_settings(settings: &SharedSettings) -> Result<()> {
    let similarity = |field: &str, s: f32| {
        if (0.5..=1.0).contains(&s) {
            Ok(())
        } else {
            Err(Error::invalid(field, "must be between 0.5 and 1"))
        }
    };
    let ttl = |field: &str, ms: i64| {
        if (1_000..=MAX_TTL_MS).contains(&ms) {
            Ok(())
        } else {
            Err(Error::invalid(
                field,
                "must be between 1 second and 24 hours",
            ))
        }
    };
    similarity("sql_similarity", settings.sql_similarity)?;
    ttl("sql_ttl", settings.sql_ttl_ms)?;
    for (domain, d) in &settings.domains {
        check_id("domain", domain)?;
        if let Some(s) = d.similarity {
            similarity("domains.similarity", s)?;
        }
        if let Some(ms) = d.ttl_ms {
            ttl("domains.ttl", ms)?;
        }
    }
    Ok(())
}

/// An identifier of the SQL as an invalidation compares it: unquoted, lower case.
fn identifier(token: &str) -> String {
    token
        .split('.')
        .map(|part| part.trim_matches(|c| matches!(c, '"' | '`' | '[' | ']')))
        .collect::<Vec<_>>()
        .join(".")
        .to_lowercase()
}

/// Whether the identifier `id` names `table`: the same name, `table` qualified by a schema, or
/// `id` the unqualified name of a qualified `table` (`orders` for `sales.orders`).
fn names(id: &str, table: &str) -> bool {
    let last = |name: &str| name.rsplit('.').next().unwrap_or(name).to_owned();
    id == table
        || (id.ends_with(table) && id[..id.len() - table.len()].ends_with('.'))
        || (table.contains('.') && !id.contains('.') && id == last(table))
}

/// The SQL's words (identifiers, quoted or not, with their dots).
fn tokens(sql: &str) -> Vec<&str> {
    sql.split(|c: char| {
        !(c.is_alphanumeric() || matches!(c, '_' | '.' | '$' | '"' | '`' | '[' | ']'))
    })
    .filter(|t| !t.is_empty())
    .collect()
}

/// Whether the SQL of `entry` mentions `table` (lower case): among the tables it names, or
/// as any identifier, schema-qualified or not.
pub fn mentions(entry: &SqlEntry, table: &str) -> bool {
    entry.tables.iter().any(|t| names(t, table))
        || tokens(&entry.sql)
            .into_iter()
            .any(|t| names(&identifier(t), table))
}

impl TenantState {
    pub(super) async fn sql_lookup(&mut self, q: SqlLookup) -> Result<SqlLookupReply> {
        let question = question(&q.question)?;
        check_id("route", &q.route)?;
        check_id("domain", &q.domain)?;
        let now = self.now();
        let threshold = self.settings.similarity(&q.domain);
        let live = |e: &SqlEntry| e.expires_at > now && e.route == q.route && e.domain == q.domain;
        let hit = |e: &SqlEntry, similarity: f32| SqlHit {
            entry_id: e.id.clone(),
            sql: e.sql.clone(),
            question: e.question.clone(),
            similarity,
            age_ms: now.0 - e.stored_at.0,
        };
        // The same question, normalised, needs no vector.
        let exact = id_of(&[&q.route, &q.domain, &question]);
        // Only a single read-only query is served, whenever it was stored: the SQL of the
        // entry about to be served is parsed again.
        if let Some(entry) = self
            .sql
            .get(&exact)
            .filter(|e| live(e) && servable_sql(&e.sql))
        {
            return Ok(SqlLookupReply {
                hit: Some(hit(entry, 1.0)),
                threshold,
                fallback: None,
            });
        }
        let vector = match self.vector_of(&question, q.vector.clone()).await {
            Ok(Some(vector)) => vector,
            found => {
                return Ok(SqlLookupReply {
                    hit: None,
                    threshold,
                    fallback: found.err(),
                });
            }
        };
        // The nearest few above the threshold; with the literal guard, the first whose
        // numbers and time expressions are the question's.
        let sql = &self.sql;
        let wanted = self.settings.literal_guard.then(|| literals(&question));
        let best = self
            .sql_index
            .nearest(&vector, GUARD_CANDIDATES, |id| {
                sql.get(id).is_some_and(live)
            })
            .into_iter()
            .filter(|(_, similarity)| *similarity >= threshold)
            .find(|(id, _)| {
                sql.get(id).is_some_and(|e| {
                    wanted.as_ref().is_none_or(|w| literals(&e.question) == *w)
                        && servable_sql(&e.sql)
                })
            });
        Ok(SqlLookupReply {
            hit: best.and_then(|(id, similarity)| sql.get(&id).map(|e| hit(e, similarity))),
            threshold,
            fallback: None,
        })
    }

    pub(super) async fn sql_put(&mut self, q: SqlPut) -> Result<SqlPutAck> {
        let question = question(&q.question)?;
        check_id("route", &q.route)?;
        check_id("domain", &q.domain)?;
        let tables = sql_text(&q.sql)?;
        let id = id_of(&[&q.route, &q.domain, &question]);
        let (vector, model) = self.write_vector(&question, q.vector.clone()).await?;
        let now = self.now();
        let entry = SqlEntry {
            id: id.clone(),
            tables,
            question,
            route: q.route,
            domain: q.domain.clone(),
            sql: q.sql,
            vector,
            model,
            stored_at: now,
            expires_at: now.plus_millis(self.settings.ttl_ms(&q.domain)),
        };
        // A full cache makes room by its oldest entry.
        let evicted = (self.sql.len() >= MAX_SQL_ENTRIES && !self.sql.contains_key(&id))
            .then(|| {
                self.sql
                    .values()
                    .min_by_key(|e| (e.stored_at, e.id.clone()))
                    .map(|e| e.id.clone())
            })
            .flatten();
        let replaced = self.sql.contains_key(&id);
        let (stored, gone) = (entry.clone(), evicted.clone());
        let written = self
            .write(&q.request_id, move |t, _| {
                if let Some(gone) = &gone {
                    t.delete_sql_entry(gone)?;
                }
                t.put_sql_entry(&stored)?;
                Ok(Ok(SqlPutAck {
                    entry_id: stored.id.clone(),
                    tables: stored.tables.clone(),
                    expires_at: stored.expires_at,
                    replaced,
                    replayed: false,
                }))
            })
            .await;
        match &written {
            Ok(ack) if !ack.replayed => {
                if let Some(gone) = evicted {
                    self.uncache_sql(&gone);
                }
                self.cache_sql(entry);
            }
            // Not applied here: what storage holds now is what the cache serves.
            _ => self.refresh_sql(vec![id]).await,
        }
        written
    }

    pub(super) async fn sql_invalidate(&mut self, q: SqlInvalidate) -> Result<InvalidateAck> {
        let table = identifier(q.table.trim());
        if table.is_empty()
            || table.len() > 256
            || !table
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '$'))
        {
            return Err(Error::invalid(
                "table",
                "must be a table name: letters, digits and _.$, at most 256 bytes",
            ));
        }
        // A retry of a finished invalidation replays before anything is deleted.
        check_id("request_id", &q.request_id)?;
        if let Some(ack) = self.replayed_answer::<InvalidateAck>(&q.request_id).await? {
            return Ok(ack);
        }
        let doomed: Vec<String> = self
            .sql
            .values()
            .filter(|e| mentions(e, &table))
            .map(|e| e.id.clone())
            .collect();
        // Large invalidations delete in batches; the last batch records the request id (a
        // retry after a partial one removes the rest).
        let (batches, last) = match doomed.len() {
            0 => (Vec::new(), Vec::new()),
            n => {
                let cut = (n - 1) / INVALIDATE_BATCH * INVALIDATE_BATCH;
                (doomed[..cut].to_vec(), doomed[cut..].to_vec())
            }
        };
        for batch in batches.chunks(INVALIDATE_BATCH) {
            let ids = batch.to_vec();
            self.run(move |t| {
                for id in &ids {
                    t.delete_sql_entry(id)?;
                }
                Ok(())
            })
            .await?;
            for id in batch {
                self.uncache_sql(id);
            }
        }
        let before = batches.len();
        let ids = last.clone();
        let written = self
            .write(&q.request_id, move |t, _| {
                for id in &ids {
                    t.delete_sql_entry(id)?;
                }
                Ok(Ok(InvalidateAck {
                    removed: before + ids.len(),
                    replayed: false,
                }))
            })
            .await;
        match &written {
            Ok(ack) if !ack.replayed => {
                for id in &last {
                    self.uncache_sql(id);
                }
            }
            _ => self.refresh_sql(last).await,
        }
        written
    }

    /// The embedding of a normalised question, and the encoder's name (empty without one).
    pub(super) async fn question_vector(&self, question: &str) -> Result<(Vec<f32>, String)> {
        self.question_vectors(&[question.to_owned()])
            .await
            .map(|(mut v, model)| (v.pop().unwrap_or_default(), model))
    }

    /// The embeddings of normalised questions, in order.
    pub(super) async fn question_vectors(
        &self,
        questions: &[String],
    ) -> Result<(Vec<Vec<f32>>, String)> {
        match &self.args.services.embedder {
            Some(embedder) => Ok((
                embedder.questions(self.tenant(), questions).await?,
                embedder.model_name().to_owned(),
            )),
            None => Ok((vec![Vec::new(); questions.len()], String::new())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_read_only_query_is_taken_and_the_refusal_names_the_field() {
        assert_eq!(
            sql_text("SELECT a FROM Sales.Orders o JOIN customers AS c ON o.c = c.id").unwrap(),
            vec!["sales.orders", "customers"]
        );
        for sql in [
            "DROP TABLE orders; SELECT 1",
            "SELECT 1 FROM sales; DROP TABLE sales",
        ] {
            match sql_text(sql) {
                Err(Error::InvalidInput { field, reason }) => {
                    assert_eq!(field, "sql");
                    assert!(
                        !reason.contains("DROP") && !reason.contains("sales"),
                        "{reason}"
                    );
                }
                other => panic!("{sql}: {other:?}"),
            }
            assert!(!servable_sql(sql));
        }
    }

    fn entry(sql: &str) -> SqlEntry {
        SqlEntry {
            id: "e".into(),
            question: "q".into(),
            route: "r".into(),
            domain: "d".into(),
            sql: sql.into(),
            tables: statement::read_query(sql).unwrap_or_default(),
            vector: Vec::new(),
            model: String::new(),
            stored_at: engram_storage::types::Timestamp(0),
            expires_at: engram_storage::types::Timestamp(1),
        }
    }

    #[test]
    fn an_entry_mentions_the_tables_its_sql_names_and_no_others() {
        let e = entry("SELECT sum(x) FROM sales.orders WHERE day > now() - 7");
        assert!(mentions(&e, "orders"));
        assert!(mentions(&e, "sales.orders"));
        assert!(!mentions(&e, "order"));
        assert!(!mentions(&e, "customers"));
        // A sub-query's table counts.
        let e = entry("SELECT * FROM (SELECT id FROM refunds) r");
        assert!(mentions(&e, "refunds"));
        // Quoted parts, and a qualified name against an unqualified one, either way.
        let e = entry(r#"SELECT 1 FROM "Sales"."Orders" JOIN [dbo].[Refunds] ON 1 = 1"#);
        assert!(mentions(&e, "orders") && mentions(&e, "sales.orders") && mentions(&e, "refunds"));
        let e = entry("SELECT 1 FROM orders");
        assert!(mentions(&e, "sales.orders"));
        assert!(!mentions(&e, "sales.order"));
    }
}
