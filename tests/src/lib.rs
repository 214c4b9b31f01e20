//! Engram's cross-crate test support: conformance suites run against every implementation of
//! a seam, the harness that starts real node processes, and the load generator's workload.
//!
//! The suites themselves live in `tests/tests/*.rs`; this library holds what several of them
//! (and the helper binaries under `src/bin/`) share. Nothing here is used by the product, and
//! nothing here depends on `engram-node`: the harness talks to the node binary over HTTP.

pub mod chaos;
pub mod harness;
pub mod history;
pub mod lab_cluster;
pub mod load;
pub mod modules;
pub mod netns;
pub mod retrieval;
pub mod storage_suite;
