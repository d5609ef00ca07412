-- Tool approval (issue 23): each tool call that waits for (or got) the session owner's decision,
-- and each project's tool policy.

-- +goose Up
CREATE TABLE approvals (
    session_id    text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    call_id       text NOT NULL,
    run_id        text NOT NULL,
    tool          text NOT NULL,
    server        text NOT NULL DEFAULT '',
    arguments     text NOT NULL,             -- as the model sent them
    why           text NOT NULL DEFAULT '',
    state         text NOT NULL,             -- pending, approved, denied, expired
    run_arguments text NOT NULL DEFAULT '',  -- what ran, when the user edited the arguments
    edited        boolean NOT NULL DEFAULT false,
    always        boolean NOT NULL DEFAULT false,
    answer        text NOT NULL DEFAULT '',
    decided_by    text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    decided_at    timestamptz,
    PRIMARY KEY (session_id, call_id)
);
CREATE INDEX approvals_pending ON approvals (session_id, created_at) WHERE state = 'pending';

-- A JSON object of tool name patterns to auto, ask or deny; '' for none.
ALTER TABLE projects ADD COLUMN tool_policy text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE projects DROP COLUMN tool_policy;
DROP TABLE approvals;
