-- Less work per operation on the write path (docs/performance.md), the
-- PostgreSQL side of SQLite's migration 005.
--
-- attempts_outcome (tenant, outcome) served only Stats, which counts every
-- attempt of a tenant joined with its operation: it reads them all either
-- way and never used the index. It cost an index entry on every claim and
-- another on every outcome, and, because outcome was indexed, made every
-- update of an attempt a non-HOT update that wrote new entries into all of
-- the table's indexes.
DROP INDEX attempts_outcome;

-- With no indexed column left among those an outcome or a dispatch mark
-- changes, an attempt's update can be a heap-only tuple update (no index
-- entries at all) when its page has room for the new version: leave room
-- on newly filled pages.
ALTER TABLE attempts SET (fillfactor = 85);
