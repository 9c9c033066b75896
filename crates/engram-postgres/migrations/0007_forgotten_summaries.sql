-- A summary that a forget hid (a trace it summarized was erased; it has no
-- text until the summarizer writes it again from its remaining traces) is
-- a summary row with `live` false: no search ranks it, no indexer embeds
-- it, no replica's copy of vectors holds it, as for a superseded fact.
-- Its body says so too (`rewriting`). The agents with one are found by
-- this index, without reading the others' rows (the upkeep asks often;
-- there are none for most agents).
CREATE INDEX memories_rewriting ON memories (agent_id) WHERE kind = 'e' AND NOT live;
