//! A round's results against records that changed while they were computed, with the real
//! model on a real SQLite file: the steps of [`round::run`] one by one, with the changes
//! between embedding and storing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use engram_inference::{EmbeddingPool, ModelKind, PoolConfig};
use engram_storage::data::UserData;
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{MemoryKind, PendingInference, Timestamp};
use engram_storage::{Keyspace, Store};

use super::embedding::{embed, read, store};
use super::*;
use crate::clock::{ManualClock, SharedClock};
use crate::embed::Embedder;
use crate::model::entities::EntityExtractor;
use crate::pipeline::PipelineConfig;
use crate::services::{Metrics, Settings};

fn record(id: &str, text: &str) -> engram_storage::types::MemoryRecord {
    let json = serde_json::json!({
        "memory_id": id, "tenant": "acme", "user_id": "alice", "session_id": null,
        "turn_id": null, "trace_id": null, "kind": "Correction", "scope": "global",
        "namespace": "default", "summary_text": text, "payload": "{}", "source_route": null,
        "source_agent": null, "confidence": 0.9, "salience": 0.5, "status": "Active",
        "pii_level": "None", "redaction_level": "Full", "trigger": "Api", "created_at": 1,
        "last_seen_at": 1, "last_accessed_at": null, "expires_at": null, "valid_from": null,
        "valid_to": null
    });
    serde_json::from_value(json).expect("a record")
}

fn queue(u: &mut UserData<'_>, id: &str, text: &str) -> engram_storage::Result<()> {
    u.put_record(&record(id, text))?;
    u.put_pending(
        id,
        &PendingInference {
            kind: MemoryKind::Correction,
            text: text.into(),
            queued_at: Timestamp(1),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_for_a_record_rewritten_or_deleted_while_it_was_computed_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store_ = Store::sqlite(&dir.path().join("e.sqlite"), SqliteOptions::default()).unwrap();
    let pool = EmbeddingPool::start(PoolConfig::default()).await.unwrap();
    let ks = Keyspace::new("engram");
    let services = Services {
        store: store_.clone(),
        keyspace: ks.clone(),
        clock: ManualClock::new(Timestamp(1_000)) as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: Some(Embedder::new(pool.clone(), ModelKind::MultilingualE5Small)),
        pipeline: Some(Pipeline::new(PipelineConfig::default())),
        distillation: None,
        reranker: None,
        ownership: None,
        settings: Settings::default(),
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    let with_alice = |f: fn(&mut UserData<'_>) -> engram_storage::Result<()>| {
        let ks = ks.clone();
        store_.run_blocking(move |txn| f(&mut UserData::new(txn, &ks, "acme", "alice")))
    };
    with_alice(|u| {
        queue(u, "m1", "use net revenue, not gross")?;
        queue(u, "m2", "fiscal year starts in April")?;
        queue(u, "m3", "exclude test accounts")
    })
    .unwrap();

    let config = PipelineConfig::default();
    let parts = read(
        &directory,
        &config,
        vec![(UserKey::new("acme", "alice"), Timestamp(1), None)],
    )
    .await
    .unwrap();
    let vectors = embed(&directory, &parts).await;
    // While the vectors were computed: m1 rewritten, m2 deleted; m3 unchanged.
    with_alice(|u| {
        queue(u, "m1", "use net revenue after refunds")?;
        u.remove_record(MemoryKind::Correction, "m2").map(drop)
    })
    .unwrap();
    let part = parts.into_iter().next().unwrap();
    let vectors = vectors.into_iter().next().flatten().expect("embedded");
    let written = store(&directory, vec![(part, vectors)])
        .await
        .unwrap()
        .pop()
        .flatten()
        .expect("alice is served without leases");
    assert_eq!(
        written
            .stored
            .iter()
            .map(|s| s.memory_id.as_str())
            .collect::<Vec<_>>(),
        ["m3"]
    );
    assert_eq!(written.dropped, 2);
    assert!(written.left.is_some(), "m1's new text still waits");
    let (pending, e1, e2) = store_
        .read_blocking(|txn| {
            let mut u = UserData::new(txn, &ks, "acme", "alice");
            Ok((
                u.pending_entries(10)?,
                u.embedding("m1")?,
                u.embedding("m2")?,
            ))
        })
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1.text, "use net revenue after refunds");
    assert_eq!(
        (e1, e2),
        (None, None),
        "no vector of an old text, none for a deleted record"
    );

    // The dispatcher embeds the new text and counts nothing more as dropped.
    let pipeline = directory.services().pipeline.clone().unwrap();
    pipeline.start(Arc::clone(&directory)).await.unwrap();
    while pipeline
        .pending(directory.services())
        .await
        .unwrap()
        .entries
        > 0
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(pipeline.metrics().dropped.load(Ordering::Relaxed), 0);
    pipeline.stop();
    pool.shutdown().await;
}
