//! The memory model (docs/architecture.md, "Memory model") as pure functions over stored
//! types: policies, entity extraction, text measures, formation, conflict resolution and
//! context assembly.
//!
//! Nothing here does I/O or reads a clock: the user actor loads what it needs, calls these
//! functions with the current time, and writes the outcome in one transaction.

pub mod conflict;
pub mod context;
pub mod entities;
pub mod fallback;
pub mod formation;
pub mod index;
pub mod intent;
pub mod pii;
pub mod policy;
pub mod retrieve;
pub mod temporal;
pub mod text;
