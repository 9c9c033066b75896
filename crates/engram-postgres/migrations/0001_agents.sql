-- Engram on PostgreSQL: the same records as the file store's per-agent
-- files, one row each. Replicas cache what they derive from them.

-- Word indexes per agent (a GIN index over (agent_id, words)): a search
-- walks one agent's postings, not every agent's. Trusted since PostgreSQL
-- 13: a database owner may create it. Where it cannot be had, the word
-- indexes cover all agents' words instead (slower for many agents; the
-- server's log says so at start).
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS btree_gin;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'btree_gin unavailable (%): word indexes without the agent column', SQLERRM;
END
$$;

-- One row per agent: its settings (state.json's AgentMeta) and counters.
-- The row is the agent's lock: every write takes it FOR UPDATE.
CREATE TABLE agents (
    id text PRIMARY KEY,
    -- A new one when the agent is deleted and written again: a replica's
    -- cache of the old agent is not the new one's.
    incarnation uuid NOT NULL,
    -- Every committed write adds one: a replica's cache is current when
    -- its version is this one.
    version bigint NOT NULL DEFAULT 0,
    -- Compactions and microcompacts add one: a cache of an older
    -- generation is rebuilt, not caught up.
    generation bigint NOT NULL DEFAULT 0,
    -- The next trace's place (traces.seq).
    next_seq bigint NOT NULL DEFAULT 0,
    -- Lexemes over all its traces (length(words) summed): BM25's average
    -- document length.
    words_total bigint NOT NULL DEFAULT 0,
    -- JSON text (AgentMeta), like every body here.
    meta text NOT NULL,
    -- The turn state as of the last compaction (every trace then stored):
    -- a load need not replay the archive.
    turns text,
    -- A replica's compaction is under way until then (a lease: a replica
    -- that dies mid-compaction blocks the next one only this long).
    compacting_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Every raw trace, active and archived, in conversation order.
CREATE TABLE traces (
    agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    -- Conversation order: turn << 32 | seq in turn (a late tool result
    -- sits in its call's turn); neighbours are found by it.
    ord bigint NOT NULL,
    trace_type smallint NOT NULL,
    trace_id text NOT NULL,
    event_id text,
    ts double precision NOT NULL,
    archived boolean NOT NULL DEFAULT false,
    -- The RawTrace as the file store's JSONL line holds it (JSON text:
    -- jsonb cannot hold the \u0000 a trace may carry; cast where it has none).
    body text NOT NULL,
    -- The words SearchHistory ranks by (speaker, text, tool and date words).
    words tsvector NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE UNIQUE INDEX traces_trace_id ON traces (agent_id, trace_id);
-- event_id idempotency, enforced by the database too.
CREATE UNIQUE INDEX traces_event_id ON traces (agent_id, event_id) WHERE event_id IS NOT NULL;
CREATE INDEX traces_active ON traces (agent_id, seq) WHERE NOT archived;
CREATE INDEX traces_order ON traces (agent_id, ord);
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        CREATE INDEX traces_words ON traces USING gin (agent_id, words);
    ELSE
        CREATE INDEX traces_words ON traces USING gin (words);
    END IF;
END
$$;

-- Episodic summaries (kind 'e') and semantic facts (kind 's'), each the
-- latest version of its id.
CREATE TABLE memories (
    agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    kind "char" NOT NULL,
    id text NOT NULL,
    -- Storage order (a superseded fact keeps its place).
    seq bigint GENERATED ALWAYS AS IDENTITY,
    -- JSON text, as the trace's.
    body text NOT NULL,
    -- Placed at its first turn, dated when what it stands for was said.
    ord bigint NOT NULL,
    ts double precision NOT NULL,
    -- A fact not superseded (summaries always): what search ranks.
    live boolean NOT NULL,
    words tsvector NOT NULL,
    PRIMARY KEY (agent_id, kind, id)
);
CREATE INDEX memories_order ON memories (agent_id, kind, seq);
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'btree_gin') THEN
        CREATE INDEX memories_words ON memories USING gin (agent_id, words);
    ELSE
        CREATE INDEX memories_words ON memories USING gin (words);
    END IF;
END
$$;

-- Whole tool results too large for a trace (the file store's
-- tool_results/ files), by the path the trace names.
CREATE TABLE spills (
    agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    path text NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (agent_id, path)
);

-- Embeddings, stored with their items (`vector`: the model's f32
-- components, little-endian; empty when the model refused the text) and
-- numbered in the order they were written (`vector_seq`), so a replica's
-- copy of an agent's vectors catches up with the rows numbered since.
CREATE SEQUENCE vector_seq;
ALTER TABLE traces
    ADD COLUMN vector bytea,
    ADD COLUMN vector_model text,
    ADD COLUMN vector_seq bigint,
    -- A replica is embedding it (others leave it alone until then).
    ADD COLUMN embed_claimed timestamptz;
ALTER TABLE memories
    ADD COLUMN vector bytea,
    ADD COLUMN vector_model text,
    ADD COLUMN vector_seq bigint,
    ADD COLUMN embed_claimed timestamptz;
-- What waits for the model: found without scanning the rest.
CREATE INDEX traces_unembedded ON traces (agent_id, seq) WHERE vector IS NULL;
CREATE INDEX memories_unembedded ON memories (agent_id, seq) WHERE vector IS NULL AND live;
CREATE INDEX traces_vectors ON traces (agent_id, vector_seq) WHERE vector_seq IS NOT NULL;
CREATE INDEX memories_vectors ON memories (agent_id, vector_seq) WHERE vector_seq IS NOT NULL;
