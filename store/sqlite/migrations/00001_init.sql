-- +goose Up
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    title      TEXT NOT NULL DEFAULT '',
    owner      TEXT NOT NULL,
    created_at INTEGER NOT NULL, -- unix microseconds, UTC
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_owner_updated ON sessions (owner, updated_at DESC, id DESC);

CREATE TABLE resources (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    uri        TEXT NOT NULL DEFAULT '',
    meta       TEXT, -- JSON
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX resources_session ON resources (session_id);

-- One row per OpenAI chat message (seed 004), plus Parley's metadata.
CREATE TABLE messages (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      TEXT NOT NULL, -- JSON: null, a string, or an array of parts
    name         TEXT,
    tool_calls   TEXT, -- JSON array, NULL when none
    tool_call_id TEXT,
    reasoning    TEXT,
    run_id       TEXT,
    model        TEXT,
    latency_ms   INTEGER,
    usage        TEXT, -- JSON
    success      INTEGER CHECK (success IN (0, 1)),
    resource_id  TEXT REFERENCES resources (id) ON DELETE SET NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;
CREATE INDEX messages_tool_call_id ON messages (tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX messages_resource ON messages (resource_id) WHERE resource_id IS NOT NULL;

-- +goose Down
DROP TABLE messages;
DROP TABLE resources;
DROP TABLE sessions;
