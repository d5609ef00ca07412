-- Executors (issue 21): the versions of each artifact a model made in a session, and the cost of
-- each web search call.

-- +goose Up
CREATE TABLE artifacts (
    id         text NOT NULL,
    version    integer NOT NULL,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id     text NOT NULL DEFAULT '',
    type       text NOT NULL,
    title      text NOT NULL,
    language   text NOT NULL DEFAULT '',
    content    text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE INDEX artifacts_session ON artifacts (session_id, id);

CREATE TABLE search_costs (
    id         text PRIMARY KEY,
    owner      text NOT NULL,
    session_id text NOT NULL DEFAULT '', -- no reference: a cost stays when its session goes
    run_id     text NOT NULL DEFAULT '',
    backend    text NOT NULL,
    query      text NOT NULL,
    results    integer NOT NULL,
    credits    double precision NOT NULL,
    dollars    double precision NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX search_costs_owner ON search_costs (owner, created_at);

-- +goose Down
DROP TABLE search_costs;
DROP TABLE artifacts;
