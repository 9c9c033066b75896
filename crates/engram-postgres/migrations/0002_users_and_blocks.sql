-- Memory blocks in three scopes. (An agent's user is in its settings,
-- `agents.meta`, which stays text: jsonb cannot hold the \u0000 a system
-- prompt may carry, so nothing may cast it.)

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
