-- Which user an agent belongs to, as a column of its own (its settings,
-- `agents.meta`, also say so, but stay text that nothing may cast): the
-- agents of a user are listed and erased by it.
ALTER TABLE agents ADD COLUMN user_id text;

-- Agents bound before this column existed. Inside a JSON string every
-- quote is escaped, so the pattern can only meet the settings' own key.
UPDATE agents SET user_id = substring(meta from '"user_id":\s*"([^"\\]*)"')
    WHERE meta LIKE '%"user_id":%';

CREATE INDEX agents_user ON agents (user_id, id) WHERE user_id IS NOT NULL;

-- A user's long-term memory: the facts folded in from the compactions of
-- all of its conversations. One row per fact (its last version); `seq`
-- keeps the order facts first appeared in.
CREATE TABLE user_facts (
    user_id text NOT NULL,
    id text NOT NULL,
    seq bigserial,
    -- The UserFact as JSON text (as the file store's line).
    body text NOT NULL,
    PRIMARY KEY (user_id, id)
);
CREATE INDEX user_facts_order ON user_facts (user_id, seq);

-- A user's most recently summarized conversation (a LastConversation as
-- JSON text): a new conversation of the user starts with its summaries.
CREATE TABLE user_conversations (
    user_id text PRIMARY KEY,
    last text NOT NULL
);
