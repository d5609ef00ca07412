-- runs_lease goes (issue 25), as SQLite's migration 00017 dropped its twin: an index of the
-- running runs by the end of their lease, which every chat wrote an entry to when its run began,
-- and which made every renewal of a lease a non-HOT update (a new row version and an entry in
-- each of the table's indexes), yet no query needs. ClaimRuns reads the running runs through
-- runs_one_running (the unique index of the running runs by session, as small as this one) and
-- sorts the few it finds by lease; the ledger's clean-up reads them the same way. No row changes.

-- +goose Up
DROP INDEX runs_lease;

-- +goose Down
CREATE INDEX runs_lease ON runs (lease_until) WHERE state = 'running';
