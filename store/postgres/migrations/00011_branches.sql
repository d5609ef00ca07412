-- Branches (issue 23): a session's messages form a tree. Each message names its parent (NULL for a
-- first message) and the session its active leaf; branched stays false while the tree is one chain
-- whose leaf is the last message, so that reading it needs no walk up the tree. Existing sessions
-- become that one chain: each message's parent is the one before it, the leaf the last.

-- +goose Up
ALTER TABLE messages ADD COLUMN parent_id text;
ALTER TABLE sessions ADD COLUMN leaf_id text;
ALTER TABLE sessions ADD COLUMN branched boolean NOT NULL DEFAULT false;
UPDATE messages m SET parent_id = p.prev
FROM (SELECT id, lag(id) OVER (PARTITION BY session_id ORDER BY seq) AS prev FROM messages) p
WHERE m.id = p.id AND p.prev IS NOT NULL;
UPDATE sessions s SET leaf_id = l.id
FROM (SELECT DISTINCT ON (session_id) session_id, id FROM messages ORDER BY session_id, seq DESC) l
WHERE s.id = l.session_id;

-- +goose Down
ALTER TABLE sessions DROP COLUMN branched;
ALTER TABLE sessions DROP COLUMN leaf_id;
ALTER TABLE messages DROP COLUMN parent_id;
