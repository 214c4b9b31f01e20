//! The per-user memory actor: one per (tenant, user) on the node that owns the user's shard.
//! It serialises the user's writes (one message at a time), runs each write as one storage
//! transaction that also records the request id, and acknowledges only after the commit.
//!
//! Its state is a cache of storage (the user's memory records with their search words),
//! loaded when it starts and updated after each commit; losing it loses nothing. An actor idle
//! for `idle_timeout` stops itself (passivation) and is started again on next use.

pub mod api;
pub mod ops;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use engram_storage::data::UserData;
use engram_storage::model::{
    IdempotencyEntry, Intent, MemoryKind, MemoryRecord, ReviewFlag, SessionRow,
};
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use self::api::{
    ClearAck, ContextQuery, FeedbackAck, FeedbackRequest, ForgetAck, IntentAck, IntentWrite,
    MemoryAck, MemoryWrite, SessionMemory, StatusChange, SweepReport, SweepScope, TurnAck,
    TurnRequest,
};
use self::ops::{DEFAULT_SESSION, Outcome, WriteScope, session_rule};
pub use self::validate::{
    MAX_ASSISTANT_TEXT, MAX_ID_LEN, MAX_MEMORY_TEXT, MAX_USER_TEXT, check_id,
};
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::model::context::{ContextRequest, IndexedRecord, MemoryContext, assemble};
use crate::model::policy::SESSION_IDLE_MS;
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
    /// Expire, purge and apply retention now.
    Sweep(SweepScope, RpcReplyPort<Result<SweepReport>>),
    /// Fault injection for tests and chaos drills: the actor fails, and its supervisor
    /// restarts it from storage.
    Fail,
    /// Passivation check (sent by the actor's own timer).
    Tick,
}

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

/// The actor's state: a cache of the user's records.
pub struct UserState {
    args: UserArgs,
    records: BTreeMap<String, IndexedRecord>,
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

enum Written<T> {
    Fresh(T, Vec<MemoryRecord>),
    Replay(Vec<u8>),
    Rejected(Error),
}

impl Actor for UserActor {
    type Msg = UserMsg;
    type State = UserState;
    type Arguments = UserArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<UserMsg>,
        args: UserArgs,
    ) -> Result<UserState, ActorProcessingErr> {
        let (store, ks) = (args.services.store.clone(), args.services.keyspace.clone());
        let key = args.key.clone();
        let records = store
            .read(move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                let mut all = Vec::new();
                for kind in MemoryKind::ALL {
                    all.extend(u.records(kind)?);
                }
                Ok(all)
            })
            .await?;
        let extractor = args.services.extractor.clone();
        let records = tokio::task::spawn_blocking(move || {
            records
                .into_iter()
                .map(|r| (r.memory_id.clone(), IndexedRecord::new(r, &extractor)))
                .collect::<BTreeMap<_, _>>()
        })
        .await?;
        let tick =
            (args.services.settings.idle_timeout / 2).max(std::time::Duration::from_millis(10));
        let ticker = myself.send_interval(tick, || UserMsg::Tick);
        args.services
            .metrics
            .actors_started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(user = %args.key.log_id(), records = records.len(), "user actor started");
        Ok(UserState {
            args,
            records,
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
                    .records
                    .values()
                    .filter(|r| kind.is_none_or(|k| r.record.kind == k))
                    .map(|r| r.record.clone())
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
                    .write(&request_id, move |u, _| ops::clear_session(u, &session))
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
                    tracing::debug!(user = %state.args.key.log_id(), "user actor passivated");
                    myself.stop(Some("idle".into()));
                }
            }
        }
        Ok(())
    }
}

impl UserState {
    fn scope_parts(&self) -> (Services, UserKey) {
        (self.args.services.clone(), self.args.key.clone())
    }

    /// Runs a write as one transaction that first checks and then records the request id.
    async fn write<T, F>(&mut self, request_id: &str, mut body: F) -> Result<T>
    where
        T: Replayable,
        F: FnMut(&mut UserData<'_>, &WriteScope<'_>) -> Outcome<T> + Send + 'static,
    {
        let (services, key) = self.scope_parts();
        let now = services.clock.now();
        let rule = session_rule(services.settings.retention_ms);
        let request_id = request_id.to_owned();
        let ks = services.keyspace.clone();
        let written = services
            .store
            .run(move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                if let Some(entry) = u.idempotency(&request_id)? {
                    return Ok(Written::Replay(entry.response));
                }
                let scope = WriteScope {
                    tenant: &key.tenant,
                    user: &key.user,
                    now,
                    rule,
                };
                match body(&mut u, &scope)? {
                    Ok((ack, changed)) => {
                        let response = serde_json::to_vec(&ack).map_err(|e| {
                            engram_storage::Error::Encode {
                                what: "acknowledgement",
                                reason: e.to_string(),
                            }
                        })?;
                        u.put_idempotency(&request_id, &IdempotencyEntry { at: now, response })?;
                        Ok(Written::Fresh(ack, changed))
                    }
                    Err(rejection) => Ok(Written::Rejected(rejection)),
                }
            })
            .await?;
        match written {
            Written::Fresh(ack, changed) => {
                self.cache(changed).await?;
                Ok(ack)
            }
            Written::Replay(bytes) => {
                let mut ack: T = serde_json::from_slice(&bytes).map_err(|_| {
                    Error::invalid("request_id", "already used for a different request")
                })?;
                ack.mark_replayed();
                Ok(ack)
            }
            Written::Rejected(err) => Err(err),
        }
    }

    /// Runs a read-only transaction on the user's data.
    async fn read<T, F>(&self, mut body: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&mut UserData<'_>) -> engram_storage::Result<T> + Send + 'static,
    {
        let (services, key) = self.scope_parts();
        let ks = services.keyspace.clone();
        Ok(services
            .store
            .read(move |txn| body(&mut UserData::new(txn, &ks, &key.tenant, &key.user)))
            .await?)
    }

    async fn cache(&mut self, changed: Vec<MemoryRecord>) -> Result<()> {
        if changed.is_empty() {
            return Ok(());
        }
        let extractor = self.args.services.extractor.clone();
        let indexed = tokio::task::spawn_blocking(move || {
            changed
                .into_iter()
                .map(|r| IndexedRecord::new(r, &extractor))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
        for record in indexed {
            self.records.insert(record.record.memory_id.clone(), record);
        }
        Ok(())
    }

    fn cached_records(&self) -> Vec<MemoryRecord> {
        self.records.values().map(|r| r.record.clone()).collect()
    }

    async fn turn(&mut self, req: TurnRequest) -> Result<TurnAck> {
        validate::turn(&req)?;
        let extractor = self.args.services.extractor.clone();
        let text = format!("{}\n{}", req.user_text, req.assistant_text);
        let entities = tokio::task::spawn_blocking(move || extractor.extract(&text))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?;
        let request_id = req.request_id.clone();
        self.write(&request_id, move |u, scope| {
            ops::append_turn(u, scope, &req, &entities)
        })
        .await
    }

    async fn feedback(&mut self, req: FeedbackRequest) -> Result<FeedbackAck> {
        validate::feedback(&req)?;
        let cached = self.cached_records();
        let request_id = req.request_id.clone();
        self.write(&request_id, move |u, scope| {
            ops::feedback(u, scope, &req, &cached)
        })
        .await
    }

    async fn write_memory(&mut self, req: MemoryWrite) -> Result<MemoryAck> {
        validate::memory_write(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, move |u, scope| {
            ops::write_memory(u, scope, &req)
        })
        .await
    }

    async fn set_status(&mut self, req: StatusChange) -> Result<MemoryAck> {
        validate::status_change(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, move |u, scope| ops::set_status(u, scope, &req))
            .await
    }

    async fn write_intent(&mut self, req: IntentWrite) -> Result<IntentAck> {
        validate::intent(&req)?;
        let request_id = req.request_id.clone();
        self.write(&request_id, move |u, scope| {
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
        let request = ContextRequest {
            query: query.query.as_deref(),
            route: query.route,
            token_budget: query.token_budget,
            now,
        };
        let records: Vec<&IndexedRecord> = self.records.values().collect();
        Ok(assemble(
            &request,
            &turns,
            &records,
            &self.args.services.extractor,
        ))
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
        let report = services
            .store
            .run(move |txn| UserData::new(txn, &ks, &key.tenant, &key.user).forget())
            .await?;
        self.records.clear();
        tracing::info!(user = %self.args.key.log_id(), records = report.records, "user forgotten");
        Ok(ForgetAck {
            records: report.records,
            expiry_entries: report.expiry_entries,
        })
    }

    async fn sweep(&mut self, what: SweepScope) -> Result<SweepReport> {
        let (services, key) = self.scope_parts();
        let now = services.clock.now();
        let rule = session_rule(services.settings.retention_ms);
        let records = self.cached_records();
        let ks = services.keyspace.clone();
        let (report, changed, purged) = services
            .store
            .run(move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                let scope = WriteScope {
                    tenant: &key.tenant,
                    user: &key.user,
                    now,
                    rule,
                };
                ops::sweep(&mut u, &scope, what, &records)
            })
            .await?;
        for id in purged {
            self.records.remove(&id);
        }
        self.cache(changed).await?;
        Ok(report)
    }
}
