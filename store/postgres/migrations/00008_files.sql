-- Uploaded files (issue 20): metadata only; the bytes are a blob in the blob store, keyed by
-- sha256. Deleting a session deletes its files (the blobs are collected by the server).

-- +goose Up
CREATE TABLE files (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    session_id text REFERENCES sessions (id) ON DELETE CASCADE, -- NULL: in no session yet
    name       text NOT NULL,
    size       bigint NOT NULL,
    sha256     text NOT NULL,
    media_type text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX files_owner ON files (owner);
CREATE INDEX files_session ON files (session_id, id);
CREATE INDEX files_sha256 ON files (sha256);

-- +goose Down
DROP TABLE files;
