-- Tool approval (issue 23): each tool call that waits for (or got) the session owner's decision,
-- and each project's tool policy.

-- +goose Up
CREATE TABLE approvals (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    call_id       TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    tool          TEXT NOT NULL,
    server        TEXT NOT NULL DEFAULT '',
    arguments     TEXT NOT NULL,             -- as the model sent them
    why           TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL,             -- pending, approved, denied, expired
    run_arguments TEXT NOT NULL DEFAULT '',  -- what ran, when the user edited the arguments
    edited        INTEGER NOT NULL DEFAULT 0,
    always        INTEGER NOT NULL DEFAULT 0,
    answer        TEXT NOT NULL DEFAULT '',
    decided_by    TEXT NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,          -- Unix microseconds
    expires_at    INTEGER NOT NULL,
    decided_at    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, call_id)
) STRICT;
CREATE INDEX approvals_pending ON approvals (session_id, created_at) WHERE state = 'pending';

-- A JSON object of tool name patterns to auto, ask or deny; '' for none.
ALTER TABLE projects ADD COLUMN tool_policy TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE projects DROP COLUMN tool_policy;
DROP TABLE approvals;
