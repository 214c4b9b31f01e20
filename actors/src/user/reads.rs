//! The user's ranked reads: the memory context assembled for a session and a question (with
//! the sensitive-read breaker's verdict applied inside the actor), and the memory search
//! behind the context's slots. Both embed their question within the read deadline and
//! otherwise rank by words and priors, saying so. Writes are in `user.rs` and [`super::ops`].

use super::api::{ContextQuery, SearchHit, SearchQuery, SearchResult};
use super::ops::DEFAULT_SESSION;
use super::{UserState, intents, prepare, summaries, validate};
use crate::breaker::Verdict;
use crate::error::{Error, Result};
use crate::front::Reader;
use crate::model::context::{ContextRequest, MemoryContext, assemble, is_sensitive};
use crate::model::index::MemoryQuery;
use crate::model::policy::Route;
use crate::model::retrieve::SearchMode;
use crate::rerank::{RerankFallback, is_english};
use engram_storage::model::MemoryRecord;

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
        let mut ctx = ranked(&request)?;
        let sensitive = is_sensitive(&ctx, &turns, &self.index);
        if self.count_sensitive(reader, sensitive).await? != Verdict::Allowed {
            request.withhold_sensitive = true;
            ctx = ranked(&request)?;
        }
        ctx.sensitive = sensitive;
        ctx.fallback = fallback;
        Ok(ctx)
    }

    pub(super) async fn search(&mut self, query: SearchQuery) -> Result<SearchResult> {
        validate::search(&query)?;
        let (vector, fallback) = prepare::split(match query.mode {
            SearchMode::Bm25 => None,
            SearchMode::Dense | SearchMode::Hybrid => self.query_vector(&query.query).await,
        });
        let now = self.args.services.clock.now();
        let reranker = match (query.rerank, &self.args.services.reranker) {
            (true, Some(reranker)) => Some(reranker),
            (true, None) | (false, _) => None,
        };
        // A rerank reorders the first candidates: find as many, cut to `k` after it (a
        // question the English model does not read is not reranked: `k` are enough).
        let candidates = reranker
            .filter(|_| is_english(&query.query))
            .map_or(0, |r| r.settings().candidates);
        let search = MemoryQuery {
            text: &query.query,
            vector: vector.as_deref(),
            k: query.k.max(candidates),
            mode: query.mode,
            now,
            kinds: &query.kinds,
            exclude_turns: &[],
            fill: false,
            active_only: query.active_only,
        };
        let hits = self
            .index
            .search(&self.args.services.extractor, &search)
            .map_err(|err| Error::Internal(format!("search: {err}")))?
            .into_iter()
            .map(|(record, score)| (record.clone(), score))
            .collect::<Vec<_>>();
        let (mut hits, rerank_fallback) = match (query.rerank, reranker) {
            (true, Some(reranker)) => {
                // The model reads what the memory is indexed by: an episodic memory's turn.
                let text = |memory: &MemoryRecord| {
                    self.index
                        .indexed_text(&memory.memory_id)
                        .unwrap_or(&memory.summary_text)
                        .to_owned()
                };
                reranker.rerank(&query.query, hits, text).await
            }
            (true, None) => (hits, Some(RerankFallback::Unavailable)),
            (false, _) => (hits, None),
        };
        hits.truncate(query.k);
        Ok(SearchResult {
            hits: hits
                .into_iter()
                .map(|(memory, score)| SearchHit { memory, score })
                .collect(),
            embedded: vector.is_some(),
            fallback,
            reranked: query.rerank && rerank_fallback.is_none(),
            rerank_fallback,
        })
    }
}
