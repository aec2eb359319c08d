-- Attempts and timeline entries keyed by their operation: the PostgreSQL
-- side of SQLite's migration 008 (docs/performance.md, "PostgreSQL:
-- history keyed by its operation").
--
-- Both tables had a primary key on id alone and a second index by
-- (tenant, key, …) for the reads, which always name the operation:
-- ListTimeline and ListAttempts by (tenant, key), GetAttempt and the
-- report's attempt update by (tenant, key, id). The id-only keys served no
-- read, but every attempt and every timeline entry went into both indexes:
-- four index entries per protected operation (one attempt, three entries)
-- written for nothing, and two indexes more for each insert to open.
--
-- Keyed by (tenant, key, id), each table has one index. Attempt ids are
-- ULIDs made by the ledger and timeline ids come from the table's sequence,
-- so both stay unique on their own; the keys only add the operation in
-- front. An operation's timeline is read in id order straight from the key.
ALTER TABLE timeline DROP CONSTRAINT timeline_pkey;
DROP INDEX timeline_operation;
ALTER TABLE timeline ADD PRIMARY KEY (tenant, key, id);

ALTER TABLE attempts DROP CONSTRAINT attempts_pkey;
DROP INDEX attempts_operation;
ALTER TABLE attempts ADD PRIMARY KEY (tenant, key, id);
