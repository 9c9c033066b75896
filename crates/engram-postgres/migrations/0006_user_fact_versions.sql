-- Every version of a user's fact that a client changed (AddMemories
-- merging, UpdateMemory, DeleteMemory in a user_id scope), and the version
-- before the first change; `user_facts` keeps the latest. A deletion
-- scrubs the text from all of them (the id, versions, times and sources
-- stay).
CREATE TABLE user_fact_versions (
    user_id text NOT NULL,
    id text NOT NULL,
    version bigint NOT NULL,
    -- The UserFact as JSON text.
    body text NOT NULL,
    PRIMARY KEY (user_id, id, version)
);

-- What prompts and the upkeep ask of a user's facts without reading them
-- all: the live pinned ones (every conversation's prompt shows them), and
-- when a live unpinned one expires (none for most).
ALTER TABLE user_facts ADD COLUMN pinned boolean NOT NULL DEFAULT false;
ALTER TABLE user_facts ADD COLUMN expires_at float8;
CREATE INDEX user_facts_pinned ON user_facts (user_id) WHERE pinned;
CREATE INDEX user_facts_expiring ON user_facts (expires_at) WHERE expires_at IS NOT NULL;

-- The words of the facts a client wrote in a user's scope (no
-- conversation's rows hold them; a fact a compaction folded in is found
-- by its conversations' copies): what a search across the user's
-- conversations ranks them by. NULL for every other fact.
ALTER TABLE user_facts ADD COLUMN words tsvector;
CREATE INDEX user_facts_words ON user_facts USING gin (words) WHERE words IS NOT NULL;
