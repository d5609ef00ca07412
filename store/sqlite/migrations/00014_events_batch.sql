-- Run events stored a batch per row (issue 25): one row per write of a run's events instead of
-- one per event, so that a store under many fast streams keeps up. A row holds events with
-- consecutive numbers first_seq..last_seq as a JSON array, in order; the rows of a session never
-- overlap. The events stored one per row before are kept, each as a batch of one.

-- +goose Up
CREATE TABLE event_batches (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       BLOB NOT NULL, -- the events as a JSON array
    created_at INTEGER NOT NULL, -- unix microseconds, UTC
    PRIMARY KEY (session_id, first_seq)
) STRICT, WITHOUT ROWID;
CREATE INDEX event_batches_created ON event_batches (created_at);
INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at)
    SELECT session_id, seq, seq, CAST('[' || CAST(data AS TEXT) || ']' AS BLOB), created_at FROM events;
DROP TABLE events;

-- +goose Down
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
INSERT INTO events (session_id, seq, run_id, type, data, created_at)
    SELECT b.session_id, json_extract(e.value, '$.seq'), COALESCE(json_extract(e.value, '$.run_id'), ''),
        json_extract(e.value, '$.type'), CAST(e.value AS BLOB), b.created_at
    FROM event_batches b, json_each(CAST(b.data AS TEXT)) e;
DROP TABLE event_batches;
