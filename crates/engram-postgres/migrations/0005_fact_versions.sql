-- Every version of a fact that a client changed (AddMemories merging,
-- UpdateMemory, DeleteMemory), and the version before the first change;
-- `memories` keeps the latest. A deletion scrubs the text from all of
-- them (the id, versions and times stay).
CREATE TABLE fact_versions (
    agent_id text NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
    id text NOT NULL,
    version bigint NOT NULL,
    -- The SemanticItem as JSON text.
    body text NOT NULL,
    PRIMARY KEY (agent_id, id, version)
);

-- When a fact expires (epoch seconds; none for most): the upkeep deletes
-- the expired ones, as a client's delete would.
ALTER TABLE memories ADD COLUMN expires_at float8;
CREATE INDEX memories_expiring ON memories (expires_at) WHERE expires_at IS NOT NULL AND live;
