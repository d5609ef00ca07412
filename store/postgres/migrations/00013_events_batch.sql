-- Run events stored a batch per row (issue 25): one row per write of a run's events instead of
-- one per event, so that a store under many fast streams keeps up. A row holds events with
-- consecutive numbers first_seq..last_seq as a JSON array, in order; the rows of a session never
-- overlap. The events stored one per row before are kept, each as a batch of one.

-- +goose Up
CREATE TABLE event_batches (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    first_seq  bigint NOT NULL,
    last_seq   bigint NOT NULL,
    data       bytea NOT NULL, -- the events as a JSON array
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, first_seq)
);
CREATE INDEX event_batches_created ON event_batches (created_at);
INSERT INTO event_batches (session_id, first_seq, last_seq, data, created_at)
    SELECT session_id, seq, seq, '\x5b'::bytea || data || '\x5d'::bytea, created_at FROM events;
DROP TABLE events;

-- +goose Down
CREATE TABLE events (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    run_id     text NOT NULL,
    type       text NOT NULL,
    data       bytea NOT NULL, -- the event as JSON
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX events_created ON events (created_at);
-- The fields are read from each event's text, not as JSON values: ->> fails on an event whose
-- text holds \u0000 (PostgreSQL text cannot), which a chunk may. An event's JSON begins
-- {"seq":…,"type":"…","run_id":"…" (parley.Event's field order).
INSERT INTO events (session_id, seq, run_id, type, data, created_at)
    SELECT b.session_id, substring(e.value::text from '^\{"seq":([0-9]+)')::bigint,
        COALESCE(substring(e.value::text from '^\{"seq":[0-9]+,"type":"[^"]*","run_id":"([^"]*)"'), ''),
        substring(e.value::text from '^\{"seq":[0-9]+,"type":"([^"]*)"'),
        convert_to(e.value::text, 'UTF8'), b.created_at
    FROM event_batches b, json_array_elements(convert_from(b.data, 'UTF8')::json) e;
DROP TABLE event_batches;
