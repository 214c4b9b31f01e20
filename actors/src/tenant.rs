//! The tenant's actor: the single writer of a tenant's shared sets, the semantic SQL cache
//! ([`sql`]) and the few-shot library ([`examples`]), which every user of the tenant shares.
//!
//! It is placed, started, supervised, fenced and taken over exactly like a user's actor: it
//! lives under the reserved user id [`SHARED_USER`] (no user id can take it: ids are letters,
//! digits and `-_.:@`), so its shard is `hash(tenant, "#shared")`, the front door sends its
//! requests to the shard's owner, the shard's supervisor starts it, and every write is one
//! transaction fenced by the shard's lease that also records its request id. Its state is a
//! cache of storage: the entries, and one node-local vector index per set built from the
//! embeddings stored with them, loaded in pages when it starts (after a restart, a passivation
//! or a take-over by another node).
//!
//! Lifetimes follow the injected clock: a lookup never serves an expired entry, and the
//! actor's tick removes expired SQL entries, examples unused for [`EXAMPLE_TTL_MS`], and
//! idempotency entries older than a day.
//!
//! It also writes the tenant's schema metadata cache ([`metadata`]: `/v1/metadata`), fenced
//! like the sets, which the nl2sql contexts of the tenant's users read.

mod examples;
pub mod literals;
mod metadata;
mod sets;
mod sql;
pub mod statement;
mod txn;

use std::collections::HashMap;

use engram_storage::shared::{Example, SharedSettings, SqlEntry, TenantData};
use engram_storage::types::Timestamp;
use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::time::Instant;

use self::sets::SetIndex;
use crate::error::{Error, Result};
use crate::request::tenant::{ExampleAck, ImportAck, InvalidateAck, SettingsAck, SqlPutAck};
use crate::request::{Reader, UserReply, UserRequest};
use crate::user::{Replayable, UserArgs, UserMsg};

pub use crate::placement::SHARED_USER;
/// An example not served or recorded for this long expires (30 days).
pub const EXAMPLE_TTL_MS: i64 = 30 * 24 * 3_600_000;
/// Failures after which an example is removed (more than three).
pub const MAX_FAILURES: u32 = 3;
/// Idempotency entries of the shared sets are kept this long (a day).
const IDEMPOTENCY_MS: i64 = 24 * 3_600_000;
/// Entries a tick removes in one transaction, at most.
const SWEEP_BATCH: usize = 500;
/// Entries read per transaction when the actor loads its sets.
const LOAD_PAGE: usize = 500;

/// The tenant's actor.
#[derive(Debug)]
pub struct TenantActor;

/// The tenant actor's state: a cache of its shared sets.
pub struct TenantState {
    args: UserArgs,
    settings: SharedSettings,
    sql: HashMap<String, SqlEntry>,
    sql_index: SetIndex,
    examples: HashMap<String, Example>,
    example_index: SetIndex,
    /// Examples by what they hold now (`examples::content_key`): an edited example keeps its
    /// id, and a success or an import of what it holds now finds it by this.
    example_ids: HashMap<String, String>,
    /// Examples served since the last flush, and when (their `last_used_at`).
    used: HashMap<String, Timestamp>,
    /// Entries found expired when the sets were loaded (they expired while no actor ran):
    /// not cached, deleted by the next sweeps.
    stale_sql: Vec<String>,
    stale_examples: Vec<String>,
    /// Where the sweep's pruning of old idempotency entries goes on from.
    idempotency_cursor: Option<Vec<u8>>,
    last_active: Instant,
    ticker: Option<JoinHandle<()>>,
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
    SqlPutAck => "sql-put",
    InvalidateAck => "sql-invalidate",
    ExampleAck => "example",
    ImportAck => "example-import",
    SettingsAck => "shared-settings"
);

impl Actor for TenantActor {
    type Msg = UserMsg;
    type State = TenantState;
    type Arguments = UserArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<UserMsg>,
        args: UserArgs,
    ) -> Result<TenantState, ActorProcessingErr> {
        let tick =
            (args.services.settings.idle_timeout / 2).max(std::time::Duration::from_millis(10));
        let mut state = TenantState {
            args,
            settings: SharedSettings::default(),
            sql: HashMap::new(),
            sql_index: SetIndex::default(),
            examples: HashMap::new(),
            example_index: SetIndex::default(),
            example_ids: HashMap::new(),
            used: HashMap::new(),
            stale_sql: Vec::new(),
            stale_examples: Vec::new(),
            idempotency_cursor: None,
            last_active: Instant::now(),
            ticker: None,
        };
        state.load().await?;
        state.ticker = Some(myself.send_interval(tick, || UserMsg::Tick));
        tracing::debug!(
            tenant = %state.args.key.tenant,
            sql = state.sql.len(),
            examples = state.examples.len(),
            "tenant actor started"
        );
        Ok(state)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<UserMsg>,
        state: &mut TenantState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(ticker) = state.ticker.take() {
            ticker.abort();
        }
        // Best effort: what is not flushed only makes an example expire a little earlier.
        if let Err(err) = state.flush_used().await {
            tracing::debug!(error = %err, "last uses of examples not written at stop");
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<UserMsg>,
        msg: UserMsg,
        state: &mut TenantState,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(msg, UserMsg::Tick | UserMsg::Embedded(_)) {
            state.last_active = Instant::now();
        }
        match msg {
            UserMsg::Call {
                reader,
                request,
                reply,
            } => match (
                state.to_embed(&reader, &request),
                &state.args.services.embedder,
            ) {
                (Some(question), Some(embedder)) => {
                    let tenant = state.tenant().to_owned();
                    let call = (reader, request, reply);
                    embed_then_serve(&myself, embedder.clone(), tenant, call, question);
                }
                _ => {
                    let result = state.serve(&reader, *request).await;
                    let _ = reply.send(result);
                }
            },
            UserMsg::Sweep(_, reply) => {
                let result = state.sweep().await.map(|_| Default::default());
                let _ = reply.send(result);
            }
            UserMsg::Evict => {
                if state.args.roster.evictable(&state.args.key) {
                    let _ = state.flush_used().await;
                    state.leave(&myself, "evicted");
                }
            }
            UserMsg::Fail => return Err("fault injected".into()),
            // A user's messages only.
            UserMsg::Embedded(_) | UserMsg::Asked { .. } | UserMsg::Reranked { .. } => {}
            UserMsg::Tick => {
                if let Err(err) = state.sweep().await {
                    tracing::warn!(tenant = %state.args.key.tenant, error = %err, "sweep of the shared sets failed");
                }
                if state.last_active.elapsed() >= state.args.services.settings.idle_timeout {
                    state.leave(&myself, "idle");
                }
            }
        }
        Ok(())
    }
}

/// A question whose vector the actor has made outside its turn before it serves the request
/// ([`TenantState::to_embed`]).
enum ToEmbed {
    /// For a lookup or a search: within the node's query deadline, or why not.
    Query(String),
    /// For a write: without a deadline (an entry is not stored without its vector).
    Write(String),
}

/// The vector of the normalised question for a lookup or a search of `tenant`'s sets, within
/// the node's query deadline, or why there is none (the priority and the deadline are the
/// encoder's query ones).
async fn embed_question(
    embedder: &crate::embed::Embedder,
    tenant: &str,
    normalised: &str,
) -> crate::request::tenant::QuestionVector {
    match embedder.query(tenant, normalised).await {
        crate::embed::QueryVector::Embedded(v) => {
            crate::request::tenant::QuestionVector::Embedded(v.to_vec())
        }
        crate::embed::QueryVector::Fallback(why) => {
            crate::request::tenant::QuestionVector::Fallback(why)
        }
    }
}

/// The vector of the normalised question for a write of `tenant`'s sets, without a deadline
/// (empty should the encoder answer none, as [`TenantState::question_vector`] stores it).
async fn embed_for_write(
    embedder: &crate::embed::Embedder,
    tenant: &str,
    normalised: &str,
) -> Result<Vec<f32>> {
    Ok(embedder
        .questions(tenant, &[normalised.to_owned()])
        .await?
        .pop()
        .unwrap_or_default())
}

/// Serves `request` once its question's vector is made: the embedding runs in a task of its
/// own, off the actor's turn (the actor serialises every request of the tenant, so none waits
/// for the encoder behind another's question), and the request comes back to the actor with
/// its vector. A write the encoder fails is answered with the failure.
fn embed_then_serve(
    myself: &ActorRef<UserMsg>,
    embedder: crate::embed::Embedder,
    tenant: String,
    (reader, mut request, reply): (
        Reader,
        Box<UserRequest>,
        ractor::RpcReplyPort<Result<UserReply>>,
    ),
    question: ToEmbed,
) {
    let myself = myself.clone();
    tokio::spawn(async move {
        match question {
            ToEmbed::Query(normalised) => {
                let vector = embed_question(&embedder, &tenant, &normalised).await;
                if let UserRequest::SqlLookup(q) = request.as_mut() {
                    q.vector = Some(vector);
                } else if let UserRequest::SearchExamples(q) = request.as_mut() {
                    q.vector = Some(vector);
                }
            }
            ToEmbed::Write(normalised) => {
                let vector = match embed_for_write(&embedder, &tenant, &normalised).await {
                    Ok(vector) => vector,
                    Err(err) => {
                        let _ = reply.send(Err(err));
                        return;
                    }
                };
                if let UserRequest::SqlPut(q) = request.as_mut() {
                    q.vector = Some(vector);
                } else if let UserRequest::RecordExample(q) = request.as_mut() {
                    q.vector = Some(vector);
                }
            }
        }
        // The actor gone, the reply port goes with the message: the caller's ask fails and
        // may be retried (a write with the same request id).
        let _ = myself.cast(UserMsg::Call {
            reader,
            request,
            reply,
        });
    });
}

impl TenantState {
    /// The question of `request` to embed before it is served: a lookup, a search or a write
    /// of the sets that brought no vector (a request forwarded by a node of an earlier
    /// version brings the one that node made), on a node with an encoder. A question the sets
    /// would refuse, or of a reader it would refuse, is not embedded: serving the request
    /// says why.
    fn to_embed(&self, reader: &Reader, request: &UserRequest) -> Option<ToEmbed> {
        self.args.services.embedder.as_ref()?;
        self.admit(reader, request).ok()?;
        let (question, query) = if let UserRequest::SqlLookup(q) = request
            && q.vector.is_none()
        {
            (&q.question, true)
        } else if let UserRequest::SearchExamples(q) = request
            && q.vector.is_none()
        {
            (&q.question, true)
        } else if let UserRequest::SqlPut(q) = request
            && q.vector.is_none()
        {
            (&q.question, false)
        } else if let UserRequest::RecordExample(q) = request
            && q.vector.is_none()
        {
            (&q.question, false)
        } else {
            return None;
        };
        let normalised = sql::question(question).ok()?;
        Some(if query {
            ToEmbed::Query(normalised)
        } else {
            ToEmbed::Write(normalised)
        })
    }

    /// The embedding of a normalised question for a write, and the encoder's name: the one
    /// the request brought, or the encoder's.
    async fn write_vector(
        &self,
        normalised: &str,
        given: Option<Vec<f32>>,
    ) -> Result<(Vec<f32>, String)> {
        match (given, &self.args.services.embedder) {
            (Some(vector), Some(embedder)) => Ok((vector, embedder.model_name().to_owned())),
            _ => self.question_vector(normalised).await,
        }
    }

    /// The question's vector: the one the request brought, or the encoder's within the
    /// query deadline. `Err` is why there is none; `Ok(None)`: the node has no encoder.
    async fn vector_of(
        &self,
        normalised: &str,
        given: Option<crate::request::tenant::QuestionVector>,
    ) -> std::result::Result<Option<Vec<f32>>, crate::embed::Fallback> {
        match given {
            Some(crate::request::tenant::QuestionVector::Embedded(v)) => Ok(Some(v)),
            Some(crate::request::tenant::QuestionVector::Fallback(why)) => Err(why),
            None => match &self.args.services.embedder {
                None => Ok(None),
                Some(embedder) => match embedder.query(self.tenant(), normalised).await {
                    crate::embed::QueryVector::Embedded(v) => Ok(Some(v.to_vec())),
                    crate::embed::QueryVector::Fallback(why) => Err(why),
                },
            },
        }
    }

    fn leave(&mut self, myself: &ActorRef<UserMsg>, why: &str) {
        self.args.roster.left(&self.args.key, myself.get_id());
        myself.stop(Some(why.to_owned()));
    }

    fn now(&self) -> Timestamp {
        self.args.services.clock.now()
    }

    fn tenant(&self) -> &str {
        &self.args.key.tenant
    }

    /// Reads the settings and both sets in pages; expired entries are not cached, and are
    /// left to the sweep to delete.
    async fn load(&mut self) -> Result<()> {
        let now = self.now();
        let (store, ks, tenant) = (
            self.args.services.store.clone(),
            self.args.services.keyspace.clone(),
            self.tenant().to_owned(),
        );
        let (k, t) = (ks.clone(), tenant.clone());
        self.settings = store
            .read(move |txn| TenantData::new(txn, &k, &t).settings())
            .await?;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (k, t, a) = (ks.clone(), tenant.clone(), after.clone());
            let (page, next) = store
                .read(move |txn| TenantData::new(txn, &k, &t).sql_page(a.as_deref(), LOAD_PAGE))
                .await?;
            for entry in page {
                if entry.expires_at > now {
                    self.cache_sql(entry);
                } else {
                    self.stale_sql.push(entry.id);
                }
            }
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (k, t, a) = (ks.clone(), tenant.clone(), after.clone());
            let (page, next) = store
                .read(move |txn| TenantData::new(txn, &k, &t).example_page(a.as_deref(), LOAD_PAGE))
                .await?;
            for example in page {
                if examples::expired(&example, now) {
                    self.stale_examples.push(example.id);
                } else {
                    self.cache_example(example);
                }
            }
            match next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(())
    }

    /// Whether vectors made by `model` may be compared with this node's query vectors (an
    /// entry of another encoder is matched by its normalised text only).
    fn indexable<'v>(&self, model: &str, vector: &'v [f32]) -> &'v [f32] {
        let same = self
            .args
            .services
            .embedder
            .as_ref()
            .is_some_and(|e| e.model_name() == model);
        if same { vector } else { &[] }
    }

    fn cache_sql(&mut self, entry: SqlEntry) {
        let vector = self.indexable(&entry.model, &entry.vector);
        self.sql_index.upsert(&entry.id, vector);
        self.sql.insert(entry.id.clone(), entry);
    }

    fn uncache_sql(&mut self, id: &str) {
        self.sql_index.remove(id);
        self.sql.remove(id);
    }

    fn cache_example(&mut self, example: Example) {
        let vector = self.indexable(&example.model, &example.vector);
        self.example_index.upsert(&example.id, vector);
        if let Some(old) = self.examples.get(&example.id) {
            self.example_ids.remove(&examples::content_key(old));
        }
        self.example_ids
            .insert(examples::content_key(&example), example.id.clone());
        self.examples.insert(example.id.clone(), example);
    }

    fn uncache_example(&mut self, id: &str) {
        self.example_index.remove(id);
        if let Some(old) = self.examples.remove(id) {
            self.example_ids.remove(&examples::content_key(&old));
        }
        self.used.remove(id);
    }

    /// Who may ask what: the reader acts for this tenant; reviewing, listing, exporting,
    /// importing and the settings need an admin key; operator keys ask nothing here.
    fn admit(&self, reader: &Reader, request: &UserRequest) -> Result<()> {
        let admin_only = matches!(
            request,
            UserRequest::ListExamples(_)
                | UserRequest::ReviewExample(_)
                | UserRequest::ExportExamples(_)
                | UserRequest::ImportExamples(_)
                | UserRequest::ReadSettings(_)
                | UserRequest::WriteSettings(_)
        );
        let tenant = &self.args.key.tenant;
        reader.admit(tenant, "the shared sets'", request, admin_only)
    }

    async fn serve(&mut self, reader: &Reader, request: UserRequest) -> Result<UserReply> {
        self.admit(reader, &request)?;
        Ok(match request {
            UserRequest::SqlLookup(q) => UserReply::SqlLookup(self.sql_lookup(q).await?),
            UserRequest::SqlPut(q) => UserReply::SqlPut(self.sql_put(q).await?),
            UserRequest::SqlInvalidate(q) => {
                UserReply::SqlInvalidate(self.sql_invalidate(q).await?)
            }
            UserRequest::RecordExample(q) => {
                UserReply::RecordExample(self.record_example(reader, q).await?)
            }
            UserRequest::SearchExamples(q) => {
                UserReply::SearchExamples(self.search_examples(q).await?)
            }
            UserRequest::ListExamples(q) => UserReply::ListExamples(self.list_examples(&q)?),
            UserRequest::ReviewExample(q) => {
                UserReply::ReviewExample(self.review_example(reader, q).await?)
            }
            UserRequest::ExampleFailed(q) => {
                UserReply::ExampleFailed(self.example_failed(q).await?)
            }
            UserRequest::ExportExamples(q) => UserReply::ExportExamples(self.export_examples(&q)),
            UserRequest::ImportExamples(q) => {
                UserReply::ImportExamples(self.import_examples(q).await?)
            }
            UserRequest::ReadSettings(_) => UserReply::ReadSettings(self.settings.clone()),
            UserRequest::WriteSettings(q) => {
                UserReply::WriteSettings(self.write_settings(q).await?)
            }
            UserRequest::MetadataPut(q) => UserReply::MetadataPut(self.put_metadata(q).await?),
            UserRequest::MetadataList(_) => UserReply::MetadataList(self.list_metadata().await?),
            UserRequest::MetadataRemove(q) => {
                UserReply::MetadataRemove(self.remove_metadata(q).await?)
            }
            other @ (UserRequest::Turn(_)
            | UserRequest::Feedback(_)
            | UserRequest::Context(_)
            | UserRequest::Search(_)
            | UserRequest::WriteMemory(_)
            | UserRequest::SetStatus(_)
            | UserRequest::ListMemories(_)
            | UserRequest::ListSessions(_)
            | UserRequest::SessionMemory(_)
            | UserRequest::ClearSession(_)
            | UserRequest::Forget(_)
            | UserRequest::WriteIntent(_)
            | UserRequest::Intents(_)
            | UserRequest::Distil(_)
            | UserRequest::KeyIntents(_)
            | UserRequest::Flags(_)
            | UserRequest::ResolveConflict(_)
            | UserRequest::MatchAnchor(_)
            | UserRequest::ReadArchive(_)
            | UserRequest::MatchArchive(_)
            | UserRequest::ApproveReads(_)) => {
                return Err(Error::Internal(format!(
                    "{} is a user's request, not the tenant's",
                    other.name()
                )));
            }
        })
    }

    async fn write_settings(
        &mut self,
        req: crate::request::tenant::WriteSettings,
    ) -> Result<SettingsAck> {
        sql::check_settings(&req.settings)?;
        let settings = req.settings.clone();
        let ack = self
            .write(&req.request_id, move |t, _| {
                t.put_settings(&settings)?;
                Ok(Ok(SettingsAck {
                    settings: settings.clone(),
                    replayed: false,
                }))
            })
            .await?;
        // Replayed or not, what is stored is what the answer says.
        self.settings = ack.settings.clone();
        Ok(ack)
    }
}
