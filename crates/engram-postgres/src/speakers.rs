//! The priors on PostgreSQL (`engram_index::Fused::best`): who said each
//! ranked trace (the `name` stored with it) and whether it mostly asks
//! (the opening of a message's text, read as the file store reads it),
//! and which participant the question names, their names and the question
//! analyzed by the database as its words are. The file store knows these
//! from its index; here they are read for the candidates of one search,
//! in two statements.

use std::collections::{HashMap, HashSet};

use engram_index::{ASKING_CHARS, Fused, MESSAGE_TYPES, Params, Said};
use engram_store::Result;
use sqlx::PgConnection;

use crate::covered::{Covered, PlaceOrigins};
use crate::db;

/// Notes on each of `fused` the participant the question names (if it
/// names exactly one of those who said a candidate, and the speaker prior
/// is on) and returns what is known of each candidate trace, by place.
pub(crate) async fn prior(
    conn: &mut PgConnection,
    who: &Covered<'_>,
    query: &str,
    fused: &mut [Option<Fused>],
    places: &PlaceOrigins<'_>,
    params: &Params,
) -> Result<HashMap<u64, Said>> {
    let mut seen = HashSet::new();
    let (mut at, mut agents, mut ords) = (vec![], vec![], vec![]);
    for place in fused.iter().flatten().flat_map(Fused::trace_places) {
        if seen.insert(place)
            && let Some((agent, ord)) = places.locate(who, place)
        {
            at.push(place);
            agents.push(agent);
            ords.push(ord);
        }
    }
    if at.is_empty() {
        return Ok(HashMap::new());
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
    let mut names: Vec<String> = vec![];
    let mut by_place = HashMap::new();
    for (i, name, opening) in read {
        let Some(&place) = usize::try_from(i - 1).ok().and_then(|i| at.get(i)) else {
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
        by_place.insert(place, Said { speaker, asks });
    }
    if names.is_empty() || params.other_speakers >= 1.0 {
        return Ok(by_place);
    }
    let max = i64::try_from(params.max_terms).unwrap_or(64);
    let (terms, name_terms): (Vec<String>, Vec<String>) = sqlx::query_as(
        "SELECT ARRAY(SELECT lexeme FROM unnest(to_tsvector('english', $1)) LIMIT $3),
                ARRAY(SELECT array_to_string(ARRAY(SELECT lexeme FROM unnest(to_tsvector('english', n))), ' ')
                        FROM unnest($2::text[]) WITH ORDINALITY AS x(n, i) ORDER BY i)",
    )
    .bind(query.replace('\0', " "))
    .bind(&names)
    .bind(max)
    .fetch_one(&mut *conn)
    .await
    .map_err(db("analyzing the participants' names"))?;
    let name_terms: Vec<Vec<String>> = name_terms
        .iter()
        .map(|t| t.split_whitespace().map(str::to_owned).collect())
        .collect();
    let named = engram_index::named_one(
        &terms,
        name_terms
            .iter()
            .enumerate()
            .map(|(i, t)| (u32::try_from(i + 1).unwrap_or(u32::MAX), t.as_slice())),
    );
    for f in fused.iter_mut().flatten() {
        f.name(named);
    }
    Ok(by_place)
}
