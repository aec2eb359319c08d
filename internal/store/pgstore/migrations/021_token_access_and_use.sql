-- A token may be read-only: it reads the ledger through the API and the
-- console but writes nothing. Tokens created before are read-write.
ALTER TABLE tokens ADD COLUMN read_only boolean NOT NULL DEFAULT false;
-- When a token was last used, to the hour (NULL: never, or before this
-- migration).
ALTER TABLE tokens ADD COLUMN last_used_at timestamptz;
