//! The per-user memory actor: one per (tenant, user) on the node that owns the user's shard.
//! It serialises the user's writes (one message at a time), runs each write as one storage
//! transaction that also records the request id, and acknowledges only after the commit.
//!
//! Its state is a cache of storage (the user's memory records in a [`MemoryIndex`]: words,
//! embeddings and priors for hybrid retrieval), loaded when it starts and updated after each
//! commit; losing it loses nothing. Embeddings of what a write stores follow it through the
//! node's pipeline ([`crate::pipeline`]), which hands them to the actor once stored (or, without
//! one, are computed before the write's transaction starts). An actor idle
//! for `idle_timeout` stops itself (passivation) and is started again on next use.

mod access;
mod calls;
mod guard;
pub mod intents;
mod load;
mod message;
pub mod ops;
pub mod prepare;
pub mod promote;
mod protected;
mod prune;
mod reads;
mod redact;
mod replay;
mod review;
mod serve;
pub mod summaries;
pub mod sweep;
pub(crate) mod txn;
mod validate;

use std::collections::HashMap;
use std::sync::Arc;

use engram_storage::data::UserData;
use engram_storage::types::{MemoryKind, MemoryRecord};
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

pub use self::access::FLUSH_AT;
use self::load::load_index;
use self::ops::{Prepared, TurnTexts, turn_text};
use self::reads::Reranked;
pub use self::validate::{
    MAX_ASSISTANT_TEXT, MAX_ID_LEN, MAX_MEMORY_TEXT, MAX_USER_TEXT, check_id,
};
use crate::embed::QueryVector;
use crate::error::{Error, Result};
use crate::model::formation::{Feedback, from_feedback};
use crate::model::index::MemoryIndex;
use crate::model::pii;
use crate::placement::UserKey;
use crate::request::user::{
    ClearAck, DistilAck, FeedbackAck, FeedbackRequest, ForgetAck, IntentAck, IntentWrite,
    MemoryAck, MemoryWrite, StatusChange, SweepReport, SweepScope, TurnAck, TurnRequest,
};
use crate::request::{Reader, UserReply, UserRequest};
use crate::roster::Roster;
use crate::services::Services;

/// An actor used this recently is not evicted to make room for another user.
pub const EVICTABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Messages of a user actor.
#[derive(Debug)]
pub enum UserMsg {
    /// A request through the front door ([`crate::front::Users`]), with who asks.
    Call {
        /// Who asks.
        reader: Reader,
        /// What (boxed: requests are large, the other messages small).
        request: Box<UserRequest>,
        /// Where the answer goes.
        reply: RpcReplyPort<Result<UserReply>>,
    },
    /// Expire, purge and apply retention (moving raw turns to the archive, purging the
    /// archive) now. Sent by the node's own jobs, never through the front door.
    Sweep(SweepScope, RpcReplyPort<Result<SweepReport>>),
    /// Stop now unless a request came in within [`EVICTABLE_AFTER`] (sent by the directory
    /// to the least recently used actor when the node holds as many users as it may).
    Evict,
    /// Fault injection for tests and chaos drills: the actor fails, and its supervisor
    /// restarts it from storage.
    Fail,
    /// Passivation check (sent by the actor's own timer).
    Tick,
    /// Vectors the pipeline stored for the user's records (after their commit): indexed
    /// where the record is still indexed by the same text.
    Embedded(Vec<EmbeddedText>),
    /// A read back with its question's embedding (sent by the actor's own task, which
    /// embedded it off the actor's turn), to be answered with that vector.
    Asked {
        /// Who asks.
        reader: Reader,
        /// The read.
        request: Box<UserRequest>,
        /// The question embedded.
        question: String,
        /// Its vector, or why the read goes on without one.
        vector: QueryVector,
        /// Where the answer goes.
        reply: RpcReplyPort<Result<UserReply>>,
    },
    /// A search's candidates back from the reranker (sent by the actor's own rerank task),
    /// to be answered with what is still there of them.
    Reranked {
        /// Who asked.
        reader: Reader,
        /// The reranked candidates.
        done: Box<Reranked>,
        /// Where the answer goes.
        reply: RpcReplyPort<Result<UserReply>>,
    },
}

/// A vector the pipeline stored, and the text it is the embedding of.
#[derive(Debug, Clone)]
pub struct EmbeddedText {
    /// The record.
    pub memory_id: String,
    /// The text embedded.
    pub text: String,
    /// Its embedding.
    pub vector: Vec<f32>,
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
    /// The node's table of live actors: may it stop to make room, and that it stopped.
    pub roster: Arc<dyn Roster>,
}

/// The actor's state: a cache of the user's records and their index.
pub struct UserState {
    args: UserArgs,
    index: MemoryIndex,
    /// Embeddings of the user's profile topic phrases, by normalised topic.
    topics: HashMap<String, Arc<[f32]>>,
    last_active: Instant,
    ticker: Option<JoinHandle<()>>,
    /// Whether anything of the user is stored: an actor started for reads of a user with no
    /// data stops as soon as it has answered, so reads of made-up users hold no memory.
    has_data: bool,
    /// The records this actor adds to the node's gauge of cached records.
    counted_records: usize,
    /// Memories served whose `last_accessed_at` is not written yet.
    accessed: access::Accessed,
    /// The candidates each session's last context served (promoted by the next turn).
    used: promote::Used,
    /// The key id of the request being served: idempotency entries are scoped to it.
    caller: String,
    /// When this actor last pruned the user's idempotency entries.
    pruning: prune::Pruning,
    /// The question and vector of the read being answered, embedded off the actor's turn.
    asked: Option<(String, QueryVector)>,
}

/// Turns up to this many bytes (user and assistant text) are analysed on the actor's own
/// thread; longer ones on a blocking thread.
const INLINE_EXTRACTION_BYTES: usize = 1024;

/// Acknowledgements that can be replayed for a retried request id.
pub trait Replayable: Serialize + DeserializeOwned + Clone + Send + 'static {
    /// The kind of request it acknowledges, stored with it: a request id reused for another
    /// kind of request is refused, never answered with a reply of the wrong shape.
    const KIND: &'static str;

    /// Marks the acknowledgement as the replay of an earlier request.
    fn mark_replayed(&mut self);

    /// The memory records it shows: stored without their texts, and read again as they are
    /// when it is replayed (see the `replay` module).
    fn records_mut(&mut self) -> Vec<&mut MemoryRecord> {
        Vec::new()
    }
}

macro_rules! replayable {
    ($($t:ty => $kind:literal),*) => {$(
        impl Replayable for $t {
            const KIND: &'static str = $kind;

            fn mark_replayed(&mut self) {
                self.replayed = true;
            }
        }
    )*};
}
replayable!(
    TurnAck => "turn",
    FeedbackAck => "feedback",
    ClearAck => "clear-session",
    IntentAck => "intent",
    DistilAck => "distil"
);

impl Actor for UserActor {
    type Msg = UserMsg;
    type State = UserState;
    type Arguments = UserArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<UserMsg>,
        args: UserArgs,
    ) -> Result<UserState, ActorProcessingErr> {
        let (index, has_data) = load_index(&args).await?;
        let tick =
            (args.services.settings.idle_timeout / 2).max(std::time::Duration::from_millis(10));
        let ticker = myself.send_interval(tick, || UserMsg::Tick);
        args.services
            .metrics
            .actors_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(user = %args.services.log_id(&args.key), records = index.len(), "user actor started");
        let mut state = UserState {
            args,
            index,
            topics: HashMap::new(),
            last_active: Instant::now(),
            ticker: Some(ticker),
            has_data,
            counted_records: 0,
            accessed: access::Accessed::default(),
            used: promote::Used::default(),
            caller: String::new(),
            // The first pruning waits an hour: an actor that stops sooner leaves its user's
            // old entries to the sweeps.
            pruning: prune::Pruning::started(),
            asked: None,
        };
        state.count_records();
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<UserMsg>,
        state: &mut UserState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        state.index.clear();
        state.count_records();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<UserMsg>,
        msg: UserMsg,
        state: &mut UserState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(msg, UserMsg::Tick | UserMsg::Embedded(_)) {
            state.last_active = Instant::now();
        }
        match msg {
            UserMsg::Call {
                reader,
                request,
                reply,
            } => match state.question_to_embed(&request) {
                Some((embedder, question)) => {
                    let tenant = state.args.key.tenant.clone();
                    let asked = calls::Asked {
                        reader,
                        request,
                        reply,
                    };
                    calls::embed_off_the_actor(&myself, embedder, tenant, question, asked);
                }
                None => state.answer(&myself, reader, request, reply).await,
            },
            UserMsg::Asked {
                reader,
                request,
                question,
                vector,
                reply,
            } => {
                state.asked = Some((question, vector));
                state.answer(&myself, reader, request, reply).await;
                state.asked = None;
            }
            UserMsg::Sweep(what, reply) => {
                state.flush_access(true).await;
                let result = state.sweep(what).await;
                let _ = reply.send(result);
            }
            UserMsg::Evict => {
                // Chosen as the least recently used when the node was full; a request that
                // came in since keeps it.
                if state.args.roster.evictable(&state.args.key) {
                    state.flush_access(true).await;
                    state
                        .args
                        .services
                        .metrics
                        .evictions
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    state.leave(&myself, "evicted");
                }
            }
            UserMsg::Fail => {
                // A failed actor gets no `post_stop`: take its records off the gauge now.
                state.index.clear();
                state.count_records();
                return Err("fault injected".into());
            }
            UserMsg::Embedded(vectors) => state.attach(vectors),
            UserMsg::Reranked {
                reader,
                done,
                reply,
            } => {
                let _ = reply.send(state.serve_reranked(&reader, *done).await);
                if state.accessed.len() >= access::FLUSH_AT {
                    state.flush_access(false).await;
                }
            }
            UserMsg::Tick => {
                if state.has_data
                    && state.pruning.due()
                    && let Err(err) = state.pruning.prune(&state.args).await
                {
                    tracing::warn!(user = %state.args.services.log_id(&state.args.key), error = %err, "pruning idempotency entries failed");
                }
                if state.last_active.elapsed() < state.args.services.settings.idle_timeout {
                    state.flush_access(false).await;
                } else {
                    state.flush_access(true).await;
                    state
                        .args
                        .services
                        .metrics
                        .passivations
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(user = %state.args.services.log_id(&state.args.key), "user actor passivated");
                    state.leave(&myself, "idle");
                }
            }
        }
        Ok(())
    }
}

impl UserState {
    /// The sensitive-read breaker of this user.
    fn breaker(&self) -> guard::Breaker<'_> {
        guard::Breaker::new(&self.args, self.has_data)
    }

    /// Writes the access times waiting: in a task of its own while the actor goes on
    /// serving, or (`wait`) waiting for it and the one already running.
    async fn flush_access(&mut self, wait: bool) {
        let args = &self.args;
        let target = || access::Target {
            services: args.services.clone(),
            key: args.key.clone(),
            lease: txn::lease_of(args),
        };
        if wait {
            self.accessed.flush(&mut self.index, target).await;
        } else {
            self.accessed.flush_behind(&mut self.index, target).await;
        }
    }

    /// Leaves the directory and stops (after the message being handled).
    fn leave(&mut self, myself: &ActorRef<UserMsg>, why: &str) {
        self.args.roster.left(&self.args.key, myself.get_id());
        myself.stop(Some(why.to_owned()));
    }

    /// Indexes vectors the pipeline stored (for records still indexed by the embedded text).
    fn attach(&mut self, vectors: Vec<EmbeddedText>) {
        let extractor = Arc::clone(&self.args.services.extractor);
        for v in vectors {
            if let Err(err) = self
                .index
                .attach_vector(&extractor, &v.memory_id, &v.text, v.vector)
            {
                tracing::warn!(user = %self.args.services.log_id(&self.args.key), error = %err, "embedding refused by the index");
            }
        }
    }

    /// Brings the node's gauge of cached records up to date with this actor's index.
    fn count_records(&mut self) {
        let now = self.index.len();
        let gauge = &self.args.services.metrics.cached_records;
        if now >= self.counted_records {
            gauge.fetch_add(
                (now - self.counted_records) as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        } else {
            gauge.fetch_sub(
                (self.counted_records - now) as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self.counted_records = now;
    }

    async fn turn(&mut self, req: TurnRequest) -> Result<TurnAck> {
        validate::turn(&req)?;
        let extractor = &self.args.services.extractor;
        // A short turn's texts take some tens of microseconds (33 µs for the entities and
        // anchors of 462 bytes of Chinese, 8 µs for 500 of English, release build): here,
        // sparing two thread hand-offs and the copies; a long one's go to a blocking thread (a
        // handler blocks for at most about half a millisecond).
        let mut texts = if req.user_text.len() + req.assistant_text.len() <= INLINE_EXTRACTION_BYTES
        {
            TurnTexts::read(extractor, &req.user_text, &req.assistant_text, req.success)
        } else {
            let extractor = extractor.clone();
            let (user_text, assistant_text) = (req.user_text.clone(), req.assistant_text.clone());
            let success = req.success;
            tokio::task::spawn_blocking(move || {
                TurnTexts::read(&extractor, &user_text, &assistant_text, success)
            })
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
        };
        texts.anchors = self.keyed(std::mem::take(&mut texts.anchors));
        let stored_text = turn_text(&req.user_text, &texts.assistant_text);
        let mut prepared = if req.success && self.args.services.embedder.is_some() {
            let (stored, topics) = self.turn_plan(&req, &stored_text, &texts.form).await?;
            self.prepare(stored, topics).await?
        } else {
            Prepared::default()
        };
        let plan = self.message_plan(&req.user_text);
        prepared.distil_queued = req.success && plan.as_ref().is_some_and(|p| p.queue);
        // What the session's last context served is used by a turn that succeeds.
        let used = if req.success {
            let session = req.session_id.as_deref().unwrap_or(ops::DEFAULT_SESSION);
            self.used.take(session, self.args.services.clock.now())
        } else {
            Vec::new()
        };
        let request_id = req.request_id.clone();
        let ack = self
            .write(&request_id, prepared, Some(stored_text), move |u, scope| {
                let written = ops::append_turn(u, scope, &req, &texts)?;
                let Ok((mut ack, mut changed)) = written else {
                    return Ok(written);
                };
                let (promoted, records) = promote::promote(u, scope, &used)?;
                ack.memories.extend(promoted);
                changed.extend(records);
                if let (Some(plan), Some(seq)) = (&plan, ack.seq) {
                    let entry = intents::turn_entry_id(seq);
                    let gated = intents::on_message(
                        u,
                        scope.now,
                        plan,
                        &req.user_text,
                        &entry,
                        &ack.session_id,
                        seq,
                    )?;
                    ack.intents = gated;
                    ack.distilling = plan.queue;
                    if plan.queue {
                        summaries::queue_if_due(u, scope.now, &ack.session_id)?;
                    }
                }
                Ok(Ok((ack, changed)))
            })
            .await?;
        self.count_rule_intents(&ack.intents, ack.replayed);
        Ok(ack)
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
            review::set_status(u, scope, &req)
        })
        .await
    }

    async fn write_intent(&mut self, req: IntentWrite) -> Result<IntentAck> {
        validate::intent(&req)?;
        let request_id = req.request_id.clone();
        let max_versions = self.args.services.settings.intent_versions;
        self.write(&request_id, Prepared::default(), None, move |u, scope| {
            ops::write_intent(u, scope, &req, max_versions)
        })
        .await
    }

    /// Forgets the user: every key of theirs cleared in one fenced transaction, then erased
    /// from the store's files, then dropped from this node's memory (index, caches, queues).
    async fn forget(&mut self) -> Result<ForgetAck> {
        let (services, key) = self.scope_parts();
        let ks = services.keyspace.clone();
        let report = self
            .run(self.lease()?, move |txn| {
                UserData::new(txn, &ks, &key.tenant, &key.user).forget()
            })
            .await?;
        // Answered only once no file of the store holds the pages as they were: a WAL the
        // forget's commit left behind still holds every value it cleared. A failure fails the
        // forget, and its retry (forgetting again, nothing) erases again.
        self.args.services.store.erase_history().await?;
        self.index.clear();
        self.topics.clear();
        if let Some(pipeline) = &self.args.services.pipeline {
            pipeline.forgotten(&self.args.key);
        }
        if let Some(embedder) = &self.args.services.embedder {
            // Their queries may be cached; nothing says whose an entry is.
            embedder.clear_cache();
        }
        tracing::info!(user = %self.args.services.log_id(&self.args.key), records = report.records, "user forgotten");
        Ok(ForgetAck {
            records: report.records,
            expiry_entries: report.expiry_entries,
        })
    }
}
