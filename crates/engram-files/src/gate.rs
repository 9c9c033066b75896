//! The gate a DeleteUser closes over its user's bindings (`users.rs`):
//! kept in the user's shared slot (`blocks::Shared::erasing`), met by
//! every write that binds an agent to a user. On its own so that the slot
//! and the binders need nothing of each other.

use std::sync::Arc;

/// Closed while a DeleteUser of the user runs: held by the erasure, kept
/// in the user's shared slot (`blocks::Shared::erasing`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate(Arc<tokio::sync::Mutex<()>>);

impl Gate {
    /// Closes a new gate: it stays closed while the guard lives.
    pub(crate) fn closed() -> (Self, tokio::sync::OwnedMutexGuard<()>) {
        let gate = Self::default();
        let guard = Arc::clone(&gate.0)
            .try_lock_owned()
            .expect("a new gate is open");
        (gate, guard)
    }

    /// Returns once the erasure that closed the gate has ended (or failed,
    /// or was dropped).
    pub(crate) async fn passed(self) {
        drop(self.0.lock().await);
    }

    /// The gate if an erasure still holds it: one that failed or was
    /// dropped before it opened its gate left it behind, and it is cleared.
    pub(crate) fn live(slot: &mut Option<Gate>) -> Option<Gate> {
        let gate = slot.as_ref()?;
        if gate.0.try_lock().is_ok() {
            *slot = None;
            return None;
        }
        Some(gate.clone())
    }
}

/// What [`crate::FileStore::mark_user`] did.
#[must_use]
pub(crate) enum Mark {
    /// The agent is marked (now or before).
    Made,
    /// A DeleteUser of the user is under way and nothing was marked: the
    /// caller releases the agent's lock, waits for the gate and starts
    /// over, so that its binding lands after the erasure.
    Wait(Gate),
}
