//! Engram's cross-crate test support: conformance suites run against every implementation of
//! a seam, and helpers that start real processes.
//!
//! The suites themselves live in `tests/tests/*.rs`; this library holds what several of them
//! (and the helper binaries under `src/bin/`) share. Nothing here is used by the product.

pub mod storage_suite;
