//! The priors' primitives on PostgreSQL: who said each trace asked about
//! (the `name` stored with it) and whether it mostly asks (the opening of
//! a message's text, read as the file store reads it), and the names'
//! terms, analyzed by the database as a question's words are. The file
//! store knows these from its index; here they are read for the
//! candidates of one search, in two statements.

use engram_index::{ASKING_CHARS, MESSAGE_TYPES, Said};
use engram_store::Result;
use sqlx::PgConnection;

use crate::covered::{Covered, PlaceOrigins};
use crate::db;

/// What is known of the trace at each of `at` (in order; nothing for a
/// place no longer there), its speaker an index into `names`, which gains
/// the names not yet in it (each normalized, once).
pub(crate) async fn said(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    at: &[u64],
    places: &PlaceOrigins<'_>,
    names: &mut Vec<String>,
) -> Result<Vec<Said>> {
    let (mut asked, mut agents, mut ords) = (vec![], vec![], vec![]);
    for (i, &place) in at.iter().enumerate() {
        if let Some((agent, ord)) = places.locate(who, place) {
            asked.push(i);
            agents.push(agent);
            ords.push(ord);
        }
    }
    let mut out = vec![Said::default(); at.len()];
    if asked.is_empty() {
        return Ok(out);
    }
    // The name and a message's opening from the stored trace (JSON text:
    // cast only where it holds no \u0000, which jsonb cannot). A message's
    // text is its content, as the file store indexes it.
    let messages: Vec<i16> = MESSAGE_TYPES.iter().map(|&t| i16::from(t)).collect();
    let read: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT p.i, b.j->>'name', CASE WHEN t.trace_type = ANY($3) THEN left(b.j->>'content', $4) END
           FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS p(agent, ord, i)
           JOIN traces t ON t.agent_id = p.agent AND t.ord = p.ord
           CROSS JOIN LATERAL (SELECT CASE WHEN strpos(t.body, '\\u0000') = 0 THEN t.body::jsonb END) AS b(j)",
    )
    .bind(&agents)
    .bind(&ords)
    .bind(&messages)
    .bind(i32::try_from(ASKING_CHARS).unwrap_or(i32::MAX))
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading who said the candidates"))?;
    for (i, name, opening) in read {
        let Some(&slot) = usize::try_from(i - 1).ok().and_then(|i| asked.get(i)) else {
            continue;
        };
        let name = engram_index::rank::speaker_name(&name.unwrap_or_default());
        let speaker = (!name.is_empty()).then(|| {
            let id = match names.iter().position(|n| *n == name) {
                Some(k) => k + 1,
                None => {
                    names.push(name);
                    names.len()
                }
            };
            u32::try_from(id).unwrap_or(u32::MAX)
        });
        let asks = opening.is_some_and(|o| engram_index::mostly_asks(&o));
        out[slot] = Said { speaker, asks };
    }
    Ok(out)
}

/// Each of `names` as the database analyzes a question's words.
pub(crate) async fn name_terms(
    conn: &mut PgConnection,
    names: &[&str],
) -> Result<Vec<Vec<String>>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let joined: Vec<String> = sqlx::query_scalar(
        "SELECT array_to_string(ARRAY(SELECT lexeme FROM unnest(to_tsvector('english', n))), ' ')
           FROM unnest($1::text[]) WITH ORDINALITY AS x(n, i) ORDER BY i",
    )
    .bind(names)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("analyzing the participants' names"))?;
    Ok(joined
        .iter()
        .map(|t| t.split_whitespace().map(str::to_owned).collect())
        .collect())
}
