-- Each user's consolidation log (engram_core::users::consolidate): one row
-- per run, numbered per user from 1, written in the run's transaction with
-- the facts it changed. DeleteUser removes it with the user's memory. The
-- last 100 rows of a user are kept.
CREATE TABLE user_consolidations (
    user_id text NOT NULL,
    seq bigint NOT NULL,
    -- The ConsolidationRecord as JSON text (its seq is the column's).
    body text NOT NULL,
    PRIMARY KEY (user_id, seq)
);
