-- Each agent's compaction log (engram_core::compaction::log): one row per
-- compaction that changed the prompt or failed, numbered per agent from 1.
-- It goes with its agent (the cascade), is copied by a fork and carried by
-- an export. The last 500 rows of an agent are kept.
CREATE TABLE compaction_log (
    agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    -- The CompactionRecord as JSON text (its seq is the column's).
    body text NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
