//! Loading a user's state when their actor starts: records, embeddings and the text of
//! every retained turn an episodic memory points at, indexed on a blocking thread.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use engram_storage::RangeOptions;
use engram_storage::data::UserData;
use engram_storage::types::{Embedding, MemoryKind, MemoryRecord, MemoryStatus};

use super::UserArgs;
use super::ops::turn_text;
use crate::error::{Error, Result};
use crate::model::index::MemoryIndex;

/// What a user actor loads from storage when it starts.
struct Loaded {
    /// Whether anything of the user is stored at all.
    has_data: bool,
    records: Vec<MemoryRecord>,
    embeddings: HashMap<String, Embedding>,
    /// The text of every retained turn that an episodic record points at.
    turns: HashMap<(String, u64), String>,
}

/// Loads the user's records, embeddings and retained turn texts, and indexes them on a
/// blocking thread. Embeddings of another model than the node's are not used (the records are
/// found by their words until they are written again).
/// Also says whether anything of the user is stored at all (one more key read).
pub(super) async fn load_index(args: &UserArgs) -> Result<(MemoryIndex, bool)> {
    let (store, ks) = (args.services.store.clone(), args.services.keyspace.clone());
    let key = args.key.clone();
    let loaded = store
        .read(move |txn| {
            let all = ks.user(&key.tenant, &key.user).all();
            let has_data = !txn
                .get_range(&all.begin, &all.end, RangeOptions::first(1))?
                .is_empty();
            let mut u = UserData::new(txn, &ks, &key.tenant, &key.user);
            let mut records = Vec::new();
            for kind in MemoryKind::ALL {
                records.extend(u.records(kind)?);
            }
            let embeddings = u.embeddings()?.into_iter().collect();
            let sessions: BTreeSet<String> = records
                .iter()
                .filter(|r| r.kind == MemoryKind::Episodic)
                .filter_map(|r| r.session_id.clone())
                .collect();
            let mut turns = HashMap::new();
            for session in sessions {
                for t in u.turns_from(&session, 0)? {
                    turns.insert(
                        (session.clone(), t.seq),
                        turn_text(&t.user_text, &t.assistant_text),
                    );
                }
            }
            Ok(Loaded {
                has_data,
                records,
                embeddings,
                turns,
            })
        })
        .await?;
    let services = args.services.clone();
    let model = services.embedder.as_ref().map(|e| e.model_name());
    let log_id = args.services.log_id(&args.key);
    let has_data = loaded.has_data;
    let index = tokio::task::spawn_blocking(move || {
        let Loaded {
            has_data: _,
            records,
            mut embeddings,
            turns,
        } = loaded;
        let mut index = MemoryIndex::new(services.settings.index.clone());
        let mut without_vector = 0u64;
        for record in records {
            let text = match (&record.session_id, record.turn_id) {
                (Some(session), Some(turn)) if record.kind == MemoryKind::Episodic => {
                    turns.get(&(session.clone(), turn)).cloned()
                }
                (Some(_) | None, Some(_) | None) => None,
            };
            let vector = embeddings
                .remove(&record.memory_id)
                .filter(|e| Some(e.model.as_str()) == model)
                .map(|e| e.vector);
            if model.is_some() && vector.is_none() && record.status != MemoryStatus::Deleted {
                without_vector += 1;
            }
            if let Err(err) =
                index.upsert(&services.extractor, record.clone(), text.clone(), vector)
            {
                tracing::warn!(user = %log_id, error = %err, "stored embedding refused");
                without_vector += 1;
                // Its words still find it.
                let _ = index.upsert(&services.extractor, record, text, None);
            }
        }
        services
            .metrics
            .records_without_vector
            .fetch_add(without_vector, Ordering::Relaxed);
        index
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?;
    Ok((index, has_data))
}
