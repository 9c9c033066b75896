//! An agent's derived state: pure, in core (`engram_core::state`); here so
//! that the backends name it where they name the rest of the store.

pub use engram_core::state::{AgentMeta, Derived, Discarded, microcompacted};
