-- Fork lineage (issue 23, left open): a fork's copied messages refer to files (attachments, the
-- images of generate_image and edit_image results) that stay rows of the session forked from.
-- forked_from names that session, so that deleting it hands its files to one of its forks
-- instead of deleting them (DeleteSession). No foreign key: DeleteSession keeps the column
-- right in the transaction that deletes a session, and a key would make SQLite's DROP COLUMN
-- rebuild the table. The index holds only forks. Existing rows are kept as they are (no
-- lineage: forks made before this migration are not known as forks).

-- +goose Up
ALTER TABLE sessions ADD COLUMN forked_from TEXT;
CREATE INDEX sessions_forked_from ON sessions (forked_from) WHERE forked_from IS NOT NULL;

-- +goose Down
DROP INDEX sessions_forked_from;
ALTER TABLE sessions DROP COLUMN forked_from;
