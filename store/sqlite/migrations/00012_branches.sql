-- Branches (issue 23): a session's messages form a tree. Each message names its parent (NULL for a
-- first message) and the session its active leaf; branched stays 0 while the tree is one chain
-- whose leaf is the last message, so that reading it needs no walk up the tree. Existing sessions
-- become that one chain: each message's parent is the one before it, the leaf the last.

-- +goose Up
ALTER TABLE messages ADD COLUMN parent_id TEXT;
ALTER TABLE sessions ADD COLUMN leaf_id TEXT;
ALTER TABLE sessions ADD COLUMN branched INTEGER NOT NULL DEFAULT 0 CHECK (branched IN (0, 1));
UPDATE messages SET parent_id = (SELECT p.id FROM messages p
    WHERE p.session_id = messages.session_id AND p.seq < messages.seq ORDER BY p.seq DESC LIMIT 1);
UPDATE sessions SET leaf_id = (SELECT m.id FROM messages m WHERE m.session_id = sessions.id ORDER BY m.seq DESC LIMIT 1);

-- +goose Down
ALTER TABLE sessions DROP COLUMN branched;
ALTER TABLE sessions DROP COLUMN leaf_id;
ALTER TABLE messages DROP COLUMN parent_id;
