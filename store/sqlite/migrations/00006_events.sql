-- Run events (issue #7): each session's stream of run events, kept for resuming a stream after the
-- run has left memory, and the counter that numbers them.

-- +goose Up
ALTER TABLE sessions ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0; -- the last number reserved
CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    run_id     TEXT NOT NULL,
    type       TEXT NOT NULL,
    data       BLOB NOT NULL, -- the event as JSON
    created_at INTEGER NOT NULL, -- unix microseconds, UTC
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;
CREATE INDEX events_created ON events (created_at);

-- +goose Down
DROP TABLE events;
ALTER TABLE sessions DROP COLUMN event_seq;
