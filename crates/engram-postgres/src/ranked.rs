//! A ranked read's plan (`engram_store::ranking`) on the database, for one
//! agent: `engram_index::pipeline` over the database's primitives
//! (`source.rs`) and this replica's copy of the agent's vectors
//! (`vectors.rs`), the ranked items read back from the rows
//! (`recalled.rs`). A user's conversations are ranked the same way,
//! together (`user_rank.rs`).

use async_trait::async_trait;
use engram_core::AgentId;
use engram_index::pipeline::{self, Wanted};
use engram_index::{Ranked, Vectors};
use engram_store::ranking::{Found, Over, Plan};
use engram_store::{IndexState, Ranks, Result, StoreError};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::covered::{Covered, PlaceOrigins};
use crate::recalled::materialize;
use crate::source::PgSource;
use crate::words::Hidden;
use crate::{PgStore, db};

#[async_trait]
impl Ranks for PgStore {
    async fn rank(&self, over: Over<'_>, plan: &Plan) -> Result<Found> {
        match over {
            Over::Agent(id) => self.agent_rank(id, plan).await,
            Over::User { user, current } => self.user_rank(user, current, plan).await,
        }
    }

    fn expect_query(&self, text: &str) {
        if let Some(embedder) = self.embedder() {
            engram_store::expect_query(std::sync::Arc::clone(embedder), text);
        }
    }

    async fn index_state(&self, id: &AgentId) -> Result<IndexState> {
        let mut conn = self.conn().await?;
        let (state, incarnation) = state(&mut conn, id.as_str()).await?;
        let handle = self.handle(id.as_str());
        let embedded = self
            .vectors(&mut conn, id.as_str(), incarnation, &handle.vectors)
            .await?
            .map_or(0, |v| v.as_ref().map_or(0, |v| v.vectors.len()));
        self.with_vectors(&mut conn, id.as_str(), state, embedded)
            .await
    }
}

impl PgStore {
    /// A plan over one agent's rows.
    async fn agent_rank(&self, id: &AgentId, plan: &Plan) -> Result<Found> {
        let mut conn = self.conn().await?;
        let first_active = first_active(&mut conn, id.as_str()).await?;
        let wants = plan
            .wants
            .iter()
            .map(|w| (w.agent_filter(first_active.map(|o| o as u64)), w.limit))
            .collect();
        let (ranked, places, state) = self
            .ranking(&mut conn, id.as_str(), &plan.query, wants, plan.wait)
            .await?;
        let who = Covered::Agent(id.as_str());
        read_back(&mut conn, &who, &places, plan, ranked, state).await
    }

    /// The rankings `wants` asks for over one agent, where their places
    /// are, and the index state.
    async fn ranking(
        &self,
        conn: &mut PgConnection,
        id: &str,
        query: &str,
        wants: Vec<Wanted>,
        wait: Option<std::time::Duration>,
    ) -> Result<(Vec<Vec<Ranked>>, PlaceOrigins<'static>, IndexState)> {
        let deadline = wait.map(|wait| std::time::Instant::now() + wait);
        if let Some(deadline) = deadline {
            self.wait_embedded(id, deadline).await?;
        }
        let (state, incarnation) = state(conn, id).await?;
        let who = Covered::Agent(id);
        let handle = self.handle(id);
        let held = self.vectors(conn, id, incarnation, &handle.vectors).await?;
        let copy = held.as_deref().and_then(|v| v.as_ref()).map(|c| &c.vectors);
        let (ranked, places) = self
            .rank_among(
                conn,
                &who,
                query,
                wants,
                (state.items, deadline),
                None,
                copy,
                PlaceOrigins::default(),
            )
            .await?;
        let embedded = copy.map_or(0, Vectors::len);
        drop(held);
        let state = self.with_vectors(conn, id, state, embedded).await?;
        Ok((ranked, places, state))
    }

    /// The rankings `wants` asks for over `who`'s `docs` items, `hidden`
    /// left out, by the one ranking (`engram_index::pipeline`) over the
    /// database's primitives (`source.rs`): the words ranked while the
    /// query is embedded, then the expansion, sittings, meaning (`vectors`,
    /// none without a model) and the priors. A search that waits for the
    /// index until `deadline` has its vocabulary embedded first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn rank_among<'p>(
        &self,
        conn: &mut PgConnection,
        who: &Covered<'_>,
        query: &str,
        wants: Vec<Wanted>,
        (docs, deadline): (u64, Option<std::time::Instant>),
        hidden: Hidden<'_>,
        vectors: Option<&Vectors>,
        places: PlaceOrigins<'p>,
    ) -> Result<(Vec<Vec<Ranked>>, PlaceOrigins<'p>)> {
        let params = &self.inner.config.ranking;
        let asked = (docs, hidden, deadline);
        let mut source = PgSource::new(self, conn, *who, places, asked, vectors);
        let (query_vector, lexed) = tokio::join!(
            self.query_vector(query),
            pipeline::by_words(&mut source, query, &wants, params)
        );
        let ranked = pipeline::by_meaning(&mut source, lexed?, query_vector.as_deref(), params);
        let ranked = ranked.await?;
        Ok((ranked, source.places))
    }

    /// The query's vector, or `None` (no model; see
    /// [`engram_store::query_vector`]).
    async fn query_vector(&self, query: &str) -> Option<Vec<f32>> {
        engram_store::query_vector(self.embedder()?.as_ref(), query).await
    }
}

/// Where the agent's active transcript starts (what its prompt shows).
pub(crate) async fn first_active(conn: &mut PgConnection, id: &str) -> Result<Option<i64>> {
    sqlx::query_scalar("SELECT min(ord) FROM traces WHERE agent_id = $1 AND NOT archived")
        .bind(id)
        .fetch_one(&mut *conn)
        .await
        .map_err(db("reading an agent"))
}

/// What the agent's search covers by words: every trace and live memory
/// (the database indexes a row's words as it is written); and which
/// incarnation of the agent it is.
async fn state(conn: &mut PgConnection, id: &str) -> Result<(IndexState, Uuid)> {
    let row: Option<(i64, Uuid)> = sqlx::query_as(
        "SELECT a.next_seq + (SELECT count(*) FROM memories m WHERE m.agent_id = $1 AND m.live), a.incarnation
         FROM agents a WHERE a.id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
    .map_err(db("reading an agent"))?;
    let (items, incarnation) = row.ok_or_else(|| StoreError::NotFound(id.to_owned()))?;
    let state = IndexState {
        items: u64::try_from(items).unwrap_or(0),
        ..IndexState::default()
    };
    Ok((state, incarnation))
}

/// What `plan` asked of `ranked` (each want's `read` range), read back.
pub(crate) async fn read_back(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    places: &PlaceOrigins<'_>,
    plan: &Plan,
    ranked: Vec<Vec<Ranked>>,
    index: IndexState,
) -> Result<Found> {
    let mut found = Found {
        index,
        ..Found::default()
    };
    for (want, ranked) in plan.wants.iter().zip(ranked) {
        let page = want.to_read(&ranked);
        found
            .read
            .push(materialize(conn, who, places, page, want.context).await?);
        found.ranked.push(ranked.len());
    }
    Ok(found)
}
