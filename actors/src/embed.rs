//! The user actors' view of the node's embedding pool: passages (what is stored) and queries
//! (what is searched for) in, vectors out, with the pool's errors mapped to the actors' own.
//!
//! Embeddings are always computed before a write transaction starts, never inside it, so a
//! slow or overloaded pool delays or refuses the write (503, retry with the same request id)
//! without holding storage. Every call names the user's tenant, the pool's fairness key: a
//! tenant holds at most its share of the queue and takes its turn in batches with the others.

use engram_inference::{EmbeddingPool, ModelKind, TextRole};

use crate::error::{Error, Result};

/// A handle to the node's embedding pool and the model it runs.
#[derive(Clone)]
pub struct Embedder {
    pool: EmbeddingPool,
    model: ModelKind,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Wraps a running pool of `model` encoders.
    pub fn new(pool: EmbeddingPool, model: ModelKind) -> Self {
        Embedder { pool, model }
    }

    /// The pool (for its metrics and shutdown).
    pub fn pool(&self) -> &EmbeddingPool {
        &self.pool
    }

    /// The model's name, stored with every embedding.
    pub fn model_name(&self) -> &'static str {
        self.model.name()
    }

    /// The cosine above which two topic phrases are the same topic.
    pub fn topic_threshold(&self) -> f32 {
        self.model.same_topic_threshold()
    }

    /// Embeddings of stored texts of a user of `tenant`, in order.
    pub async fn passages(&self, tenant: &str, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        self.embed(tenant, texts, TextRole::Passage).await
    }

    /// The embedding of a search query of a user of `tenant`.
    pub async fn query(&self, tenant: &str, text: &str) -> Result<Vec<f32>> {
        let mut vectors = self
            .embed(tenant, vec![text.to_owned()], TextRole::Query)
            .await?;
        vectors
            .pop()
            .ok_or_else(|| Error::Internal("the embedding pool returned no vector".into()))
    }

    async fn embed(
        &self,
        tenant: &str,
        texts: Vec<String>,
        role: TextRole,
    ) -> Result<Vec<Vec<f32>>> {
        let n = texts.len();
        use engram_inference::Error as E;
        let vectors = self
            .pool
            .embed_for(tenant, texts, role)
            .await
            .map_err(|err| match err {
                E::Overloaded { .. } => Error::Overloaded(err.to_string()),
                E::PoolClosed => Error::Unavailable(err.to_string()),
                E::ModelMissing { .. }
                | E::Io { .. }
                | E::Format { .. }
                | E::Tokenizer { .. }
                | E::Torch(_)
                | E::DeviceUnavailable { .. }
                | E::WorkerFailed
                | E::BatchFailed(_)
                | E::PoolStart { .. } => Error::Internal(format!("embedding failed: {err}")),
            })?;
        if vectors.len() == n {
            Ok(vectors)
        } else {
            Err(Error::Internal(format!(
                "the embedding pool returned {} vectors for {n} texts",
                vectors.len()
            )))
        }
    }
}
