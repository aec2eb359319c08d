-- A tombstone keeps the operation's content version, which its fingerprint
-- covers: an event repeating the content of an operation revised to
-- version 2 or later and since compacted is then recognised as the same
-- content (it was compared at version 1 and flagged a conflict).
-- Tombstones written before keep 0: unknown, compared as before.
ALTER TABLE tombstones ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
