-- Workspace (issue 20): each session's todo list, projects that group sessions, and each project's
-- memory (seed 002's todos.json and memory.json, kept here).

-- +goose Up
CREATE TABLE projects (
    id           TEXT PRIMARY KEY,
    owner        TEXT NOT NULL,
    name         TEXT NOT NULL,
    instructions TEXT NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL, -- Unix microseconds, as everywhere in this schema
    updated_at   INTEGER NOT NULL
);
CREATE INDEX projects_owner_updated ON projects (owner, updated_at DESC, id DESC);

-- No foreign key (SQLite could not drop the column again): DeleteProject sets the sessions of a
-- deleted project to NULL, and SetSessionProject checks that the project exists.
ALTER TABLE sessions ADD COLUMN project_id TEXT;
CREATE INDEX sessions_project ON sessions (project_id, updated_at DESC, id DESC) WHERE project_id IS NOT NULL;

CREATE TABLE memory_entries (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    content    TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '', -- the session that saved it; no foreign key: facts outlive it
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX memory_entries_project ON memory_entries (project_id, created_at DESC, id DESC);

-- The whole list as one JSON array: the todo tools replace it at once.
CREATE TABLE todos (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    items      TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE todos;
DROP TABLE memory_entries;
DROP INDEX sessions_project;
ALTER TABLE sessions DROP COLUMN project_id;
DROP TABLE projects;
