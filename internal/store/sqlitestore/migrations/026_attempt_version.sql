-- The content version each attempt was claimed for. A revision replaces
-- an operation's content only while nothing was dispatched, but a worker
-- that called without its dispatch mark may still report on an earlier
-- version: such a late success or uncertain report is held for a person
-- instead of settling the newer content. 0 for attempts claimed before
-- this migration, whose version is not known.
ALTER TABLE attempts ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
