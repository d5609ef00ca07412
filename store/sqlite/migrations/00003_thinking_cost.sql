-- Assistant messages keep their signed reasoning blocks (Anthropic's extended thinking) so that
-- they can go back to the model in a tool loop; sessions total the cost of their messages.

-- +goose Up
ALTER TABLE messages ADD COLUMN thinking_blocks TEXT; -- JSON array, NULL when none
ALTER TABLE sessions ADD COLUMN cost REAL NOT NULL DEFAULT 0; -- US dollars
UPDATE sessions SET cost = (SELECT COALESCE(SUM(json_extract(usage, '$.cost')), 0) FROM messages m WHERE m.session_id = sessions.id);

-- +goose Down
ALTER TABLE sessions DROP COLUMN cost;
ALTER TABLE messages DROP COLUMN thinking_blocks;
