-- event_batches becomes a rowid table (issue 25). A run's events are one row of a few KB (a short
-- chat's is about 1.6 KB). In a WITHOUT ROWID table a row keeps about 1 KB on its b-tree page and
-- the rest goes to an overflow page of its own, so every chat wrote a page to the WAL for its
-- events alone; a rowid table keeps a row of up to about 4 KB on its leaf page, beside the rows
-- written just before it. (session_id, first_seq) stays unique, now as an index. The rows are
-- kept as they are, byte for byte, both ways.

-- +goose Up
CREATE TABLE event_batches_rowid (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       BLOB NOT NULL, -- the events as a JSON array
    created_at INTEGER NOT NULL -- unix microseconds, UTC
) STRICT;
INSERT INTO event_batches_rowid (session_id, first_seq, last_seq, data, created_at)
    SELECT session_id, first_seq, last_seq, data, created_at FROM event_batches ORDER BY session_id, first_seq;
DROP TABLE event_batches;
ALTER TABLE event_batches_rowid RENAME TO event_batches;
CREATE UNIQUE INDEX event_batches_seq ON event_batches (session_id, first_seq);
CREATE INDEX event_batches_created ON event_batches (created_at);

-- +goose Down
CREATE TABLE event_batches_norowid (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    data       BLOB NOT NULL, -- the events as a JSON array
    created_at INTEGER NOT NULL, -- unix microseconds, UTC
    PRIMARY KEY (session_id, first_seq)
) STRICT, WITHOUT ROWID;
INSERT INTO event_batches_norowid (session_id, first_seq, last_seq, data, created_at)
    SELECT session_id, first_seq, last_seq, data, created_at FROM event_batches;
DROP TABLE event_batches;
ALTER TABLE event_batches_norowid RENAME TO event_batches;
CREATE INDEX event_batches_created ON event_batches (created_at);
