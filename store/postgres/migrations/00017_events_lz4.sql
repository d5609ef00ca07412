-- The events' rows are compressed with lz4 where the server has it (issue 25, eleventh pass).
-- A chat's events make one row of about 2.3 KB of JSON, over the 2 KB past which PostgreSQL
-- compresses a row's largest value before storing it: with the default method (pglz) that
-- compression was the backends' costliest function at 32 chats in flight (4% of their CPU).
-- lz4 compresses and decompresses the same rows several times faster. It applies to the values
-- written from then on; the rows stored before stay as they are, and both kinds are read alike.
-- No row is rewritten: the ALTER changes the column's definition alone, under a lock held for
-- that instant. A server built without lz4 (or older than 14, which has no choice of method)
-- keeps pglz.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE event_batches ALTER COLUMN data SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression') THEN
        ALTER TABLE event_batches ALTER COLUMN data SET COMPRESSION default;
    END IF;
END
$$;
-- +goose StatementEnd
