//! The row statements of a forget's erasure (`forget.rs` runs them in its
//! transaction, under the locks it takes): what held the erased traces'
//! text, or was drawn from it, deleted or written again without it.

use std::collections::HashSet;

use engram_core::UserId;
use engram_core::facts;
use engram_core::forget::Erasure;
use engram_core::memory::{EpisodicItem, SemanticItem};
use engram_core::spill::spill_path;
use engram_core::users::LastConversation;
use engram_store::Result;
use sqlx::PgConnection;

use crate::db;

/// Carries out `erasure` for agent `id` (of `user`, whose scope lock the
/// caller holds) whose facts are `semantic`, at `now`: every row but the
/// agent's own. `gap` ends a sitting.
pub(crate) async fn erase(
    tx: &mut PgConnection,
    (id, user): (&str, Option<&UserId>),
    erasure: &Erasure,
    semantic: &[SemanticItem],
    (now, gap): (f64, f64),
) -> Result<()> {
    let traces: Vec<&str> = erasure.trace_ids.iter().map(String::as_str).collect();
    // Their words leave BM25's average length too; their places and times
    // say which traces were embedded after them.
    let placed: Vec<(i64, f64)> = sqlx::query_as(
        "WITH gone AS (DELETE FROM traces WHERE agent_id = $1 AND trace_id = ANY($2)
                       RETURNING ord, ts, length(words) AS lexemes),
              counted AS (UPDATE agents
                          SET words_total = greatest(words_total - (SELECT coalesce(sum(lexemes), 0) FROM gone), 0)
                          WHERE id = $1)
         SELECT ord, ts FROM gone",
    )
    .bind(id)
    .bind(&traces)
    .fetch_all(&mut *tx)
    .await
    .map_err(db("erasing traces"))?;
    // The trace after an erased one, of its sitting, was embedded after its
    // text (`engram_store::context_of`): it is embedded again after the
    // trace now before it.
    embed_again_after(tx, id, placed, gap).await?;
    // By the path every erased trace's whole result would be stored at
    // (`spill_path`): the spilled ones are among them, and a row of
    // another is not left behind whatever its trace says.
    let spilled: Vec<String> = erasure.trace_ids.iter().map(|t| spill_path(t)).collect();
    sqlx::query("DELETE FROM spills WHERE agent_id = $1 AND path = ANY($2)")
        .bind(id)
        .bind(&spilled)
        .execute(&mut *tx)
        .await
        .map_err(db("erasing tool results"))?;
    for item in &erasure.hidden {
        store_summary(tx, id, item).await?;
    }
    sqlx::query("DELETE FROM memories WHERE agent_id = $1 AND kind = 'e' AND id = ANY($2)")
        .bind(id)
        .bind(&erasure.dropped)
        .execute(&mut *tx)
        .await
        .map_err(db("erasing summaries"))?;
    delete_facts(tx, id, &erasure.facts, semantic, now).await?;
    if let Some(user) = user {
        let gone: HashSet<&str> = erasure
            .hidden
            .iter()
            .map(|h| h.id.as_str())
            .chain(erasure.dropped.iter().map(String::as_str))
            .collect();
        forget_in_last_conversation(tx, user, id, &gone).await?;
    }
    Ok(())
}

/// Stores a summary over its row: shown, with its words; or hidden
/// (`rewriting`), with none and not live. Its vector is dropped either
/// way (the text changed: embedded again once shown), and a claim on it
/// voided, so an indexer that embedded the old text stores nothing
/// (`vectors::store_vectors`).
pub(crate) async fn store_summary(tx: &mut PgConnection, id: &str, e: &EpisodicItem) -> Result<()> {
    let item = engram_store::episodic_item(e);
    let shown = e.is_shown();
    let words = if shown {
        crate::rows::item_words(&item)
    } else {
        String::new()
    };
    sqlx::query(
        "INSERT INTO memories (agent_id, kind, id, body, ord, ts, live, words)
         VALUES ($1, 'e', $2, $3, $4, $5, $6, to_tsvector('english', $7))
         ON CONFLICT (agent_id, kind, id) DO UPDATE
         SET body = excluded.body, ord = excluded.ord, ts = excluded.ts, live = excluded.live,
             words = excluded.words, vector = NULL, vector_model = NULL, embed_claimed = NULL,
             vector_seq = nextval('vector_seq')",
    )
    .bind(id)
    .bind(&item.key)
    .bind(&item.body)
    .bind(item.order as i64)
    .bind(item.ts)
    .bind(shown)
    .bind(words)
    .execute(&mut *tx)
    .await
    .map_err(db("storing a summary"))?;
    Ok(())
}

/// Deletes the facts `ids` as DeleteMemory does: a tombstone as the last
/// version, every version's text scrubbed, the row without words or
/// vector. The version each one had is kept scrubbed (its text never
/// reaches a version row).
async fn delete_facts(
    tx: &mut PgConnection,
    id: &str,
    ids: &[String],
    semantic: &[SemanticItem],
    now: f64,
) -> Result<()> {
    for fact in ids {
        let last = semantic
            .iter()
            .find(|f| f.id == *fact && f.managed.deleted_at.is_none());
        let Some(last) = last else {
            continue;
        };
        let tombstone = facts::tombstone(last, now);
        crate::facts::store_version(tx, id, Some(&facts::scrubbed(last)), &tombstone).await?;
        crate::facts::scrub(tx, id, fact).await?;
    }
    Ok(())
}

/// The user's last conversation, if it is this agent's, without the
/// summaries `gone` (hidden or removed); none left, none kept.
async fn forget_in_last_conversation(
    tx: &mut PgConnection,
    user: &UserId,
    id: &str,
    gone: &HashSet<&str>,
) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    let last: Option<String> =
        sqlx::query_scalar("SELECT last FROM user_conversations WHERE user_id = $1")
            .bind(user.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(db("reading a user's last conversation"))?;
    let Some(last) = last else {
        return Ok(());
    };
    let last: LastConversation = serde_json::from_str(&last)
        .map_err(|e| crate::broken(format!("a user's last conversation does not parse: {e}")))?;
    if last.agent_id != id || !last.summaries.iter().any(|s| gone.contains(s.id.as_str())) {
        return Ok(());
    }
    let kept: Vec<EpisodicItem> = last
        .summaries
        .into_iter()
        .filter(|s| !gone.contains(s.id.as_str()))
        .collect();
    let written = match LastConversation::of(id, &kept) {
        Some(last) => {
            sqlx::query("UPDATE user_conversations SET last = $2 WHERE user_id = $1")
                .bind(user.as_str())
                .bind(serde_json::to_string(&last).expect("summaries serialize"))
                .execute(&mut *tx)
                .await
        }
        None => {
            sqlx::query("DELETE FROM user_conversations WHERE user_id = $1")
                .bind(user.as_str())
                .execute(&mut *tx)
                .await
        }
    };
    written.map_err(db("storing a user's last conversation"))?;
    Ok(())
}

/// Drops the vector of the trace right after each of `placed` (places and
/// times) that is no more than `gap` seconds from it, to be embedded again
/// after the trace now before it: it was embedded after another text
/// (`engram_store::context_of`), or alone. For a place erased, or one
/// written before traces the agent held (a late tool result, whose
/// next trace is dropped whatever the gap).
pub(crate) async fn embed_again_after(
    tx: &mut PgConnection,
    id: &str,
    placed: Vec<(i64, f64)>,
    gap: f64,
) -> Result<()> {
    if placed.is_empty() {
        return Ok(());
    }
    let (ords, times): (Vec<i64>, Vec<f64>) = placed.into_iter().unzip();
    sqlx::query(
        "UPDATE traces t SET vector = NULL, vector_model = NULL, embed_claimed = NULL,
                             vector_seq = nextval('vector_seq')
         FROM (SELECT n.seq FROM unnest($2::bigint[], $3::float8[]) AS g(ord, ts)
               CROSS JOIN LATERAL (SELECT seq, ts FROM traces
                                   WHERE agent_id = $1 AND ord > g.ord ORDER BY ord LIMIT 1) n
               WHERE abs(n.ts - g.ts) <= $4) a
         WHERE t.agent_id = $1 AND t.seq = a.seq",
    )
    .bind(id)
    .bind(&ords)
    .bind(&times)
    .bind(gap)
    .execute(&mut *tx)
    .await
    .map_err(db("dropping the vectors embedded after other text"))?;
    Ok(())
}
