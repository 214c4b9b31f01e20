//! The plain node the user-actor suites share: user actors without embeddings on a real
//! SQLite file with a manual clock, and the requests they send most.
#![allow(dead_code)]

use std::sync::Arc;

use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::directory::Directory;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::policy::Route;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    ContextQuery, ListMemories, MemoryWrite, SearchQuery, SearchResult, TurnRequest,
};
use engram_actors::services::{Metrics, Services, Settings};
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{MemoryKind, MemoryRecord, MemoryStatus, Timestamp};
use engram_storage::{Keyspace, Store};
use tempfile::TempDir;

/// A node's worth of user actors without embeddings, on a real SQLite file, with a manual
/// clock.
pub struct Node {
    pub directory: Arc<Directory>,
    pub clock: Arc<ManualClock>,
    pub store: Store,
}

pub fn extractor() -> Arc<EntityExtractor> {
    static EXTRACTOR: std::sync::OnceLock<Arc<EntityExtractor>> = std::sync::OnceLock::new();
    EXTRACTOR
        .get_or_init(|| Arc::new(EntityExtractor::default()))
        .clone()
}

pub fn node(dir: &TempDir, settings: Settings) -> Node {
    node_with_reranker(dir, settings, None)
}

/// [`node`] with the search reranker `reranker`.
pub fn node_with_reranker(
    dir: &TempDir,
    settings: Settings,
    reranker: Option<engram_actors::rerank::RerankService>,
) -> Node {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let clock = ManualClock::new(Timestamp(1_700_000_000_000));
    let services = Services {
        store: store.clone(),
        keyspace: Keyspace::new("engram"),
        clock: clock.clone() as SharedClock,
        extractor: extractor(),
        embedder: None,
        pipeline: None,
        distillation: None,
        reranker,
        ownership: None,
        settings,
        metrics: Arc::new(Metrics::default()),
    };
    Node {
        directory: Directory::new(services),
        clock,
        store,
    }
}

pub fn turn(request_id: &str, session: &str, user_text: &str) -> TurnRequest {
    TurnRequest {
        request_id: request_id.into(),
        session_id: Some(session.into()),
        user_text: user_text.into(),
        assistant_text: "The GMV of East China last month was 1,234 yuan.".into(),
        route: Some(Route::Nl2sqlQuery),
        success: true,
        trace_id: None,
        choices: Vec::new(),
        clarification: None,
    }
}

pub fn alice() -> UserKey {
    UserKey::new("acme", "alice")
}

pub async fn append(
    node: &Node,
    key: &UserKey,
    req: TurnRequest,
) -> engram_actors::Result<engram_actors::request::user::TurnAck> {
    node.directory.ask_admin(key, req.clone()).await
}

pub async fn context(
    node: &Node,
    key: &UserKey,
    session: &str,
    query: &str,
) -> engram_actors::model::context::MemoryContext {
    let q = ContextQuery {
        session_id: Some(session.into()),
        query: Some(query.into()),
        route: Route::Nl2sqlQuery,
        token_budget: 1200,
    };
    node.directory.ask_admin(key, q.clone()).await.unwrap()
}

/// Appends Alice's turn `id` with `text` to `session` (the assistant only notes it) and
/// returns its episodic memory's id.
pub async fn write_episode(node: &Node, id: &str, session: &str, text: &str) -> String {
    let mut req = turn(id, session, text);
    req.assistant_text = "Noted.".into();
    let ack = append(node, &alice(), req).await.unwrap();
    ack.memories[0].memory_id.clone()
}

/// Alice's ten best episodic memories for `query`, by hybrid search.
pub async fn search_episodes(node: &Node, query: &str) -> SearchResult {
    search_alice(node, query, 10, SearchMode::Hybrid).await
}

/// Alice's `k` best episodic memories for `query`, ranked by `mode`.
pub async fn search_alice(node: &Node, query: &str, k: usize, mode: SearchMode) -> SearchResult {
    let q = SearchQuery {
        query: query.into(),
        k,
        kinds: vec![MemoryKind::Episodic],
        mode,
        active_only: false,
        rerank: false,
    };
    node.directory.ask_admin(&alice(), q).await.unwrap()
}

/// Alice's memories of `kind` (of every kind: `None`), as her actor has them.
pub async fn alice_memories(node: &Node, kind: Option<MemoryKind>) -> Vec<MemoryRecord> {
    node.directory
        .ask_admin(&alice(), ListMemories { kind })
        .await
        .unwrap()
}

/// Alice's memories of `kind` as storage has them (committed writes only).
pub async fn alice_stored(node: &Node, kind: MemoryKind) -> Vec<MemoryRecord> {
    let ks = Keyspace::new("engram");
    node.store
        .read(move |txn| UserData::new(txn, &ks, "acme", "alice").records(kind))
        .await
        .unwrap()
}

/// An active profile memory `text` written with `request_id`.
pub fn memory_write(request_id: &str, text: &str) -> MemoryWrite {
    MemoryWrite {
        request_id: request_id.into(),
        memory_id: None,
        kind: MemoryKind::Profile,
        text: text.into(),
        payload: serde_json::json!({}),
        status: MemoryStatus::Active,
        namespace: "default".into(),
        scope: "global".into(),
        confidence: 0.5,
        salience: 0.5,
        valid_from: None,
        valid_to: None,
        session_id: None,
        source_route: None,
        source_agent: None,
        trace_id: None,
    }
}
