//! The vocabulary query expansion draws on, on PostgreSQL
//! (`engram_index::rank::expansion` says why): each agent's distinct plain
//! words, and how many of its rows hold each lexeme. The database's word
//! index is stemmed ("puppi"), so the words a model can read are taken
//! from the rows' bodies, as the file store's index takes them from the
//! text. Each agent's are read once and kept by this replica; a write adds
//! rows, read on from the last one kept (by `seq`, traces and memories
//! each); a compaction, a forget or a changed fact moves the agent's
//! generation, and its rows are read again in full, so an erased word
//! leaves the vocabulary with its rows.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use engram_index::words::plain_words;
use engram_index::{Kind, WordVectors};
use engram_store::Result;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db;

/// Words and lexemes a replica keeps at most, over all agents (about 50
/// bytes each): past it, it starts over (a search reads an agent's again).
const MAX_KEPT: usize = 500_000;

/// Words whose lexeme a replica remembers at most (stemming does not
/// depend on the agent); past it, it starts over.
const MAX_LEXEMES: usize = 200_000;

/// One agent's vocabulary as of its last rows read.
#[derive(Debug, Default)]
pub(crate) struct AgentVocabulary {
    incarnation: Uuid,
    /// Compactions, forgets and fact changes move it: read again.
    generation: i64,
    /// The last trace and memory read (`seq`).
    traces: i64,
    memories: i64,
    words: BTreeSet<String>,
    /// `words` in order, made again after rows add some.
    listed: Arc<Vec<String>>,
    /// How many of its rows hold each lexeme.
    held: HashMap<String, u64>,
    /// When every word had a vector: the words then, and the table's
    /// evictions (a search then need not look again until either moves).
    known: Option<(usize, u64)>,
}

impl AgentVocabulary {
    fn new(incarnation: Uuid, generation: i64) -> Self {
        Self {
            incarnation,
            generation,
            traces: -1,
            memories: -1,
            ..Self::default()
        }
    }

    /// The words and lexemes kept.
    fn size(&self) -> usize {
        self.words.len() + self.held.len()
    }

    /// A row read: its kind, number, words and (distinct) lexemes. A row
    /// read before (a search that read it meanwhile) is passed over.
    fn add(&mut self, row: Row) {
        let seen = match row.kind {
            Kind::Trace => &mut self.traces,
            _ => &mut self.memories,
        };
        if row.seq <= *seen {
            return;
        }
        *seen = row.seq;
        self.words.extend(row.words);
        for lexeme in row.lexemes {
            *self.held.entry(lexeme).or_default() += 1;
        }
    }

    /// The words, in order.
    pub(crate) fn words(&self) -> &Arc<Vec<String>> {
        &self.listed
    }

    /// Its words `table` has no vector for.
    pub(crate) fn without_vectors(&mut self, table: &WordVectors) -> Vec<String> {
        let stamp = (self.listed.len(), table.evictions());
        if self.known == Some(stamp) {
            return Vec::new();
        }
        let missing = table.missing(self.listed.iter().map(String::as_str));
        if missing.is_empty() {
            self.known = Some(stamp);
        }
        missing
    }

    /// How many rows hold `lexeme`.
    pub(crate) fn held(&self, lexeme: &str) -> u64 {
        self.held.get(lexeme).copied().unwrap_or(0)
    }
}

/// A row as read, its words split off its body.
struct Row {
    kind: Kind,
    seq: i64,
    words: Vec<String>,
    lexemes: Vec<String>,
}

/// An agent as a read finds it, with one row written after those kept,
/// if any (its kind, place, body and lexemes).
#[derive(sqlx::FromRow)]
struct Read {
    id: String,
    incarnation: Uuid,
    generation: i64,
    kind: Option<i8>,
    seq: Option<i64>,
    body: Option<String>,
    lexemes: Option<Vec<String>>,
}

/// Each of `agents` with its traces after `traces` and its live memories
/// after `memories` (by `seq`, memories first, each in order): one
/// statement, so the generation and the rows are of one moment.
async fn read(
    conn: &mut PgConnection,
    agents: &[String],
    traces: &[i64],
    memories: &[i64],
) -> Result<Vec<Read>> {
    sqlx::query_as(
        "SELECT a.id, a.incarnation, a.generation, r.kind, r.seq, r.body, r.lexemes
         FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS s(agent, traces, memories)
         JOIN agents a ON a.id = s.agent
         LEFT JOIN LATERAL (
             SELECT 't'::\"char\" AS kind, t.seq, t.body, tsvector_to_array(t.words) AS lexemes
             FROM traces t WHERE t.agent_id = s.agent AND t.seq > s.traces
             UNION ALL
             SELECT m.kind, m.seq, m.body, tsvector_to_array(m.words)
             FROM memories m WHERE m.agent_id = s.agent AND m.seq > s.memories AND m.live
         ) r ON true
         ORDER BY a.id, r.kind = 't', r.seq",
    )
    .bind(agents)
    .bind(traces)
    .bind(memories)
    .fetch_all(&mut *conn)
    .await
    .map_err(db("reading the agents' vocabulary"))
}

/// The rows of a read, by agent, their words split off their bodies (off
/// the async workers when there are many), with each agent's incarnation
/// and generation.
type Rows = HashMap<String, (Uuid, i64, Vec<Row>)>;

fn rows_of(read: Vec<Read>) -> Rows {
    let bytes: u64 = read
        .iter()
        .map(|r| r.body.as_ref().map_or(0, |b| b.len() as u64))
        .sum();
    engram_store::offload_over(bytes, move || {
        let mut out: Rows = HashMap::new();
        for Read {
            id,
            incarnation,
            generation,
            kind,
            seq,
            body,
            lexemes,
        } in read
        {
            let agent = out
                .entry(id)
                .or_insert_with(|| (incarnation, generation, Vec::new()));
            let (Some(kind), Some(seq), Some(body)) = (kind, seq, body) else {
                continue;
            };
            let kind = match kind as u8 {
                b'e' => Kind::Episodic,
                b's' => Kind::Semantic,
                _ => Kind::Trace,
            };
            // A body that does not parse (none should) adds no word; its
            // lexemes still count, as its row is searched by them.
            let text = engram_store::searched_text(kind, &body).unwrap_or_default();
            agent.2.push(Row {
                kind,
                seq,
                words: plain_words(&text).collect(),
                lexemes: lexemes.unwrap_or_default(),
            });
        }
        out
    })
}

/// One agent's vocabulary, as searches share it.
pub(crate) type Shared = Arc<Mutex<AgentVocabulary>>;

/// A replica's agents' vocabularies, and the lexemes of words it looked up.
#[derive(Debug, Default)]
pub(crate) struct VocabularyCache {
    /// By agent, and how many words and lexemes they hold together.
    held: Mutex<(HashMap<String, Shared>, usize)>,
    lexemes: Mutex<HashMap<String, Option<String>>>,
}

impl VocabularyCache {
    /// The vocabularies of `agents` (those that exist), caught up with
    /// their rows: one statement reads every agent's generation and its
    /// rows written since those kept; an agent whose generation moved is
    /// read again in full.
    pub(crate) async fn of(
        &self,
        conn: &mut PgConnection,
        agents: &[String],
    ) -> Result<Vec<Shared>> {
        let kept: Vec<Option<Shared>> = {
            let held = engram_store::lock(&self.held);
            agents.iter().map(|a| held.0.get(a).cloned()).collect()
        };
        let seen = |f: fn(&AgentVocabulary) -> i64| -> Vec<i64> {
            kept.iter()
                .map(|k| k.as_ref().map_or(-1, |v| f(&engram_store::lock(v))))
                .collect()
        };
        let (traces, memories) = (seen(|v| v.traces), seen(|v| v.memories));
        let mut rows = rows_of(read(conn, agents, &traces, &memories).await?);
        let stale: Vec<String> = agents
            .iter()
            .zip(&kept)
            .filter_map(|(id, k)| {
                let (incarnation, generation, _) = rows.get(id)?;
                let v = engram_store::lock(k.as_ref()?);
                let moved = v.incarnation != *incarnation || v.generation != *generation;
                moved.then(|| id.clone())
            })
            .collect();
        if !stale.is_empty() {
            let all = vec![-1; stale.len()];
            rows.extend(rows_of(read(conn, &stale, &all, &all).await?));
        }
        let mut out = Vec::with_capacity(agents.len());
        for (id, kept) in agents.iter().zip(kept) {
            let Some((incarnation, generation, rows)) = rows.remove(id) else {
                // Deleted: what was kept of it goes too.
                self.forget(id);
                continue;
            };
            let (vocabulary, grown) = match kept {
                Some(v) if !stale.contains(id) => {
                    let grown = apply(&mut engram_store::lock(&v), rows);
                    (v, grown)
                }
                _ => {
                    let mut fresh = AgentVocabulary::new(incarnation, generation);
                    let grown = apply(&mut fresh, rows);
                    let fresh = Arc::new(Mutex::new(fresh));
                    self.keep(id, &fresh);
                    (fresh, grown)
                }
            };
            self.count(grown);
            out.push(vocabulary);
        }
        Ok(out)
    }

    /// Holds `vocabulary` as `id`'s, in the place of any before.
    fn keep(&self, id: &str, vocabulary: &Shared) {
        let mut held = engram_store::lock(&self.held);
        if let Some(old) = held.0.insert(id.to_owned(), Arc::clone(vocabulary)) {
            let size = engram_store::lock(&old).size();
            held.1 = held.1.saturating_sub(size);
        }
    }

    /// Notes `grown` more words and lexemes kept; past [`MAX_KEPT`], every
    /// vocabulary is let go (searches in flight keep theirs).
    fn count(&self, grown: usize) {
        let mut held = engram_store::lock(&self.held);
        held.1 += grown;
        if held.1 > MAX_KEPT {
            held.0.clear();
            held.1 = 0;
        }
    }

    /// Lets go of `id`'s vocabulary (a deleted agent).
    pub(crate) fn forget(&self, id: &str) {
        let mut held = engram_store::lock(&self.held);
        if let Some(old) = held.0.remove(id) {
            let size = engram_store::lock(&old).size();
            held.1 = held.1.saturating_sub(size);
        }
    }

    /// The words of `id`'s vocabulary held (tests).
    #[cfg(feature = "testing")]
    pub(crate) fn words_of(&self, id: &str) -> Vec<String> {
        let held = engram_store::lock(&self.held);
        held.0
            .get(id)
            .map(|v| engram_store::lock(v).words().to_vec())
            .unwrap_or_default()
    }

    /// About how many bytes the vocabularies and lexemes held take.
    pub(crate) fn bytes(&self) -> u64 {
        const PER_ENTRY: u64 = 50;
        let kept = engram_store::lock(&self.held).1 as u64;
        let lexemes = engram_store::lock(&self.lexemes).len() as u64;
        PER_ENTRY * (kept + lexemes)
    }

    /// The lexeme of each of `words` as the database's `english`
    /// configuration analyzes it (`None`: a stop word), remembered.
    pub(crate) async fn lexemes(
        &self,
        conn: &mut PgConnection,
        words: &[&str],
    ) -> Result<HashMap<String, Option<String>>> {
        let mut out = HashMap::with_capacity(words.len());
        let mut asked: Vec<String> = Vec::new();
        {
            let known = engram_store::lock(&self.lexemes);
            for w in words {
                match known.get(*w) {
                    Some(l) => {
                        out.insert((*w).to_owned(), l.clone());
                    }
                    None => asked.push((*w).to_owned()),
                }
            }
        }
        if asked.is_empty() {
            return Ok(out);
        }
        let found: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT q.w, (SELECT lexeme FROM unnest(to_tsvector('english', q.w)) LIMIT 1)
             FROM unnest($1::text[]) AS q(w)",
        )
        .bind(&asked)
        .fetch_all(&mut *conn)
        .await
        .map_err(db("analyzing the expansion's words"))?;
        let mut known = engram_store::lock(&self.lexemes);
        if known.len() + found.len() > MAX_LEXEMES {
            known.clear();
        }
        for (word, lexeme) in found {
            known.insert(word.clone(), lexeme.clone());
            out.insert(word, lexeme);
        }
        Ok(out)
    }
}

/// Adds `rows` to `vocabulary` (in the order read); returns how many
/// words and lexemes it gained.
fn apply(vocabulary: &mut AgentVocabulary, rows: Vec<Row>) -> usize {
    let before = vocabulary.size();
    for row in rows {
        vocabulary.add(row);
    }
    if vocabulary.words.len() != vocabulary.listed.len() {
        vocabulary.listed = Arc::new(vocabulary.words.iter().cloned().collect());
    }
    vocabulary.size().saturating_sub(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: Kind, seq: i64, words: &[&str], lexemes: &[&str]) -> Row {
        Row {
            kind,
            seq,
            words: words.iter().map(|w| (*w).to_owned()).collect(),
            lexemes: lexemes.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn rows_add_their_words_once_and_count_their_lexemes_by_row() {
        let mut v = AgentVocabulary::new(Uuid::nil(), 0);
        let grown = apply(
            &mut v,
            vec![
                row(Kind::Trace, 0, &["puppy", "shelter"], &["puppi", "shelter"]),
                row(Kind::Trace, 1, &["puppies"], &["puppi"]),
                row(Kind::Semantic, 0, &["puppy"], &["puppi"]),
            ],
        );
        assert_eq!(**v.words(), ["puppies", "puppy", "shelter"]);
        assert_eq!(
            (v.held("puppi"), v.held("shelter"), v.held("dog")),
            (3, 1, 0)
        );
        assert_eq!(grown, 5);
        // A row read again (two searches caught up at once) counts once.
        let grown = apply(&mut v, vec![row(Kind::Trace, 1, &["puppies"], &["puppi"])]);
        assert_eq!((grown, v.held("puppi")), (0, 3));
        assert_eq!((v.traces, v.memories), (1, 0));
    }
}
