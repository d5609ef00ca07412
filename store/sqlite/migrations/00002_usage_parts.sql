-- Sessions keep their message count (last_seq) and token usage totals (seed 002's info.json, kept
-- in the database). Messages keep text content as plain text and an array of parts apart, as JSON,
-- so that the model's history reads a string without decoding JSON.

-- +goose Up
ALTER TABLE sessions ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0; -- seq of the last message
ALTER TABLE sessions ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN total_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
-- Assistant tool calls not yet answered by a tool message; above 0 after a crash mid-run.
ALTER TABLE sessions ADD COLUMN open_calls INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_open_calls ON sessions (id) WHERE open_calls > 0;

-- Content is either text (content) or an array of parts (parts, JSON); both NULL is a null content.
CREATE TABLE messages_v2 (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      TEXT,
    parts        TEXT, -- JSON array
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
INSERT INTO messages_v2 (id, session_id, seq, role, content, parts, name, tool_calls, tool_call_id, reasoning,
    run_id, model, latency_ms, usage, success, resource_id, created_at)
SELECT id, session_id, seq, role,
    CASE json_type(content) WHEN 'text' THEN json_extract(content, '$') END,
    CASE json_type(content) WHEN 'array' THEN content END,
    name, tool_calls, tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v2 RENAME TO messages;
CREATE INDEX messages_tool_call_id ON messages (tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX messages_resource ON messages (resource_id) WHERE resource_id IS NOT NULL;

UPDATE sessions SET
    last_seq = COALESCE((SELECT MAX(seq) FROM messages m WHERE m.session_id = sessions.id), 0),
    prompt_tokens = (SELECT COALESCE(SUM(json_extract(usage, '$.prompt_tokens')), 0) FROM messages m WHERE m.session_id = sessions.id),
    completion_tokens = (SELECT COALESCE(SUM(json_extract(usage, '$.completion_tokens')), 0) FROM messages m WHERE m.session_id = sessions.id),
    total_tokens = (SELECT COALESCE(SUM(json_extract(usage, '$.total_tokens')), 0) FROM messages m WHERE m.session_id = sessions.id),
    reasoning_tokens = (SELECT COALESCE(SUM(json_extract(usage, '$.reasoning_tokens')), 0) FROM messages m WHERE m.session_id = sessions.id),
    cached_tokens = (SELECT COALESCE(SUM(json_extract(usage, '$.cached_tokens')), 0) FROM messages m WHERE m.session_id = sessions.id),
    open_calls = MAX(0,
        (SELECT COALESCE(SUM(json_array_length(tool_calls)), 0) FROM messages m WHERE m.session_id = sessions.id AND role = 'assistant')
        - (SELECT COUNT(*) FROM messages m WHERE m.session_id = sessions.id AND role = 'tool' AND tool_call_id IS NOT NULL));

-- +goose Down
CREATE TABLE messages_v1 (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      TEXT NOT NULL, -- JSON: null, a string, or an array of parts
    name         TEXT,
    tool_calls   TEXT,
    tool_call_id TEXT,
    reasoning    TEXT,
    run_id       TEXT,
    model        TEXT,
    latency_ms   INTEGER,
    usage        TEXT,
    success      INTEGER CHECK (success IN (0, 1)),
    resource_id  TEXT REFERENCES resources (id) ON DELETE SET NULL,
    created_at   INTEGER NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;
INSERT INTO messages_v1 (id, session_id, seq, role, content, name, tool_calls, tool_call_id, reasoning,
    run_id, model, latency_ms, usage, success, resource_id, created_at)
SELECT id, session_id, seq, role,
    CASE WHEN parts IS NOT NULL THEN parts WHEN content IS NOT NULL THEN json_quote(content) ELSE 'null' END,
    name, tool_calls, tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v1 RENAME TO messages;
CREATE INDEX messages_tool_call_id ON messages (tool_call_id) WHERE tool_call_id IS NOT NULL;
CREATE INDEX messages_resource ON messages (resource_id) WHERE resource_id IS NOT NULL;
DROP INDEX sessions_open_calls;
ALTER TABLE sessions DROP COLUMN open_calls;
ALTER TABLE sessions DROP COLUMN cached_tokens;
ALTER TABLE sessions DROP COLUMN reasoning_tokens;
ALTER TABLE sessions DROP COLUMN total_tokens;
ALTER TABLE sessions DROP COLUMN completion_tokens;
ALTER TABLE sessions DROP COLUMN prompt_tokens;
ALTER TABLE sessions DROP COLUMN last_seq;
