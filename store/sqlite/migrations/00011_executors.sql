-- Executors (issue 21): the versions of each artifact a model made in a session, and the cost of
-- each web search call.

-- +goose Up
CREATE TABLE artifacts (
    id         TEXT NOT NULL,
    version    INTEGER NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id     TEXT NOT NULL DEFAULT '',
    type       TEXT NOT NULL,
    title      TEXT NOT NULL,
    language   TEXT NOT NULL DEFAULT '',
    content    TEXT NOT NULL,
    created_at INTEGER NOT NULL, -- unix microseconds, UTC
    PRIMARY KEY (id, version)
) STRICT, WITHOUT ROWID;
CREATE INDEX artifacts_session ON artifacts (session_id, id);

CREATE TABLE search_costs (
    id         TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '', -- no reference: a cost stays when its session goes
    run_id     TEXT NOT NULL DEFAULT '',
    backend    TEXT NOT NULL,
    query      TEXT NOT NULL,
    results    INTEGER NOT NULL,
    credits    REAL NOT NULL,
    dollars    REAL NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX search_costs_owner ON search_costs (owner, created_at);

-- +goose Down
DROP TABLE search_costs;
DROP TABLE artifacts;
