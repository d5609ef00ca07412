-- Assistant messages keep their signed reasoning blocks (Anthropic's extended thinking) so that
-- they can go back to the model in a tool loop; sessions total the cost of their messages.

-- +goose Up
ALTER TABLE messages ADD COLUMN thinking_blocks jsonb; -- NULL when none
ALTER TABLE sessions ADD COLUMN cost double precision NOT NULL DEFAULT 0; -- US dollars
UPDATE sessions SET cost = COALESCE((SELECT SUM((usage->>'cost')::double precision) FROM messages m WHERE m.session_id = sessions.id), 0);

-- +goose Down
ALTER TABLE sessions DROP COLUMN cost;
ALTER TABLE messages DROP COLUMN thinking_blocks;
