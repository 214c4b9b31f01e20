//! Engram's inference: tokenizers, encoders and LLMs on libtorch, the inference actor pool,
//! and the rule-based distillation that runs before any model.
//!
//! Architecture invariants:
//! - This crate depends on no other workspace crate and does no storage or network I/O: it
//!   turns text into vectors and structure.
//! - Models load only from local files installed by the set-up scripts and verified by
//!   sha256; nothing is fetched from a model hub at run time.
//!
//! The encoders and the pool are not built yet: this crate is the seam they will fill.
