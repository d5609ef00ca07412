-- Durable runs (issue #7): a record of each run with the lease of the instance running it, so that
-- a run outlives its process, and the ledger of its tool calls, so that a call done never runs again.

-- +goose Up
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner          TEXT NOT NULL,
    model          TEXT NOT NULL,
    selected_tools TEXT, -- JSON array; NULL offers every tool
    state          TEXT NOT NULL, -- running | ended
    finish         TEXT NOT NULL DEFAULT '',
    instance       TEXT NOT NULL,
    lease_until    INTEGER NOT NULL, -- unix microseconds, UTC
    attempts       INTEGER NOT NULL DEFAULT 0,
    first_seq      INTEGER NOT NULL DEFAULT 0, -- the number of its first event
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;
-- One running run per session, whichever instance runs it.
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE state = 'running';
CREATE INDEX runs_lease ON runs (lease_until) WHERE state = 'running';
CREATE INDEX runs_ended ON runs (updated_at) WHERE state = 'ended';

CREATE TABLE tool_calls (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    call_id    TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    name       TEXT NOT NULL,
    state      TEXT NOT NULL, -- started | done
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, call_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX tool_calls_updated ON tool_calls (updated_at);

-- +goose Down
DROP TABLE tool_calls;
DROP TABLE runs;
