-- Run events (issue #7): each session's stream of run events, kept for resuming a stream after the
-- run has left memory, and the counter that numbers them.

-- +goose Up
ALTER TABLE sessions ADD COLUMN event_seq bigint NOT NULL DEFAULT 0; -- the last number reserved
CREATE TABLE events (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    run_id     text NOT NULL,
    type       text NOT NULL,
    data       bytea NOT NULL, -- the event as JSON
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX events_created ON events (created_at);

-- +goose Down
DROP TABLE events;
ALTER TABLE sessions DROP COLUMN event_seq;
