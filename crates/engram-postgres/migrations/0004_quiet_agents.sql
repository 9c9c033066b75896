-- The conversations to summarize once they go quiet: each agent with the
-- time (Unix seconds) it last served a request, noted by every replica
-- and taken by one. No foreign key: noting never locks an agent's row (a
-- row of an agent deleted meanwhile is dropped as not found when taken);
-- DeleteAgent and DeleteUser remove their agents' rows.
CREATE TABLE quiet_agents (
    agent_id text PRIMARY KEY,
    used_at float8 NOT NULL
);
CREATE INDEX quiet_agents_used ON quiet_agents (used_at);
