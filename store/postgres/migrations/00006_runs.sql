-- Durable runs (issue #7): a record of each run with the lease of the instance running it, so that
-- a run outlives its process, and the ledger of its tool calls, so that a call done never runs again.

-- +goose Up
CREATE TABLE runs (
    id             text PRIMARY KEY,
    session_id     text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner          text NOT NULL,
    model          text NOT NULL,
    selected_tools jsonb, -- NULL offers every tool
    state          text NOT NULL, -- running | ended
    finish         text NOT NULL DEFAULT '',
    instance       text NOT NULL,
    lease_until    timestamptz NOT NULL,
    attempts       integer NOT NULL DEFAULT 0,
    first_seq      bigint NOT NULL DEFAULT 0, -- the number of its first event
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
-- One running run per session, whichever instance runs it.
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE state = 'running';
CREATE INDEX runs_lease ON runs (lease_until) WHERE state = 'running';
CREATE INDEX runs_ended ON runs (updated_at) WHERE state = 'ended';

CREATE TABLE tool_calls (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    call_id    text NOT NULL,
    run_id     text NOT NULL,
    name       text NOT NULL,
    state      text NOT NULL, -- started | done
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX tool_calls_updated ON tool_calls (updated_at);

-- +goose Down
DROP TABLE tool_calls;
DROP TABLE runs;
