-- Uploaded files (issue 20): metadata only; the bytes are a blob in the blob store, keyed by
-- sha256. Deleting a session deletes its files (the blobs are collected by the server).

-- +goose Up
CREATE TABLE files (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    session_id TEXT REFERENCES sessions (id) ON DELETE CASCADE, -- NULL: in no session yet
    name       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    media_type TEXT NOT NULL,
    created_at INTEGER NOT NULL -- unix microseconds, UTC
) STRICT;
CREATE INDEX files_owner ON files (owner);
CREATE INDEX files_session ON files (session_id, id);
CREATE INDEX files_sha256 ON files (sha256);

-- +goose Down
DROP TABLE files;
