//! A compaction's commit as written down before any change (see
//! `engram_core::state::intent`).

pub use engram_core::state::Intent;
