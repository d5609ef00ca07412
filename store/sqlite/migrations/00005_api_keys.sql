-- API keys (issue #6): only the SHA-256 hash of a key's secret is kept.

-- +goose Up
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    user_id      TEXT NOT NULL,
    name         TEXT NOT NULL DEFAULT '',
    prefix       TEXT NOT NULL,
    hash         BLOB NOT NULL UNIQUE,
    admin        INTEGER NOT NULL DEFAULT 0,
    guest        INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL, -- microseconds since the epoch, as elsewhere
    expires_at   INTEGER,
    revoked_at   INTEGER,
    last_used_at INTEGER
);
CREATE INDEX api_keys_user ON api_keys (guest, user_id, created_at);
CREATE INDEX api_keys_expires ON api_keys (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE api_keys;
