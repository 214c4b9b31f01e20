//! A node's worth of user actors on a real SQLite file with the real embedding pool
//! (multilingual-e5-small from the pinned wheel, installed by `.ci/models`), for the suites
//! that need embeddings: in either write mode, and the helpers they share.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::directory::Directory;
use engram_actors::embed::Embedder;
use engram_actors::model::context::MemoryContext;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::policy::Route;
use engram_actors::model::retrieve::SearchMode;
use engram_actors::pipeline::{Pipeline, PipelineConfig};
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    ContextQuery, MemoryAck, MemoryWrite, SearchQuery, SearchResult, TurnRequest,
};
use engram_actors::services::{Metrics, Services, Settings};
use engram_inference::{BackgroundPriority, EmbeddingPool, ModelKind, PoolConfig};
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{Embedding, MemoryKind, MemoryRecord, MemoryStatus, Timestamp};
use engram_storage::{Keyspace, Store};
use serde_json::json;
use tempfile::TempDir;

/// How a node's writes get their embeddings.
#[derive(Debug, Clone)]
pub enum Mode {
    /// A write waits for its embeddings and stores them itself.
    Synchronous,
    /// A write queues its texts; the pipeline (started or not) embeds them.
    Behind {
        /// The pipeline's settings.
        config: PipelineConfig,
        /// Whether the dispatcher runs (a node that stops before it runs leaves its
        /// entries for the next).
        started: bool,
    },
}

impl Mode {
    /// Write-behind with the default pipeline, running.
    pub fn behind() -> Mode {
        Mode::Behind {
            config: PipelineConfig::default(),
            started: true,
        }
    }
}

pub mod shared;

pub struct Node {
    pub directory: Arc<Directory>,
    pub clock: Arc<ManualClock>,
    pub store: Store,
    pub pipeline: Option<Pipeline>,
}

pub async fn node(dir: &TempDir, pool: &EmbeddingPool) -> Node {
    node_with(
        dir,
        Embedder::new(pool.clone(), ModelKind::MultilingualE5Small),
        Mode::Synchronous,
    )
    .await
}

pub async fn node_with(dir: &TempDir, embedder: Embedder, mode: Mode) -> Node {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let (pipeline, started) = match &mode {
        Mode::Synchronous => (None, false),
        Mode::Behind { config, started } => (Some(Pipeline::new(config.clone())), *started),
    };
    let clock = ManualClock::new(Timestamp(1_780_000_000_000));
    let services = Services {
        store: store.clone(),
        keyspace: Keyspace::new("engram"),
        clock: Arc::clone(&clock) as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: Some(embedder),
        pipeline: pipeline.clone(),
        distillation: None,
        reranker: None,
        ownership: None,
        settings: Settings::default(),
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    if let (Some(pipeline), true) = (&pipeline, started) {
        pipeline.start(Arc::clone(&directory)).await.unwrap();
    }
    Node {
        directory,
        clock,
        store,
        pipeline,
    }
}

impl Node {
    /// Starts the pipeline of a node made with `started: false`.
    pub async fn start_pipeline(&self) {
        let pipeline = self.pipeline.as_ref().expect("a write-behind node");
        pipeline.start(Arc::clone(&self.directory)).await.unwrap();
    }

    /// Pending entries in storage now.
    pub async fn pending(&self) -> usize {
        let pipeline = self.pipeline.as_ref().expect("a write-behind node");
        pipeline
            .pending(self.directory.services())
            .await
            .unwrap()
            .entries
    }

    /// Waits until nothing is pending in storage and no round is under way (a condition,
    /// polled: however long the machine takes).
    pub async fn drained(&self) {
        let pipeline = self.pipeline.as_ref().expect("a write-behind node");
        loop {
            let in_rounds = pipeline
                .metrics()
                .users_in_rounds
                .load(std::sync::atomic::Ordering::Relaxed);
            if self.pending().await == 0 && in_rounds == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A user's records of a kind and the embeddings stored for them.
    pub async fn stored(
        &self,
        key: &UserKey,
        kind: MemoryKind,
    ) -> (Vec<MemoryRecord>, Vec<(String, Embedding)>) {
        let ks = Keyspace::new("engram");
        let key = key.clone();
        self.store
            .read(move |txn| {
                let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
                Ok((u.records(kind)?, u.embeddings()?))
            })
            .await
            .unwrap()
    }

    pub async fn shutdown(&self) {
        if let Some(pipeline) = &self.pipeline {
            pipeline.stop();
        }
        self.directory.shutdown(Duration::from_secs(5)).await;
    }
}

pub fn alice() -> UserKey {
    UserKey::new("acme", "alice")
}

pub async fn turn(node: &Node, id: &str, session: &str, text: &str) {
    turn_of(node, &alice(), id, session, text).await;
}

pub async fn turn_of(node: &Node, key: &UserKey, id: &str, session: &str, text: &str) {
    let req = TurnRequest {
        request_id: id.into(),
        session_id: Some(session.into()),
        user_text: text.into(),
        assistant_text: "Noted.".into(),
        route: None,
        success: true,
        trace_id: None,
        choices: Vec::new(),
        clarification: None,
    };
    let ack = node.directory.ask_admin(key, req.clone()).await.unwrap();
    assert!(ack.written);
}

pub async fn search(node: &Node, query: &str, mode: SearchMode) -> SearchResult {
    let q = SearchQuery {
        query: query.into(),
        k: 3,
        kinds: Vec::new(),
        mode,
        active_only: false,
        rerank: false,
    };
    node.directory.ask_admin(&alice(), q.clone()).await.unwrap()
}

/// alice's memory context for `query` in `session` on the deep-analysis route.
pub async fn context(node: &Node, session: &str, query: &str) -> MemoryContext {
    let query = ContextQuery {
        session_id: Some(session.into()),
        query: Some(query.into()),
        route: Route::DeepAnalysisWorkflow,
        token_budget: 1200,
    };
    node.directory
        .ask_admin(&alice(), query.clone())
        .await
        .unwrap()
}

pub fn memory_write(
    id: &str,
    kind: MemoryKind,
    text: &str,
    payload: serde_json::Value,
) -> MemoryWrite {
    MemoryWrite {
        request_id: id.into(),
        memory_id: None,
        kind,
        text: text.into(),
        payload,
        status: MemoryStatus::Active,
        namespace: "default".into(),
        scope: "global".into(),
        confidence: 0.8,
        salience: 0.6,
        valid_from: None,
        valid_to: None,
        session_id: None,
        source_route: None,
        source_agent: None,
        trace_id: None,
    }
}

pub async fn profile(node: &Node, id: &str, topic: &str, value: &str, text: &str) -> MemoryAck {
    let req = memory_write(
        id,
        MemoryKind::Profile,
        text,
        json!({ "topic": topic, "value": value }),
    );
    node.directory
        .ask_admin(&alice(), req.clone())
        .await
        .unwrap()
}

/// The pool of the embedding suites: its background batches at normal priority. These
/// suites wait for the pipeline's vectors; in the idle class those come only from CPU time
/// nothing else wants, which a machine loaded by other work does not leave.
pub async fn pool() -> EmbeddingPool {
    pool_with(PoolConfig {
        background_priority: BackgroundPriority::Normal,
        ..PoolConfig::default()
    })
    .await
}

pub async fn pool_with(config: PoolConfig) -> EmbeddingPool {
    EmbeddingPool::start(config)
        .await
        .expect("the e5 model is installed by .ci/models")
}

pub fn embedder(pool: &EmbeddingPool) -> Embedder {
    Embedder::new(pool.clone(), ModelKind::MultilingualE5Small)
}
