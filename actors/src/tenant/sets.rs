//! What the tenant's sets share: one node-local vector index per set (exact below the
//! storage index's threshold, HNSW above it, built from the stored embeddings), question
//! normalisation and ids.

use engram_storage::vector::{VectorConfig, VectorIndex};

/// The vector index of one set, made with the dimension of the first vector it is given.
#[derive(Default)]
pub(super) struct SetIndex {
    vectors: Option<VectorIndex>,
}

impl SetIndex {
    /// Indexes `vector` under `id` (an empty vector, stored without an encoder, is not
    /// indexed; one of another dimension is refused and logged).
    pub(super) fn upsert(&mut self, id: &str, vector: &[f32]) {
        if vector.is_empty() {
            self.remove(id);
            return;
        }
        let index = match &mut self.vectors {
            Some(index) => index,
            empty @ None => match VectorIndex::new(VectorConfig::with_dimension(vector.len())) {
                Ok(index) => empty.insert(index),
                Err(err) => {
                    tracing::warn!(error = %err, "shared set's vector index not made");
                    return;
                }
            },
        };
        if let Err(err) = index.upsert(id, vector) {
            tracing::warn!(error = %err, "vector refused by a shared set's index");
        }
    }

    /// Rebuilds the graph without its tombstones once they pass the index's share (entries
    /// expire and are replaced all the time here).
    pub(super) fn maintain(&self) {
        if let Some(index) = self.vectors.as_ref().filter(|i| i.needs_rebuild()) {
            // Off the runtime's other tasks (the actor waits; its requests are serialised).
            let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
            if matches!(flavor, Ok(tokio::runtime::RuntimeFlavor::MultiThread)) {
                tokio::task::block_in_place(|| index.compact());
            } else {
                index.compact();
            }
        }
    }

    pub(super) fn remove(&mut self, id: &str) {
        if let Some(index) = &self.vectors {
            index.remove(id);
        }
    }

    /// The `k` nearest ids passing `filter`, with their cosine similarity, best first.
    pub(super) fn nearest(
        &self,
        query: &[f32],
        k: usize,
        filter: impl Fn(&str) -> bool,
    ) -> Vec<(String, f32)> {
        match &self.vectors {
            Some(index) => index.search(query, k, filter).unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

/// A question as the sets compare it: trimmed, whitespace collapsed, lower case, without
/// trailing question marks or full stops (ASCII and CJK).
pub fn normalise_question(question: &str) -> String {
    let collapsed = question.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed
        .trim_end_matches(['?', '？', '.', '。', '!', '！'])
        .trim()
        .to_lowercase()
}

/// A stable id of the parts (hex of a SHA-256 over them, separated).
pub(super) fn id_of(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0xff]);
    }
    let digest = hasher.finalize();
    digest[..12].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_that_differ_in_case_spacing_and_final_marks_normalise_alike() {
        assert_eq!(
            normalise_question("  How many  ORDERS last week?? "),
            "how many orders last week"
        );
        assert_eq!(normalise_question("上周有多少订单？"), "上周有多少订单");
        assert_eq!(normalise_question("a.b"), "a.b", "inner marks stay");
    }

    #[test]
    fn ids_separate_their_parts() {
        assert_ne!(id_of(&["ab", "c"]), id_of(&["a", "bc"]));
        assert_eq!(id_of(&["a", "b"]).len(), 24);
    }
}
