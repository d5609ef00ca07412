-- runs_lease goes (issue 25): an index of the running runs by the end of their lease, which
-- every chat wrote twice (an entry when its run began, its removal when it ended) and every
-- renewal of a lease rewrote, and which no query needs. ClaimRuns reads every running run
-- anyway (the runs an instance left need not have an ended lease), as does the ledger's
-- clean-up: both now read them through runs_one_running, the unique index of the running runs
-- by session, and sort the few they claim. No row changes.

-- +goose Up
DROP INDEX runs_lease;

-- +goose Down
CREATE INDEX runs_lease ON runs (lease_until) WHERE state = 'running';
