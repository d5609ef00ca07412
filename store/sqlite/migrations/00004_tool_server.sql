-- Tool messages name the MCP server that ran the tool (seed 001 §1.06's metadata.server).

-- +goose Up
ALTER TABLE messages ADD COLUMN server TEXT; -- NULL for built-in tools and other roles

-- +goose Down
ALTER TABLE messages DROP COLUMN server;
