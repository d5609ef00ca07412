-- Workspace (issue 20): each session's todo list, projects that group sessions, and each project's
-- memory (seed 002's todos.json and memory.json, kept here).

-- +goose Up
CREATE TABLE projects (
    id           text PRIMARY KEY,
    owner        text NOT NULL,
    name         text NOT NULL,
    instructions text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
CREATE INDEX projects_owner_updated ON projects (owner, updated_at DESC, id DESC);

-- A deleted project leaves its sessions without one.
ALTER TABLE sessions ADD COLUMN project_id text REFERENCES projects (id) ON DELETE SET NULL;
CREATE INDEX sessions_project ON sessions (project_id, updated_at DESC, id DESC) WHERE project_id IS NOT NULL;

CREATE TABLE memory_entries (
    id         text PRIMARY KEY,
    project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    content    text NOT NULL,
    session_id text NOT NULL DEFAULT '', -- the session that saved it; no foreign key: facts outlive it
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX memory_entries_project ON memory_entries (project_id, created_at DESC, id DESC);

-- The whole list as one JSON array: the todo tools replace it at once.
CREATE TABLE todos (
    session_id text PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    items      jsonb NOT NULL,
    updated_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE todos;
DROP TABLE memory_entries;
ALTER TABLE sessions DROP COLUMN project_id;
DROP TABLE projects;
