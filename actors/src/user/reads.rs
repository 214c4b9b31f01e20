//! The user's ranked reads: the memory context assembled for a session and a question (with
//! the sensitive-read breaker's verdict applied inside the actor), and the memory search
//! behind the context's slots. Both embed their question within the read deadline and
//! otherwise rank by words and priors, saying so. Writes are in `user.rs` and [`super::ops`].

use super::ops::DEFAULT_SESSION;
use super::{UserState, intents, prepare, summaries, validate};
use crate::breaker::Verdict;
use crate::embed::Fallback;
use crate::error::{Error, Result};
use crate::model::context::{ContextRequest, MemoryContext, assemble, is_sensitive};
use crate::model::index::MemoryQuery;
use crate::model::policy::Route;
use crate::model::retrieve::SearchMode;
use crate::request::Reader;
use crate::request::user::{ContextQuery, SearchHit, SearchQuery, SearchResult};
use crate::rerank::{RerankFallback, RerankService};
use engram_storage::types::Timestamp;

impl UserState {
    pub(super) async fn context(
        &mut self,
        reader: &Reader,
        query: ContextQuery,
    ) -> Result<MemoryContext> {
        validate::context(&query)?;
        let session = query
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION.to_owned());
        let now = self.args.services.clock.now();
        let retention_ms = self.args.services.settings.retention_ms;
        let nl2sql = query.route == Route::Nl2sqlQuery;
        let (working, summaries, key_intents, tables) = self
            .read(move |u| {
                let working = summaries::working(u, &session, now, retention_ms)?;
                // Stored summaries exist only for turns shown as summaries.
                let summaries = if working.raw_from > 0 {
                    u.summaries(&session)?
                } else {
                    Vec::new()
                };
                let tables = if nl2sql {
                    u.tenant_schema(now)?
                } else {
                    Vec::new()
                };
                Ok((working, summaries, intents::key_intents(u, now)?, tables))
            })
            .await?;
        let turns = working.turns;
        let summaries: Vec<(u64, String)> = summaries
            .into_iter()
            .map(|(seq, s)| (seq, s.text))
            .collect();
        let (vector, fallback) = prepare::split(match &query.query {
            Some(q) => self.query_vector(q).await,
            None => None,
        });
        let mut request = ContextRequest {
            query: query.query.as_deref(),
            query_vector: vector.as_deref(),
            route: query.route,
            token_budget: query.token_budget,
            now,
            withhold_sensitive: false,
            intents: &key_intents,
            summaries: &summaries,
            raw_from: Some(working.raw_from),
            tables: &tables,
        };
        let extractor = &self.args.services.extractor;
        let ranked = |request: &ContextRequest<'_>| {
            assemble(request, &turns, &self.index, extractor)
                .map_err(|err| Error::Internal(format!("context ranking: {err}")))
        };
        // The identifiers in the question count as anchor matches, found or not; past that
        // limit the context is served with the sensitive items withheld.
        let guesses = match &query.query {
            Some(q) => self.breaker().count_guesses(reader, q).await?,
            None => Verdict::Allowed,
        };
        let mut ctx = ranked(&request)?;
        let sensitive = is_sensitive(&ctx, &turns, &self.index);
        if guesses != Verdict::Allowed
            || self.breaker().count_sensitive(reader, sensitive).await? != Verdict::Allowed
        {
            request.withhold_sensitive = true;
            ctx = ranked(&request)?;
        }
        ctx.sensitive = sensitive;
        ctx.fallback = fallback;
        Ok(ctx)
    }

    /// Phase one of a search, on the actor: its hits, or its candidates when a rerank was
    /// asked for, which the actor hands to [`PendingRerank::run`] off its own turn.
    pub(super) async fn search(&mut self, query: SearchQuery) -> Result<Searched> {
        validate::search(&query)?;
        let (vector, fallback) = prepare::split(match query.mode {
            SearchMode::Bm25 => None,
            SearchMode::Dense | SearchMode::Hybrid => self.query_vector(&query.query).await,
        });
        let now = self.args.services.clock.now();
        // A rerank reorders the first candidates: find as many, cut to `k` after it (a
        // question the English model does not read is not reranked: `k` are enough).
        let (reranker, rerank_fallback) = match (query.rerank, &self.args.services.reranker) {
            (false, _) => (None, None),
            (true, None) => (None, Some(RerankFallback::Unavailable)),
            (true, Some(reranker)) => match reranker.refuses(&query.query) {
                Some(refused) => (None, Some(refused)),
                None => (Some(reranker), None),
            },
        };
        let candidates = reranker.map_or(0, |r| r.settings().candidates);
        let search = MemoryQuery {
            k: query.k.max(candidates),
            vector: vector.as_deref(),
            ..memory_query(&query, now)
        };
        let hits = self
            .index
            .search(&self.args.services.extractor, &search)
            .map_err(|err| Error::Internal(format!("search: {err}")))?;
        let embedded = vector.is_some();
        if let Some(reranker) = reranker.filter(|_| !hits.is_empty()) {
            // The model reads what the memory is indexed by: an episodic memory's turn (only
            // the candidates it reads carry their text).
            let hits = hits
                .into_iter()
                .enumerate()
                .map(|(rank, (memory, score))| {
                    let text = if rank < candidates {
                        self.index
                            .indexed_text(&memory.memory_id)
                            .unwrap_or(&memory.summary_text)
                            .to_owned()
                    } else {
                        String::new()
                    };
                    ((memory.memory_id.clone(), text), score)
                })
                .collect();
            return Ok(Searched::Rerank(Box::new(PendingRerank {
                reranker: reranker.clone(),
                tenant: self.args.key.tenant.clone(),
                query,
                hits,
                embedded,
                fallback,
            })));
        }
        Ok(Searched::Done(SearchResult {
            hits: hits
                .into_iter()
                .take(query.k)
                .map(|(memory, score)| SearchHit {
                    memory: memory.clone(),
                    score,
                })
                .collect(),
            embedded,
            fallback,
            // Nothing to reorder counts as reranked.
            reranked: query.rerank && rerank_fallback.is_none(),
            rerank_fallback,
        }))
    }

    /// Phase two of a reranked search, back on the actor: the reranked candidates that are
    /// still there and still match (a memory deleted or forgotten while the reranker read
    /// it is left out), as they are now, cut to `k`.
    pub(super) fn reranked(&self, done: Reranked) -> SearchResult {
        let now = self.args.services.clock.now();
        let filter = memory_query(&done.query, now);
        let hits = done
            .hits
            .into_iter()
            .filter_map(|(memory_id, score)| {
                let memory = self.index.found(&memory_id, &filter)?.clone();
                Some(SearchHit { memory, score })
            })
            .take(done.query.k)
            .collect();
        SearchResult {
            hits,
            embedded: done.embedded,
            fallback: done.fallback,
            reranked: done.rerank_fallback.is_none(),
            rerank_fallback: done.rerank_fallback,
        }
    }
}

/// The memory query of `query`'s filters (its words; no vector, `k` of its own).
fn memory_query(query: &SearchQuery, now: Timestamp) -> MemoryQuery<'_> {
    MemoryQuery {
        text: &query.query,
        vector: None,
        k: query.k,
        mode: query.mode,
        now,
        kinds: &query.kinds,
        exclude_turns: &[],
        fill: false,
        active_only: query.active_only,
    }
}

/// What phase one of a search gives.
pub(super) enum Searched {
    /// The answer.
    Done(SearchResult),
    /// Candidates for the reranker.
    Rerank(Box<PendingRerank>),
}

/// A search's candidates on their way to the reranker. The rerank runs in a task of its own,
/// not on the user's actor, which serves the user's other requests meanwhile (scoring 30
/// candidates takes a few hundred milliseconds on a CPU); its answer comes back to the
/// actor as [`Reranked`].
pub struct PendingRerank {
    reranker: RerankService,
    /// The user's tenant: its lane and share of the reranker's queue.
    tenant: String,
    query: SearchQuery,
    /// Best first: each candidate's memory id and the text the model reads (empty past the
    /// candidates it reads), with its score.
    hits: Vec<((String, String), f32)>,
    embedded: bool,
    fallback: Option<Fallback>,
}

impl std::fmt::Debug for PendingRerank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the question or the texts.
        f.debug_struct("PendingRerank")
            .field("candidates", &self.hits.len())
            .finish_non_exhaustive()
    }
}

impl PendingRerank {
    /// Reranks (within the reranker's deadline; past it, or when it cannot, the candidates
    /// keep their order and the answer says why).
    pub async fn run(self) -> Reranked {
        let (hits, rerank_fallback) = self
            .reranker
            .rerank_for(&self.tenant, &self.query.query, self.hits, |(_, text)| {
                text.clone()
            })
            .await;
        Reranked {
            hits: hits
                .into_iter()
                .map(|((id, _), score)| (id, score))
                .collect(),
            query: self.query,
            embedded: self.embedded,
            fallback: self.fallback,
            rerank_fallback,
        }
    }
}

/// A search's candidates as the reranker left them, for phase two on the user's actor.
pub struct Reranked {
    query: SearchQuery,
    /// Best first: memory ids with their (fused) scores.
    hits: Vec<(String, f32)>,
    embedded: bool,
    fallback: Option<Fallback>,
    rerank_fallback: Option<RerankFallback>,
}

impl std::fmt::Debug for Reranked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reranked")
            .field("hits", &self.hits.len())
            .field("rerank_fallback", &self.rerank_fallback)
            .finish_non_exhaustive()
    }
}
