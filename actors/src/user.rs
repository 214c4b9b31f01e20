//! The per-user memory actor: one per (tenant, user) on the node that owns the user's shard.
//! It serialises the user's writes (one message at a time), runs each write as one storage
//! transaction that also records the request id, and acknowledges only after the commit.
//!
//! Its state is a cache of storage (the user's memory records in a [`MemoryIndex`]: words,
//! embeddings and priors for hybrid retrieval), loaded when it starts and updated after each
//! commit; losing it loses nothing. Embeddings of what a write may store are computed by the
//! node's pool before the write's transaction starts. An actor idle
//! for `idle_timeout` stops itself (passivation) and is started again on next use.

pub mod api;
mod load;
pub mod ops;
pub mod prepare;
mod protected;
pub mod sweep;
mod txn;
mod validate;

use std::collections::HashMap;
use std::sync::Arc;

use engram_storage::data::UserData;
use engram_storage::model::{Intent, MemoryKind, MemoryRecord, ReviewFlag, SessionRow};
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use self::api::{
    AnchorMatch, ArchivePage, ArchiveQuery, ClearAck, ContextQuery, FeedbackAck, FeedbackRequest,
    ForgetAck, IntentAck, IntentWrite, MemoryAck, MemoryWrite, SearchHit, SearchQuery,
    SearchResult, SessionMemory, StatusChange, SweepReport, SweepScope, TurnAck, TurnRequest,
};
use self::load::load_index;
use self::ops::{DEFAULT_SESSION, Prepared, turn_text};
pub use self::validate::{
    MAX_ASSISTANT_TEXT, MAX_ID_LEN, MAX_MEMORY_TEXT, MAX_USER_TEXT, check_id,
};
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::model::context::{ContextRequest, MemoryContext, assemble};
use crate::model::formation::{Feedback, from_feedback};
use crate::model::index::{MemoryIndex, MemoryQuery};
use crate::model::pii;
use crate::model::policy::{ASSISTANT_TEXT_CAP, SESSION_IDLE_MS};
use crate::model::retrieve::SearchMode;
use crate::model::text::truncate_chars;
use crate::placement::UserKey;
use crate::services::Services;

/// Messages of a user actor.
#[derive(Debug)]
pub enum UserMsg {
    /// Append a conversation turn.
    Turn(TurnRequest, RpcReplyPort<Result<TurnAck>>),
    /// Record feedback on a turn.
    Feedback(FeedbackRequest, RpcReplyPort<Result<FeedbackAck>>),
    /// Assemble a memory context.
    Context(ContextQuery, RpcReplyPort<Result<MemoryContext>>),
    /// Search the user's memories.
    Search(SearchQuery, RpcReplyPort<Result<SearchResult>>),
    /// Write or upsert a memory record.
    WriteMemory(MemoryWrite, RpcReplyPort<Result<MemoryAck>>),
    /// Activate, suppress or delete a memory.
    SetStatus(StatusChange, RpcReplyPort<Result<MemoryAck>>),
    /// List memory records, of one kind or all.
    ListMemories(Option<MemoryKind>, RpcReplyPort<Result<Vec<MemoryRecord>>>),
    /// List sessions.
    ListSessions(RpcReplyPort<Result<Vec<SessionRow>>>),
    /// A session's newest turns.
    SessionMemory {
        /// The session.
        session: String,
        /// At most this many turns.
        limit: usize,
        /// Reply.
        reply: RpcReplyPort<Result<SessionMemory>>,
    },
    /// Delete a session's memory.
    ClearSession {
        /// Idempotency key.
        request_id: String,
        /// The session.
        session: String,
        /// Reply.
        reply: RpcReplyPort<Result<ClearAck>>,
    },
    /// Forget the user entirely, then stop.
    Forget(RpcReplyPort<Result<ForgetAck>>),
    /// Record a new version of a distilled intent.
    WriteIntent(IntentWrite, RpcReplyPort<Result<IntentAck>>),
    /// The versions of an intent type, newest first.
    Intents(String, RpcReplyPort<Result<Vec<Intent>>>),
    /// List contradictions flagged for review.
    Flags(RpcReplyPort<Result<Vec<ReviewFlag>>>),
    /// Expire, purge and apply retention (moving raw turns to the archive, purging the
    /// archive) now.
    Sweep(SweepScope, RpcReplyPort<Result<SweepReport>>),
    /// Whether the user gave an identifier (a resident ID or passport number), answered from
    /// the identity anchors (keyed hashes): the identifier is neither stored nor returned nor
    /// logged. `InvalidInput` when `value` is not one such identifier.
    MatchAnchor {
        /// The identifier, as given (white space and letter case do not matter).
        value: String,
        /// Reply.
        reply: RpcReplyPort<Result<AnchorMatch>>,
    },
    /// A page of the user's archive: raw turns moved out of their sessions by retention.
    /// Admin only: archived turns are the raw conversation, personal data unmasked; the
    /// gateway must check the caller's admin scope before sending this.
    ReadArchive(ArchiveQuery, RpcReplyPort<Result<ArchivePage>>),
    /// Fault injection for tests and chaos drills: the actor fails, and its supervisor
    /// restarts it from storage.
    Fail,
    /// Passivation check (sent by the actor's own timer).
    Tick,
}

// Local only: never sent to another node (ractor's `cluster` feature needs the impl).
impl ractor::Message for UserMsg {}

/// The user actor.
#[derive(Debug)]
pub struct UserActor;

/// What a user actor starts with.
#[derive(Debug, Clone)]
pub struct UserArgs {
    /// Whose actor it is.
    pub key: UserKey,
    /// Shared handles.
    pub services: Services,
    /// The node's directory, to leave it when passivating.
    pub directory: Arc<Directory>,
}

/// The actor's state: a cache of the user's records and their index.
pub struct UserState {
    args: UserArgs,
    index: MemoryIndex,
    /// Embeddings of the user's profile topic phrases, by normalised topic.
    topics: HashMap<String, Vec<f32>>,
    last_active: Instant,
    ticker: Option<JoinHandle<()>>,
}

/// Acknowledgements that can be replayed for a retried request id.
pub trait Replayable: Serialize + DeserializeOwned + Send + 'static {
    /// Marks the acknowledgement as the replay of an earlier request.
    fn mark_replayed(&mut self);
}

macro_rules! replayable {
    ($($t:ty),*) => {$(
        impl Replayable for $t {
            fn mark_replayed(&mut self) {
                self.replayed = true;
            }
        }
    )*};
}
replayable!(TurnAck, FeedbackAck, MemoryAck, ClearAck, IntentAck);

impl Actor for UserActor {
    type Msg = UserMsg;
    type State = UserState;
    type Arguments = UserArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<UserMsg>,
        args: UserArgs,
    ) -> Result<UserState, ActorProcessingErr> {
        let index = load_index(&args).await?;
        let tick =
            (args.services.settings.idle_timeout / 2).max(std::time::Duration::from_millis(10));
        let ticker = myself.send_interval(tick, || UserMsg::Tick);
        args.services
            .metrics
            .actors_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(user = %args.services.log_id(&args.key), records = index.len(), "user actor started");
        Ok(UserState {
            args,
            index,
            topics: HashMap::new(),
            last_active: Instant::now(),
            ticker: Some(ticker),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<UserMsg>,
        state: &mut UserState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<UserMsg>,
        msg: UserMsg,
        state: &mut UserState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(msg, UserMsg::Tick) {
            state.last_active = Instant::now();
        }
        match msg {
            UserMsg::Turn(req, reply) => {
                let result = state.turn(req).await;
                let _ = reply.send(result);
            }
            UserMsg::Feedback(req, reply) => {
                let result = state.feedback(req).await;
                let _ = reply.send(result);
            }
            UserMsg::Context(query, reply) => {
                let result = state.context(query).await;
                let _ = reply.send(result);
            }
            UserMsg::Search(query, reply) => {
                let result = state.search(query).await;
                let _ = reply.send(result);
            }
            UserMsg::WriteMemory(req, reply) => {
                let result = state.write_memory(req).await;
                let _ = reply.send(result);
            }
            UserMsg::SetStatus(req, reply) => {
                let result = state.set_status(req).await;
                let _ = reply.send(result);
            }
            UserMsg::ListMemories(kind, reply) => {
                let records = state
                    .index
                    .records()
                    .filter(|r| kind.is_none_or(|k| r.kind == k))
                    .cloned()
                    .collect();
                let _ = reply.send(Ok(records));
            }
            UserMsg::ListSessions(reply) => {
                let result = state.read(|u| u.sessions()).await;
                let _ = reply.send(result);
            }
            UserMsg::SessionMemory {
                session,
                limit,
                reply,
            } => {
                let result = state.session_memory(session, limit).await;
                let _ = reply.send(result);
            }
            UserMsg::ClearSession {
                request_id,
                session,
                reply,
            } => {
                let result = state
                    .write(&request_id, Prepared::default(), None, move |u, _| {
                        ops::clear_session(u, &session)
                    })
                    .await;
                let _ = reply.send(result);
            }
            UserMsg::Forget(reply) => {
                let result = state.forget().await;
                let forgotten = result.is_ok();
                let _ = reply.send(result);
                if forgotten {
                    // Nothing of the user may stay cached: leave the directory and stop.
                    state
                        .args
                        .directory
                        .remove(&state.args.key, myself.get_id());
                    myself.stop(Some("forgotten".into()));
                }
            }
            UserMsg::WriteIntent(req, reply) => {
                let result = state.write_intent(req).await;
                let _ = reply.send(result);
            }
            UserMsg::Intents(intent_type, reply) => {
                let result = match check_id("intent_type", &intent_type) {
                    Ok(()) => state
                        .read(move |u| u.intents(&intent_type))
                        .await
                        .map(|mut v| {
                            v.reverse();
                            v
                        }),
                    Err(err) => Err(err),
                };
                let _ = reply.send(result);
            }
            UserMsg::Flags(reply) => {
                let result = state.read(|u| u.flags()).await;
                let _ = reply.send(result);
            }
            UserMsg::Sweep(what, reply) => {
                let result = state.sweep(what).await;
                let _ = reply.send(result);
            }
            UserMsg::MatchAnchor { value, reply } => {
                let result = state.match_anchor(&value).await;
                let _ = reply.send(result);
            }
            UserMsg::ReadArchive(query, reply) => {
                let result = state.read_archive(query).await;
                let _ = reply.send(result);
            }
            UserMsg::Fail => return Err("fault injected".into()),
            UserMsg::Tick => {
                if state.last_active.elapsed() >= state.args.services.settings.idle_timeout {
                    state
                        .args
                        .directory
                        .remove(&state.args.key, myself.get_id());
                    state
                        .args
                        .services
                        .metrics
                        .passivations
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(user = %state.args.services.log_id(&state.args.key), "user actor passivated");
                    myself.stop(Some("idle".into()));
                }
            }
        }
        Ok(())
    }
}

impl UserState {
    async fn turn(&mut self, req: TurnRequest) -> Result<TurnAck> {
        validate::turn(&req)?;
        let extractor = self.args.services.extractor.clone();
        let text = format!("{}\n{}", req.user_text, req.assistant_text);
        let user_text = req.user_text.clone();
        let (entities, anchors) = tokio::task::spawn_blocking(move || {
            (extractor.extract(&text), pii::anchors_in(&user_text))
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
        let anchors = self.keyed(anchors);
        let stored_text = turn_text(
            &req.user_text,
            &truncate_chars(&req.assistant_text, ASSISTANT_TEXT_CAP),
        );
        let prepared = if req.success && self.args.services.embedder.is_some() {
            let (texts, topics) = self.turn_plan(&req, &stored_text).await?;
            self.prepare(texts, topics).await?
        } else {
            Prepared::default()
        };
        let request_id = req.request_id.clone();
        self.write(&request_id, prepared, Some(stored_text), move |u, scope| {
            ops::append_turn(u, scope, &req, &entities, &anchors)
        })
        .await
    }

    async fn feedback(&mut self, req: FeedbackRequest) -> Result<FeedbackAck> {
        validate::feedback(&req)?;
        let fb = Feedback {
            liked: req.liked,
            corrected_sql: req.corrected_sql.clone(),
            comment: req.comment.clone(),
        };
        let texts = from_feedback(&fb, None)
            .into_iter()
            .map(|m| m.summary_text)
            .collect();
        let prepared = self.prepare(texts, Vec::new()).await?;
        let cached = self.cached_records();
        let request_id = req.request_id.clone();
        self.write(&request_id, prepared, None, move |u, scope| {
            ops::feedback(u, scope, &req, &cached)
        })
        .await
    }

    fn cached_records(&self) -> Vec<MemoryRecord> {
        self.index.records().cloned().collect()
    }

    async fn write_memory(&mut self, req: MemoryWrite) -> Result<MemoryAck> {
        validate::memory_write(&req)?;
        let topics = match req.payload.get("topic").and_then(|t| t.as_str()) {
            Some(topic) if req.kind == MemoryKind::Profile => vec![topic.to_owned()],
            Some(_) | None => Vec::new(),
        };
        let prepared = self.prepare(vec![req.text.clone()], topics).await?;
        let mut anchors = pii::anchors_in(&req.text);
        for anchor in pii::anchors_in(&req.payload.to_string()) {
            if !anchors.contains(&anchor) {
                anchors.push(anchor);
            }
        }
        let anchors = self.keyed(anchors);
        let request_id = req.request_id.clone();
        self.write(&request_id, prepared, None, move |u, scope| {
            ops::write_memory(u, scope, &req, &anchors)
        })
        .await
    }

    async fn set_status(&mut self, req: StatusChange) -> Result<MemoryAck> {
        validate::status_change(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, Prepared::default(), None, move |u, scope| {
            ops::set_status(u, scope, &req)
        })
        .await
    }

    async fn write_intent(&mut self, req: IntentWrite) -> Result<IntentAck> {
        validate::intent(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, Prepared::default(), None, move |u, scope| {
            ops::write_intent(u, scope, &req)
        })
        .await
    }

    async fn context(&mut self, query: ContextQuery) -> Result<MemoryContext> {
        validate::context(&query)?;
        let session = query
            .session_id
            .clone()
            .unwrap_or_else(|| DEFAULT_SESSION.to_owned());
        let now = self.args.services.clock.now();
        let turns = self
            .read(move |u| match u.session(&session)? {
                Some(row) if now.0 - row.last_turn_at.0 <= SESSION_IDLE_MS => {
                    u.turns_from(&session, row.window_start_seq)
                }
                Some(_) | None => Ok(Vec::new()),
            })
            .await?;
        let vector = match &query.query {
            Some(q) => self.query_vector(q).await,
            None => None,
        };
        let request = ContextRequest {
            query: query.query.as_deref(),
            query_vector: vector.as_deref(),
            route: query.route,
            token_budget: query.token_budget,
            now,
            withhold_sensitive: query.withhold_sensitive,
        };
        assemble(&request, &turns, &self.index, &self.args.services.extractor)
            .map_err(|err| Error::Internal(format!("context ranking: {err}")))
    }

    async fn search(&mut self, query: SearchQuery) -> Result<SearchResult> {
        validate::search(&query)?;
        let vector = match query.mode {
            SearchMode::Bm25 => None,
            SearchMode::Dense | SearchMode::Hybrid => self.query_vector(&query.query).await,
        };
        let now = self.args.services.clock.now();
        let search = MemoryQuery {
            text: &query.query,
            vector: vector.as_deref(),
            k: query.k,
            mode: query.mode,
            now,
            kinds: &query.kinds,
            exclude_turns: &[],
            fill: false,
        };
        let hits = self
            .index
            .search(&self.args.services.extractor, &search)
            .map_err(|err| Error::Internal(format!("search: {err}")))?
            .into_iter()
            .map(|(record, score)| SearchHit {
                memory: record.clone(),
                score,
            })
            .collect();
        Ok(SearchResult {
            hits,
            embedded: vector.is_some(),
        })
    }

    async fn session_memory(&self, session: String, limit: usize) -> Result<SessionMemory> {
        check_id("session_id", &session)?;
        let wanted = session.clone();
        let found = self
            .read(move |u| match u.session(&wanted)? {
                Some(row) => Ok(Some(SessionMemory {
                    turns: u.last_turns(&wanted, limit)?,
                    session: row,
                })),
                None => Ok(None),
            })
            .await?;
        found.ok_or(Error::NotFound {
            what: format!("session {session}"),
        })
    }

    async fn forget(&mut self) -> Result<ForgetAck> {
        let (services, key) = self.scope_parts();
        let ks = services.keyspace.clone();
        let report = self
            .run(self.lease()?, move |txn| {
                UserData::new(txn, &ks, &key.tenant, &key.user).forget()
            })
            .await?;
        self.index.clear();
        self.topics.clear();
        tracing::info!(user = %self.args.services.log_id(&self.args.key), records = report.records, "user forgotten");
        Ok(ForgetAck {
            records: report.records,
            expiry_entries: report.expiry_entries,
        })
    }
}
