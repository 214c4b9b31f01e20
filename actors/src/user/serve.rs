//! How a user's actor serves a [`UserRequest`] for a [`Reader`]: who may ask what, and the
//! read policy, applied here so that every path (local, or forwarded by a peer) gets it:
//! - the reader must act for the user's tenant; operator keys serve cluster operations only;
//!   forgetting, the archive and approvals are admin-only;
//! - records and turns leave masked for non-admins ([`super::redact`]);
//! - a non-admin read that shows the user's high-PII records or turns, and every non-admin
//!   identity-anchor match, is counted by the sensitive-read breaker per (principal, user) in
//!   a fenced, sealed transaction of this actor; past the limit it is refused with
//!   [`Error::ApprovalRequired`], except contexts, which are served with those items withheld
//!   (an LLM call must not fail for it);
//! - a non-admin search or context whose query holds identifiers (ID, card, passport or
//!   mobile numbers) is counted like as many anchor matches, found or not, before it runs:
//!   a guess of a masked number costs what an anchor match costs (past the limit a search is
//!   refused, a context served with the sensitive items withheld).

use engram_storage::types::{PiiLevel, Turn};

use super::ops::{self, Prepared};
use super::reads::{PendingRerank, Reranked, Searched};
use super::validate::check_id;
use super::{UserState, access, intents, redact};
use crate::breaker::Counter;
use crate::error::{Error, Result};
use crate::model::pii;
use crate::model::text::truncate_chars;
use crate::request::user::{
    MAX_INTENT_PAGE, SearchHit, SearchResult, SessionListing, SessionMemory, TITLE_CHARS,
};
use crate::request::{Reader, UserReply, UserRequest};

/// What serving a request gives.
// Returned and matched at once, never stored: boxing every reply would cost an allocation a
// request for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Served {
    /// The reply.
    Reply(UserReply),
    /// A search's candidates for the reranker, off the actor.
    Rerank(Box<PendingRerank>),
}

impl UserState {
    /// Serves `request` for `reader`: its reply, or a search's candidates to rerank off the
    /// actor (answered by [`UserState::serve_reranked`] when they come back).
    pub(super) async fn serve(&mut self, reader: &Reader, request: UserRequest) -> Result<Served> {
        self.admit(reader, &request)?;
        self.caller.clone_from(&reader.principal);
        Ok(Served::Reply(match request {
            UserRequest::Turn(req) => UserReply::Turn(self.turn(req).await?),
            UserRequest::Feedback(req) => UserReply::Feedback(self.feedback(req).await?),
            UserRequest::Context(query) => {
                let session = query
                    .session_id
                    .clone()
                    .unwrap_or_else(|| super::ops::DEFAULT_SESSION.to_owned());
                let ctx = self.context(reader, query).await?;
                let now = self.args.services.clock.now();
                self.accessed.note(access::shown_in(&ctx), now);
                self.used
                    .note(&session, super::promote::candidates_shown(&ctx), now);
                UserReply::Context(ctx)
            }
            UserRequest::Search(query) => {
                // Every guess counts, found or not, before the index is looked at.
                self.breaker().guard_guesses(reader, &query.query).await?;
                match self.search(query).await? {
                    Searched::Done(result) => {
                        UserReply::Search(self.answer_search(reader, result).await?)
                    }
                    Searched::Rerank(pending) => return Ok(Served::Rerank(pending)),
                }
            }
            UserRequest::WriteMemory(req) => {
                let mut ack = self.write_memory(req).await?;
                ack.memory = redact::record(reader, ack.memory);
                UserReply::WriteMemory(ack)
            }
            UserRequest::SetStatus(req) => {
                let mut ack = self.set_status(req).await?;
                ack.memory = redact::record(reader, ack.memory);
                UserReply::SetStatus(ack)
            }
            UserRequest::ListMemories(query) => {
                let records: Vec<_> = self
                    .index
                    .records()
                    .filter(|r| query.kind.is_none_or(|k| r.kind == k))
                    .cloned()
                    .collect();
                self.breaker()
                    .guard(
                        reader,
                        records.iter().any(|r| r.pii_level == PiiLevel::High),
                    )
                    .await?;
                UserReply::ListMemories(
                    records
                        .into_iter()
                        .map(|r| redact::record(reader, r))
                        .collect(),
                )
            }
            UserRequest::ListSessions(_) => {
                let listed = self
                    .read(|u| {
                        let sessions = u.sessions()?;
                        let mut listed = Vec::with_capacity(sessions.len());
                        for session in sessions {
                            let first = u.first_turn(&session.session_id)?;
                            listed.push((session, first));
                        }
                        Ok(listed)
                    })
                    .await?;
                let firsts: Vec<Turn> = listed.iter().filter_map(|(_, t)| t.clone()).collect();
                self.breaker().guard(reader, any_high(&firsts)).await?;
                UserReply::ListSessions(
                    listed
                        .into_iter()
                        .map(|(session, first)| SessionListing {
                            session,
                            title: first.map(|t| {
                                truncate_chars(
                                    redact::turn(reader, t).user_text.trim(),
                                    TITLE_CHARS,
                                )
                            }),
                        })
                        .collect(),
                )
            }
            UserRequest::SessionMemory(query) => {
                let memory = self.session_memory(query.session, query.limit).await?;
                self.breaker()
                    .guard(reader, any_high(&memory.turns))
                    .await?;
                UserReply::SessionMemory(SessionMemory {
                    session: memory.session,
                    turns: memory
                        .turns
                        .into_iter()
                        .map(|t| redact::turn(reader, t))
                        .collect(),
                    summaries: memory
                        .summaries
                        .into_iter()
                        .map(|(seq, text)| (seq, redact::text(reader, text)))
                        .collect(),
                })
            }
            UserRequest::ClearSession(clear) => {
                let session = clear.session;
                UserReply::ClearSession(
                    self.write(&clear.request_id, Prepared::default(), None, move |u, _| {
                        ops::clear_session(u, &session)
                    })
                    .await?,
                )
            }
            UserRequest::Forget(_) => UserReply::Forget(self.forget().await?),
            UserRequest::WriteIntent(req) => UserReply::WriteIntent(self.write_intent(req).await?),
            UserRequest::Intents(query) => {
                check_id("intent_type", &query.intent_type)?;
                if !(1..=MAX_INTENT_PAGE).contains(&query.limit) {
                    return Err(Error::invalid(
                        "limit",
                        format!("must be between 1 and {MAX_INTENT_PAGE}"),
                    ));
                }
                let now = self.args.services.clock.now();
                let mut intents = self
                    .read(move |u| u.newest_intents(&query.intent_type, query.before, query.limit))
                    .await?;
                // A version past its TTL is no longer current (the sweep removes it).
                for intent in &mut intents {
                    intent.active = intents::is_current(intent, now);
                }
                UserReply::Intents(self.shown_intents(reader, intents).await?)
            }
            UserRequest::Distil(req) => UserReply::Distil(self.distil_message(req).await?),
            UserRequest::KeyIntents(query) => {
                if !(1..=intents::KEY_INTENT_TYPES.len()).contains(&query.limit) {
                    return Err(Error::invalid(
                        "limit",
                        format!("must be between 1 and {}", intents::KEY_INTENT_TYPES.len()),
                    ));
                }
                let now = self.args.services.clock.now();
                let mut found = self.read(move |u| intents::key_intents(u, now)).await?;
                found.truncate(query.limit);
                UserReply::KeyIntents(self.shown_intents(reader, found).await?)
            }
            UserRequest::Flags(_) => UserReply::Flags(self.read(|u| u.flags()).await?),
            UserRequest::ResolveConflict(req) => {
                let mut ack = self.resolve_conflict(req).await?;
                ack.memories = ack
                    .memories
                    .into_iter()
                    .map(|r| redact::record(reader, r))
                    .collect();
                UserReply::ResolveConflict(ack)
            }
            UserRequest::MatchAnchor(query) => {
                // Every well-formed attempt counts, found or not (a brute force of the hidden
                // digits is a run of misses), before the anchors are looked at.
                if pii::anchor_of(&query.value).is_some() {
                    self.breaker()
                        .guard_counter(reader, true, Counter::Match)
                        .await?;
                }
                UserReply::MatchAnchor(self.match_anchor(&query.value).await?)
            }
            UserRequest::ReadArchive(query) => {
                UserReply::ReadArchive(self.read_archive(query).await?)
            }
            UserRequest::MatchArchive(query) => {
                UserReply::MatchArchive(self.match_archive(query).await?)
            }
            UserRequest::ApproveReads(_) => {
                UserReply::ApproveReads(self.breaker().approve_reads().await?)
            }
            shared @ (UserRequest::SqlLookup(_)
            | UserRequest::SqlPut(_)
            | UserRequest::SqlInvalidate(_)
            | UserRequest::RecordExample(_)
            | UserRequest::SearchExamples(_)
            | UserRequest::ListExamples(_)
            | UserRequest::ReviewExample(_)
            | UserRequest::ExampleFailed(_)
            | UserRequest::ExportExamples(_)
            | UserRequest::ImportExamples(_)
            | UserRequest::ReadSettings(_)
            | UserRequest::WriteSettings(_)
            | UserRequest::MetadataPut(_)
            | UserRequest::MetadataList(_)
            | UserRequest::MetadataRemove(_)) => {
                return Err(Error::Internal(format!(
                    "{} is for the tenant's shared sets, not a user",
                    shared.name()
                )));
            }
        }))
    }

    /// Answers a reranked search for `reader` with what is still there of its candidates.
    pub(super) async fn serve_reranked(
        &mut self,
        reader: &Reader,
        done: Reranked,
    ) -> Result<UserReply> {
        let result = self.reranked(done);
        Ok(UserReply::Search(self.answer_search(reader, result).await?))
    }

    /// A search's hits as `reader` gets them: counted by the sensitive-read breaker, their
    /// access noted, masked.
    async fn answer_search(
        &mut self,
        reader: &Reader,
        mut result: SearchResult,
    ) -> Result<SearchResult> {
        let sensitive = result
            .hits
            .iter()
            .any(|h| h.memory.pii_level == PiiLevel::High);
        self.breaker().guard(reader, sensitive).await?;
        // Served (not refused by the breaker): their access times follow in a batch.
        let now = self.args.services.clock.now();
        self.accessed
            .note(result.hits.iter().map(|h| h.memory.memory_id.as_str()), now);
        result.hits = result
            .hits
            .into_iter()
            .map(|hit| SearchHit {
                memory: redact::record(reader, hit.memory),
                score: hit.score,
            })
            .collect();
        Ok(result)
    }

    /// Whether `reader` may ask `request` of this user at all.
    fn admit(&self, reader: &Reader, request: &UserRequest) -> Result<()> {
        let admin_only = matches!(
            request,
            UserRequest::Forget(_)
                | UserRequest::ReadArchive(_)
                | UserRequest::MatchArchive(_)
                | UserRequest::ApproveReads(_)
        );
        reader.admit(&self.args.key.tenant, "the user's", request, admin_only)
    }

    /// Intent versions as `reader` may see them: counted by the sensitive-read breaker when
    /// they hold high-level personal data, and their fields masked for every reader, admins
    /// included.
    async fn shown_intents(
        &self,
        reader: &Reader,
        mut intents: Vec<engram_storage::types::Intent>,
    ) -> Result<Vec<engram_storage::types::Intent>> {
        let sensitive = intents
            .iter()
            .any(|i| crate::model::intent::fields_pii(&i.fields) == PiiLevel::High);
        self.breaker().guard(reader, sensitive).await?;
        for intent in &mut intents {
            intent.fields = crate::model::intent::masked_fields(&intent.fields);
        }
        Ok(intents)
    }
    /// A session's newest `limit` turns with their stored summaries.
    pub(super) async fn session_memory(
        &self,
        session: String,
        limit: usize,
    ) -> Result<SessionMemory> {
        check_id("session_id", &session)?;
        let wanted = session.clone();
        let found = self
            .read(move |u| match u.session(&wanted)? {
                Some(row) => {
                    let turns = u.last_turns(&wanted, limit)?;
                    let summaries = u
                        .summaries(&wanted)?
                        .into_iter()
                        .filter(|(seq, _)| turns.iter().any(|t| t.seq == *seq))
                        .map(|(seq, s)| (seq, s.text))
                        .collect();
                    Ok(Some(SessionMemory {
                        turns,
                        summaries,
                        session: row,
                    }))
                }
                None => Ok(None),
            })
            .await?;
        found.ok_or(Error::NotFound {
            what: format!("session {session}"),
        })
    }
}

fn any_high(turns: &[Turn]) -> bool {
    turns.iter().any(|t| t.pii_level == PiiLevel::High)
}
