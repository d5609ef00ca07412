-- Fork lineage (issue 23, left open): a fork's copied messages refer to files (attachments, the
-- images of generate_image and edit_image results) that stay rows of the session forked from.
-- forked_from names that session, so that deleting it hands its files to one of its forks
-- instead of deleting them (DeleteSession). No foreign key, as in SQLite: DeleteSession keeps
-- the column right in the transaction that deletes a session. The index holds only forks.
-- Existing rows are kept as they are; forks made before are found by what their messages refer
-- to: only a fork's copies refer to files of another session (an attachment's file part, or the
-- file id in an image result's signed URL), and a fork is taken as a fork of the newest such
-- session of its owner (its source: an older one is an ancestor, whose files the source refers
-- to as well).

-- +goose Up
ALTER TABLE sessions ADD COLUMN forked_from text;
CREATE INDEX sessions_forked_from ON sessions (forked_from) WHERE forked_from IS NOT NULL;
WITH refs (session_id, file_id) AS (
    SELECT m.session_id, p -> 'file' ->> 'file_id' FROM messages m, jsonb_array_elements(m.parts) p
    WHERE m.parts IS NOT NULL AND p ->> 'type' = 'file'
    UNION
    SELECT m.session_id, (regexp_matches(m.content, '/api/v1/images/([0-9A-Za-z-]+)\?', 'g'))[1] FROM messages m
    WHERE m.role = 'tool' AND m.content LIKE '%/api/v1/images/%'
), origins AS (
    SELECT DISTINCT ON (r.session_id) r.session_id, o.id AS origin
    FROM refs r JOIN files f ON f.id = r.file_id JOIN sessions o ON o.id = f.session_id JOIN sessions s ON s.id = r.session_id
    WHERE o.id <> r.session_id AND o.owner = s.owner
    ORDER BY r.session_id, o.created_at DESC, o.id DESC
)
UPDATE sessions s SET forked_from = origins.origin FROM origins WHERE s.id = origins.session_id;

-- +goose Down
DROP INDEX sessions_forked_from;
ALTER TABLE sessions DROP COLUMN forked_from;
