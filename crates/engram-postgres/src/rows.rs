//! How traces become rows: their columns, the words they are searched by,
//! and one statement that inserts a request's traces.

use engram_core::RawTrace;
use engram_store::{Result, StoreError};
use sqlx::{PgConnection, Postgres};

use crate::db;

/// Postgres's text type refuses NUL; JSON escapes it, but words are raw.
pub(crate) fn words_of(text: &str) -> String {
    text.replace('\0', " ")
}

/// The words an item is searched by: its speaker, what it says and when
/// (as the file store's index holds them).
pub(crate) fn item_words(item: &engram_index::Item) -> String {
    let mut words = item.full_text();
    words.push('\n');
    words.push_str(&engram_index::time::words(item.ts));
    words_of(&words)
}

/// The insert of one agent's traces, bound by [`TraceColumns::bind`]
/// (`$1` the agent); ends before `RETURNING`, so a caller can add a
/// condition. A macro so that statements can `concat!` it.
macro_rules! insert_traces_sql {
    () => {
        "INSERT INTO traces (agent_id, seq, ord, trace_type, trace_id, event_id, ts, body, words)
         SELECT $1, u.seq, u.ord, u.trace_type, u.trace_id, u.event_id, u.ts, u.body, to_tsvector('english', u.words)
         FROM UNNEST($2::bigint[], $3::bigint[], $4::smallint[], $5::text[], $6::text[], $7::float8[], $8::text[], $9::text[])
           AS u(seq, ord, trace_type, trace_id, event_id, ts, body, words)"
    };
}
pub(crate) use insert_traces_sql;

/// Appends `traces` at places `first..` in one statement.
pub(crate) async fn insert_traces(
    tx: &mut PgConnection,
    id: &str,
    first: i64,
    traces: &[RawTrace],
) -> Result<()> {
    if traces.is_empty() {
        return Ok(());
    }
    let cols = trace_columns(first, traces);
    let insert = sqlx::query_as::<_, (i32,)>(concat!(
        "WITH added AS (",
        insert_traces_sql!(),
        " RETURNING length(words) AS lexemes)
         UPDATE agents SET words_total = words_total + (SELECT coalesce(sum(lexemes), 0) FROM added)
         WHERE id = $1
         RETURNING 1",
    ))
    .bind(id);
    cols.bind(insert)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(
                "another write of this agent stored the same event or trace; nothing was written"
                    .into(),
            ),
            _ => db("storing traces")(e),
        })?;
    Ok(())
}

/// Traces as the columns of one multi-row insert (`UNNEST` of arrays).
#[derive(Default)]
pub(crate) struct TraceColumns {
    seqs: Vec<i64>,
    ords: Vec<i64>,
    types: Vec<i16>,
    ids: Vec<String>,
    events: Vec<Option<String>>,
    ts: Vec<f64>,
    bodies: Vec<String>,
    words: Vec<String>,
}

impl TraceColumns {
    /// Binds the columns as the next eight parameters (`$2`…`$9` after
    /// the agent's `$1`).
    pub(crate) fn bind<'q, O>(
        self,
        q: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.seqs)
            .bind(self.ords)
            .bind(self.types)
            .bind(self.ids)
            .bind(self.events)
            .bind(self.ts)
            .bind(self.bodies)
            .bind(self.words)
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.seqs.len()
    }

    /// `other`'s rows after these.
    pub(crate) fn extend(&mut self, other: TraceColumns) {
        self.seqs.extend(other.seqs);
        self.ords.extend(other.ords);
        self.types.extend(other.types);
        self.ids.extend(other.ids);
        self.events.extend(other.events);
        self.ts.extend(other.ts);
        self.bodies.extend(other.bodies);
        self.words.extend(other.words);
    }
}

/// `traces` placed at `first..`; serializing large ones runs off the async
/// workers.
pub(crate) fn trace_columns(first: i64, traces: &[RawTrace]) -> TraceColumns {
    engram_store::offload_over(crate::cache::bytes_of(traces), || {
        let mut cols = TraceColumns {
            seqs: Vec::with_capacity(traces.len()),
            ords: Vec::with_capacity(traces.len()),
            types: Vec::with_capacity(traces.len()),
            ids: Vec::with_capacity(traces.len()),
            events: Vec::with_capacity(traces.len()),
            ts: Vec::with_capacity(traces.len()),
            bodies: Vec::with_capacity(traces.len()),
            words: Vec::with_capacity(traces.len()),
        };
        for (i, t) in traces.iter().enumerate() {
            let item = engram_store::trace_item(t);
            cols.seqs.push(first + i as i64);
            cols.ords.push(item.order as i64);
            cols.types.push(i16::from(item.trace_type));
            cols.ids.push(t.id.clone());
            cols.events.push(t.event_id.clone());
            cols.ts.push(t.ts);
            cols.words.push(item_words(&item));
            cols.bodies.push(item.body);
        }
        cols
    })
}
