//! Ranking across a user's conversations on the database: one search over
//! the rows of all of the user's agents (`Covered::User`: BM25 with the term
//! rarity of all of them, each agent's places in a range of its own),
//! fused with this replica's copy of the user's vectors
//! (`user_vectors.rs`), the current conversation's active transcript left
//! out; each memory names its conversation. Its cost grows with the rows
//! that match, not with the number of conversations.

use engram_core::{AgentId, UserId};
use engram_index::Ranked;
use engram_store::ranked::{place, range};
use engram_store::ranking::{Found, Plan};
use engram_store::{IndexState, Result};
use sqlx::PgConnection;

use crate::covered::{Covered, PlaceOrigins};
use crate::ranked::{first_active, read_back};
use crate::user_vectors::UserCopy;
use crate::words::Hidden;
use crate::{PgStore, db};
use engram_index::pipeline::Wanted;

/// What a ranking over a user gives back: the rankings, where their places
/// lie, and the index state.
type UserRanked<'a> = (Vec<Vec<Ranked>>, PlaceOrigins<'a>, IndexState);

impl PgStore {
    /// A plan over `user`'s conversations (`current`'s active transcript
    /// left out of what a want leaves it out of).
    pub(crate) async fn user_rank(
        &self,
        user: &UserId,
        current: Option<&AgentId>,
        plan: &Plan,
    ) -> Result<Found> {
        let deadline = plan.wait.map(|wait| std::time::Instant::now() + wait);
        if let (Some(deadline), Some(id)) = (deadline, current) {
            // The current conversation's own items are embedded first.
            self.wait_embedded(id.as_str(), deadline).await?;
        }
        let mut conn = self.conn().await?;
        // Where the current conversation's active transcript starts: what
        // the prompt shows already.
        let archived_only = plan.wants.iter().any(|w| w.archived_only);
        let hidden: Option<(&str, i64)> = match current.filter(|_| archived_only) {
            Some(id) => first_active(&mut conn, id.as_str())
                .await?
                .map(|first| (id.as_str(), first)),
            None => None,
        };
        let slot = self.user_slot(user);
        let (copy, traces) = self.caught_up_user(&mut conn, &slot, user).await?;
        let active = hidden.and_then(|(id, first)| {
            let ordinal = copy.placing.ordinal(id)?;
            Some((place(ordinal, first as u64), range(ordinal).1))
        });
        let wants = plan
            .wants
            .iter()
            .map(|w| (w.user_filter(active), w.limit))
            .collect();
        let (ranked, places, state) = self
            .rank_user(
                &mut conn,
                (&copy, traces),
                &plan.query,
                wants,
                (hidden, deadline),
            )
            .await?;
        let who = Covered::User(&copy.placing);
        read_back(&mut conn, &who, &places, plan, ranked, state).await
    }

    /// The rankings `wants` asks for over the user's rows as `copy` places
    /// them (their agents holding `traces` traces), `hidden` left out and
    /// waiting for the index until `deadline`, and the index state of all
    /// of them.
    async fn rank_user<'a>(
        &self,
        conn: &mut PgConnection,
        (copy, traces): (&'a UserCopy, u64),
        query: &str,
        wants: Vec<Wanted>,
        (hidden, deadline): (Hidden<'_>, Option<std::time::Instant>),
    ) -> Result<UserRanked<'a>> {
        let who = Covered::User(&copy.placing);
        // What waits for the model is counted only where there is one
        // (without, every row waits: a count of all of them per search).
        let (memories, pending): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM memories WHERE agent_id = ANY($1) AND live),
                    CASE WHEN $2 THEN
                      (SELECT count(*) FROM traces WHERE agent_id = ANY($1) AND vector IS NULL)
                    + (SELECT count(*) FROM memories WHERE agent_id = ANY($1) AND vector IS NULL AND live)
                    ELSE 0 END",
        )
        .bind(&copy.placing.agents)
        .bind(self.embedder().is_some())
        .fetch_one(&mut *conn)
        .await
        .map_err(db("counting a user's items"))?;
        let docs = traces + memories.unsigned_abs();
        let (ranked, places) = self
            .rank_among(
                conn,
                &who,
                query,
                wants,
                (docs, deadline),
                hidden,
                copy.vectors.as_ref(),
                PlaceOrigins::besides(&copy.places),
            )
            .await?;
        let mut state = IndexState {
            items: docs,
            ..IndexState::default()
        };
        if let Some(embedder) = self.embedder() {
            state.embedded = copy.vectors.as_ref().map_or(0, |v| v.len() as u64);
            state.pending = u64::try_from(pending).unwrap_or(0);
            state.model = embedder.model().to_owned();
        }
        Ok((ranked, places, state))
    }
}
