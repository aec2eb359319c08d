-- PostgreSQL twin of sqlitestore's 013_sessions.sql: console sessions,
-- stored by the SHA-256 of their secret.
CREATE TABLE sessions (
    hash       text        NOT NULL PRIMARY KEY,
    token_id   text COLLATE "C" NOT NULL,
    tenant     text COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);
