-- Failed turns (issue 18): the assistant message stored when a run's model call failed carries the
-- error's code, so that the turn is left out of what the model is sent and can be retried.

-- +goose Up
ALTER TABLE messages ADD COLUMN error TEXT; -- NULL but on the assistant message of a failed turn

-- +goose Down
ALTER TABLE messages DROP COLUMN error;
