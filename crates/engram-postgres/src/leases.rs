//! Compaction leases: the agent row's `compacting_until` keeps other
//! replicas from summarizing the same turns while this one's summarizer
//! runs with no transaction open. A compaction ends by clearing it in its
//! commit (or its abort). When that cannot reach the database — it was
//! restarted or crashed under the compaction — the lease would hold the
//! agent's compactions back until it expires (`compaction_lease`, 10
//! minutes by default). So each replica remembers the leases it took, by
//! their exact expiry: one whose compaction ended without clearing it is
//! an orphan, cleared by the upkeep as soon as the database answers, or
//! taken over by this replica's next compaction of the agent. The expiry
//! identifies the lease, so a lease another replica took since (after
//! this one's ran out) is never touched.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use engram_store::Result;
use sqlx::PgConnection;

use crate::{PgStore, db};

/// The leases this replica took and has not seen cleared.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    /// `compacting_until` in microseconds since the epoch, as written.
    until: i64,
    /// The compaction ended without clearing it.
    orphaned: bool,
}

impl Leases {
    fn taken(&self, id: &str, until: i64) {
        let held = Held {
            until,
            orphaned: false,
        };
        engram_store::lock(&self.held).insert(id.to_owned(), held);
    }

    /// The compaction of `id` is over; its lease was cleared, or not.
    pub(crate) fn ended(&self, id: &str, cleared: bool) {
        let mut held = engram_store::lock(&self.held);
        if cleared {
            held.remove(id);
        } else if let Some(lease) = held.get_mut(id) {
            lease.orphaned = true;
        }
    }

    fn orphaned(&self, id: &str, until: i64) -> bool {
        engram_store::lock(&self.held)
            .get(id)
            .is_some_and(|l| l.orphaned && l.until == until)
    }

    fn orphans(&self) -> Vec<(String, i64)> {
        engram_store::lock(&self.held)
            .iter()
            .filter(|(_, l)| l.orphaned)
            .map(|(id, l)| (id.clone(), l.until))
            .collect()
    }

    fn forget(&self, id: &str, until: i64) {
        let mut held = engram_store::lock(&self.held);
        if held.get(id).is_some_and(|l| l.until == until) {
            held.remove(id);
        }
    }
}

/// `compacting_until` in microseconds (exact: `extract` is numeric).
const UNTIL_US: &str = "(extract(epoch FROM compacting_until) * 1000000)::bigint";

impl PgStore {
    /// Whether another compaction of `id` is under way: a lease that has
    /// not run out and is not this replica's orphan (which this call may
    /// take over).
    pub(crate) async fn leased(&self, tx: &mut PgConnection, id: &str) -> Result<bool> {
        let until: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT CASE WHEN compacting_until > now() THEN {UNTIL_US} END FROM agents WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .map_err(db("reading a compaction lease"))?;
        Ok(until.is_some_and(|until| !self.inner.leases.orphaned(id, until)))
    }

    /// Takes the lease of `id` for `lease` in `tx`; remembered once `tx`
    /// commits (`lease_taken`).
    pub(crate) async fn take_lease(
        tx: &mut PgConnection,
        id: &str,
        lease: Duration,
    ) -> Result<i64> {
        sqlx::query_scalar(&format!(
            "UPDATE agents SET compacting_until = now() + make_interval(secs => $2) WHERE id = $1 RETURNING {UNTIL_US}"
        ))
        .bind(id)
        .bind(lease.as_secs_f64())
        .fetch_one(&mut *tx)
        .await
        .map_err(db("writing a compaction lease"))
    }

    pub(crate) fn lease_taken(&self, id: &str, until: i64) {
        self.inner.leases.taken(id, until);
    }

    pub(crate) fn leases(&self) -> &Leases {
        &self.inner.leases
    }

    /// Clears the orphaned leases the database can be told of now
    /// (the upkeep's, every few seconds).
    pub(crate) async fn clear_orphaned_leases(&self) {
        for (id, until) in self.inner.leases.orphans() {
            let cleared = sqlx::query(&format!(
                "UPDATE agents SET compacting_until = NULL WHERE id = $1 AND {UNTIL_US} = $2"
            ))
            .bind(&id)
            .bind(until)
            .execute(&self.inner.pool)
            .await;
            match cleared {
                // Cleared, or another lease (or none) is there now.
                Ok(_) => self.inner.leases.forget(&id, until),
                Err(_) => return, // still out of reach: the next round
            }
        }
    }
}

/// Clears the lease of `id` in `tx` (a compaction's commit or abort).
pub(crate) async fn clear_lease(tx: &mut PgConnection, id: &str) -> Result<()> {
    sqlx::query("UPDATE agents SET compacting_until = NULL WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(db("clearing a compaction lease"))?;
    Ok(())
}
