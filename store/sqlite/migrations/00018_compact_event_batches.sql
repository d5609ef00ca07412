-- Compact event rows (issue 25). A row of event_batches written from now on may be, instead of
-- the JSON array of its events, the object {"f":first,"s":session,"r":run,"e":[…]}: each event
-- of e without its "seq", "run_id" and "session_id", which every event of the row repeats (the
-- store puts them back on reading: rowcodec.DecodeEventBatch). The rows stored before stay as
-- they are and read as before, so up changes no row. Down turns every compact row back into
-- the JSON array of its events, each with its seq, run_id and session_id again (after its
-- other members: the same events, read back).

-- +goose Up
SELECT 1;

-- +goose Down
UPDATE event_batches SET data = CAST((
    SELECT json_group_array(json_set(e.value,
        '$.seq', json_extract(CAST(event_batches.data AS TEXT), '$.f') + e.key,
        '$.run_id', json_extract(CAST(event_batches.data AS TEXT), '$.r'),
        '$.session_id', json_extract(CAST(event_batches.data AS TEXT), '$.s')))
    FROM (SELECT key, value FROM json_each(CAST(event_batches.data AS TEXT), '$.e') ORDER BY key) AS e
) AS BLOB)
WHERE substr(data, 1, 1) = CAST('{' AS BLOB);
