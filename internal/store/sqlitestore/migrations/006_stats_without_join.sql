-- Stats (read by /metrics, /v1/stats and the console) without reading
-- every operation (docs/scaling.md, "Statistics"). Before this migration,
-- counting attempts by destination joined every attempt to its operation:
-- 2.5-3.5 s of the 3.2 s Stats took on a ledger of 1,000,000 operations
-- (BenchmarkStats).
--
-- An attempt now carries its operation's destination, which never changes
-- once recorded, so that the count reads the attempts alone. The copy
-- below runs once, inside the migration transaction: seconds per million
-- attempts.
ALTER TABLE attempts ADD COLUMN destination TEXT NOT NULL DEFAULT '';
UPDATE attempts SET destination = COALESCE(
    (SELECT o.destination FROM operations o WHERE o.tenant = attempts.tenant AND o.key = attempts.key), '');

-- The operations with a duplicate effect, few or none: Stats sums their
-- duplicates here, and counts operations by state from the state index,
-- instead of reading every operation row.
CREATE INDEX operations_duplicates ON operations (tenant, duplicate_effects) WHERE duplicate_effects > 0;
