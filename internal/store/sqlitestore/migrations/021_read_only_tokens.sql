-- A token may be read-only: it reads the ledger through the API and the
-- console but writes nothing. Tokens created before are read-write.
ALTER TABLE tokens ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0;
