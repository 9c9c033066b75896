-- Memory beyond one conversation: the user an agent belongs to, and
-- memory blocks in three scopes.

-- The user of an agent, as its settings (`meta`) hold it: listed and
-- erased by user without reading every agent.
CREATE INDEX agents_user ON agents (((meta::jsonb) ->> 'user_id'), id)
    WHERE (meta::jsonb) ->> 'user_id' IS NOT NULL;

-- Every version of every block. `scope` is 'global', 'user/<id>' or
-- 'agent/<id>'; an agent's blocks go with the agent (`agent_id`).
CREATE TABLE blocks (
    scope text NOT NULL,
    label text NOT NULL,
    version bigint NOT NULL,
    agent_id text REFERENCES agents (id) ON DELETE CASCADE,
    -- The Block as JSON text (as the file store's line).
    body text NOT NULL,
    PRIMARY KEY (scope, label, version)
);
