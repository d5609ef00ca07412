-- API keys (issue #6): only the SHA-256 hash of a key's secret is kept.

-- +goose Up
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    user_id      text NOT NULL,
    name         text NOT NULL DEFAULT '',
    prefix       text NOT NULL,
    hash         bytea NOT NULL UNIQUE,
    admin        boolean NOT NULL DEFAULT false,
    guest        boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_user ON api_keys (guest, user_id, created_at);
CREATE INDEX api_keys_expires ON api_keys (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE api_keys;
