-- A token may be read-only: it reads the ledger through the API and the
-- console but writes nothing. Tokens created before are read-write.
ALTER TABLE tokens ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0;
-- When a token was last used, to the hour (0: never, or before this
-- migration).
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
