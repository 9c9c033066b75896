//! SearchHistory and Retrieve(query) on the database.
//!
//! MATCH_ALL_WORDS reads the agent's traces newest first — active, then
//! archived, as the file store does — in keyset pages of the primary key,
//! matching each with the file store's own rule, so memory stays bounded
//! and a page token (the last place read) stays valid between calls.
//! Ranked search is in `ranked`.

use async_trait::async_trait;
use engram_core::{AgentId, CoreError};
use engram_store::search::Query;
use engram_store::{Hit, IndexState, Result, Search, SearchPage, Searches, StoreError};

use crate::{PgStore, db};

/// Traces read per round trip.
const BATCH: i64 = 256;

/// A place in the reading order: (archived, seq), read newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    archived: bool,
    seq: i64,
}

impl Place {
    fn token(self) -> String {
        format!("{}{}", if self.archived { 'r' } else { 'a' }, self.seq)
    }

    fn parse(token: &str) -> Option<Self> {
        let (kind, n) = token.split_at_checked(1)?;
        let seq = n.parse().ok()?;
        match kind {
            "a" => Some(Self {
                archived: false,
                seq,
            }),
            "r" => Some(Self {
                archived: true,
                seq,
            }),
            _ => None,
        }
    }
}

#[async_trait]
impl Searches for PgStore {
    async fn search_all_words(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        self.all_words(id, search).await
    }
}

impl PgStore {
    /// NOT_FOUND unless the agent exists.
    async fn exists(&self, id: &AgentId) -> Result<()> {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1)")
            .bind(id.as_str())
            .fetch_one(&self.inner.pool)
            .await
            .map_err(db("reading an agent"))?;
        if !exists {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(())
    }

    async fn all_words(&self, id: &AgentId, search: &Search) -> Result<SearchPage> {
        let query = Query::parse(search)?;
        let mut after = match search.page_token.as_deref() {
            Some(t) => Some(Place::parse(t).ok_or_else(|| {
                CoreError::Invalid(
                    "page_token is not one this server issued; pass next_page_token unchanged"
                        .into(),
                )
            })?),
            None => None,
        };
        self.exists(id).await?;
        let mut hits = Vec::new();
        loop {
            // Rows after `after` in the order (archived, seq DESC).
            let (archived, seq) = after.map_or((false, i64::MAX), |p| (p.archived, p.seq));
            let rows: Vec<(bool, i64, String)> = sqlx::query_as(
                "SELECT archived, seq, body FROM traces
                 WHERE agent_id = $1 AND ((archived = $2 AND seq < $3) OR (archived AND NOT $2))
                 ORDER BY archived, seq DESC LIMIT $4",
            )
            .bind(id.as_str())
            .bind(archived)
            .bind(seq)
            .bind(BATCH)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(db("searching traces"))?;
            let exhausted = (rows.len() as i64) < BATCH;
            for (archived, seq, body) in rows {
                if hits.len() == search.limit {
                    return Ok(page(hits, after));
                }
                let trace = crate::parse_trace(id.as_str(), &body)?;
                after = Some(Place { archived, seq });
                if query.matches(&trace) {
                    hits.push(Hit::all_words(trace, archived));
                }
            }
            if exhausted {
                return Ok(page(hits, None));
            }
        }
    }
}

fn page(hits: Vec<Hit>, next: Option<Place>) -> SearchPage {
    SearchPage {
        hits,
        next_page_token: next.map(Place::token),
        index: IndexState::default(),
    }
}
