-- Which user an agent belongs to, as a column of its own (its settings,
-- `agents.meta`, also say so, but stay text that nothing may cast): the
-- agents of a user are listed and erased by it.
ALTER TABLE agents ADD COLUMN user_id text;

-- Agents bound before this column existed. Inside a JSON string every
-- quote is escaped, so the pattern can only meet the settings' own key.
UPDATE agents SET user_id = substring(meta from '"user_id":\s*"([^"\\]*)"')
    WHERE meta LIKE '%"user_id":%';

CREATE INDEX agents_user ON agents (user_id, id) WHERE user_id IS NOT NULL;
