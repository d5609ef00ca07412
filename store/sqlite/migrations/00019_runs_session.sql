-- runs_session: the runs of a session, all of them. Deleting a session cascades to its runs, and
-- SQLite finds them through an index whose leading column is runs.session_id covering every row;
-- the only one was runs_one_running, a partial index of the running runs that a cascade cannot
-- use, so deleting a session scanned every run the retention keeps (72 hours of them by default),
-- holding the one writer's lock meanwhile. A chat writes the new index once, when its run begins
-- (the session of a run never changes). No row changes.

-- +goose Up
CREATE INDEX runs_session ON runs (session_id);

-- +goose Down
DROP INDEX runs_session;
