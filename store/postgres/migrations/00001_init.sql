-- Parley's schema for PostgreSQL, after seed 004: one row per OpenAI chat message, tool calls as
-- JSONB, tool_call_id indexed, resources referred to by foreign key, and usage totals per session.

-- +goose Up
CREATE TABLE sessions (
    id          text PRIMARY KEY,
    title       text NOT NULL DEFAULT '',
    owner       text NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL DEFAULT 0, -- seq of the session's last message
    -- Token usage totals of the session's messages (seed 002's info.json, kept here).
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    total_tokens      bigint NOT NULL DEFAULT 0,
    reasoning_tokens  bigint NOT NULL DEFAULT 0,
    cached_tokens     bigint NOT NULL DEFAULT 0,
    -- Assistant tool calls not yet answered by a tool message; above 0 after a crash mid-run.
    open_calls        integer NOT NULL DEFAULT 0
);
CREATE INDEX sessions_owner_updated ON sessions (owner, updated_at DESC, id DESC);
CREATE INDEX sessions_open_calls ON sessions (id) WHERE open_calls > 0;

CREATE TABLE resources (
    id         text PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind       text NOT NULL,
    uri        text NOT NULL DEFAULT '',
    meta       jsonb,
    created_at timestamptz NOT NULL
);
CREATE INDEX resources_session ON resources (session_id);

-- Content is either text (content) or an array of parts (parts); both NULL is a null content.
CREATE TABLE messages (
    id           text PRIMARY KEY,
    session_id   text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          bigint NOT NULL,
    role         text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      text,
    parts        jsonb CHECK (jsonb_typeof(parts) = 'array'),
    name         text,
    tool_calls   jsonb CHECK (jsonb_typeof(tool_calls) = 'array'),
    tool_call_id text,
    reasoning    text,
    run_id       text,
    model        text,
    latency_ms   bigint,
    usage        jsonb,
    success      boolean,
    resource_id  text REFERENCES resources (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL,
    UNIQUE (session_id, seq)
);
CREATE INDEX messages_tool_call_id ON messages (tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX messages_resource ON messages (resource_id) WHERE resource_id IS NOT NULL;

-- +goose Down
DROP TABLE messages;
DROP TABLE resources;
DROP TABLE sessions;
