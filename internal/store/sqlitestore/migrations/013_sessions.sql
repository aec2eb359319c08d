-- Console sessions (Ledger.OpenSession): a browser keeps a random session
-- secret in a cookie instead of the API token it signed in with. Only the
-- SHA-256 of the secret is stored, so reading the database gives no
-- session away. A session lasts until expires_at, until it is closed, or
-- until its token is revoked (read through tokens); Compact deletes the
-- expired ones.
CREATE TABLE sessions (
    hash       TEXT    NOT NULL PRIMARY KEY,
    token_id   TEXT    NOT NULL,
    tenant     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_expires ON sessions (expires_at);
