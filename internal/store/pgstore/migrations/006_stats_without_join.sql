-- Stats (read by /metrics, /v1/stats and the console) without joining
-- every attempt to its operation: the PostgreSQL side of SQLite's
-- migration 006 (docs/scaling.md, "Statistics").
--
-- An attempt now carries its operation's destination, which never changes
-- once recorded. Adding the column is instant; the copy rewrites every
-- attempt row once, inside the migration transaction (seconds per million
-- attempts, and room for a second version of each row until vacuum).
ALTER TABLE attempts ADD COLUMN destination text NOT NULL DEFAULT '';
UPDATE attempts a SET destination = o.destination
    FROM operations o WHERE o.tenant = a.tenant AND o.key = a.key AND o.destination <> '';

-- The operations with a duplicate effect, few or none: Stats sums their
-- duplicates here, and counts operations by state from the state index,
-- instead of reading every operation row. No entry is written for an
-- operation without duplicates.
CREATE INDEX operations_duplicates ON operations (tenant, duplicate_effects) WHERE duplicate_effects > 0;
