//! Engram under attack, as a user's bad day would bring it: `chaos` kills
//! the real binary with SIGKILL under concurrent writers and compactions;
//! `fuzz` sends seeded hostile requests to every RPC. `make chaos` runs
//! the long versions; `make test` runs short ones (engram-server's
//! `tests/it/chaos.rs`).

pub mod chaos;
pub mod daemon;
pub mod fuzz;
pub mod hostile;
pub mod raw;
pub mod slow_llm;
