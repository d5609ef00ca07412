-- Fork lineage (issue 23, left open): a fork's copied messages refer to files (attachments, the
-- images of generate_image and edit_image results) that stay rows of the session forked from.
-- forked_from names that session, so that deleting it hands its files to one of its forks
-- instead of deleting them (DeleteSession). No foreign key: DeleteSession keeps the column
-- right in the transaction that deletes a session, and a key would make SQLite's DROP COLUMN
-- rebuild the table. The index holds only forks. Existing rows are kept as they are; forks made
-- before are found by what their messages refer to: only a fork's copies refer to files of
-- another session (an attachment's file part, or an image result's file id), and a fork is
-- taken as a fork of the newest such session of its owner (its source: an older one is an
-- ancestor, whose files the source refers to as well).

-- +goose Up
ALTER TABLE sessions ADD COLUMN forked_from TEXT;
CREATE INDEX sessions_forked_from ON sessions (forked_from) WHERE forked_from IS NOT NULL;
WITH refs (session_id, file_id) AS (
    SELECT m.session_id, json_extract(p.value, '$.file.file_id') FROM messages m, json_each(m.parts) p
    WHERE m.parts IS NOT NULL AND json_extract(p.value, '$.type') = 'file'
    UNION
    SELECT m.session_id, json_extract(i.value, '$.file_id') FROM messages m,
        json_each(CASE WHEN json_valid(m.content) THEN m.content ELSE '{}' END, '$.images') i
    WHERE m.role = 'tool' AND m.content LIKE '%/api/v1/images/%'
)
UPDATE sessions SET forked_from = (
    SELECT o.id FROM refs r JOIN files f ON f.id = r.file_id JOIN sessions o ON o.id = f.session_id
    WHERE r.session_id = sessions.id AND o.id <> sessions.id AND o.owner = sessions.owner
    ORDER BY o.created_at DESC, o.id DESC LIMIT 1)
WHERE id IN (SELECT r.session_id FROM refs r JOIN files f ON f.id = r.file_id WHERE f.session_id <> r.session_id);

-- +goose Down
DROP INDEX sessions_forked_from;
ALTER TABLE sessions DROP COLUMN forked_from;
