-- runs_session, as SQLite's migration 00019: the runs of a session, all of them. Deleting a
-- session cascades to its runs, which PostgreSQL finds with a query by runs.session_id; the only
-- index of that column was runs_one_running, partial (the running runs), which the cascade's
-- query cannot use, so each deleted session read the whole table of runs the retention keeps. A
-- chat adds one entry, when its run begins; the session of a run never changes, so the updates of
-- a run (its lease, its end) stay as they were. No row changes.
--
-- Built CONCURRENTLY, outside a transaction, so that the instances of the previous version go on
-- writing runs while it is built during a rolling upgrade. A build that failed leaves an invalid
-- index of that name behind, and goose does not record the version: the first statement drops
-- it when the migration runs again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS runs_session;
CREATE INDEX CONCURRENTLY runs_session ON runs (session_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS runs_session;
