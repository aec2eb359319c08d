-- A tombstone keeps how many attempts the operation had: a compacted
-- operation showed attempt_count 0 whatever it took. Tombstones written
-- before keep 0: unknown.
ALTER TABLE tombstones ADD COLUMN attempt_count integer NOT NULL DEFAULT 0;
