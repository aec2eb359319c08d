-- The two indexes that list a tenant's operations newest first, kept in
-- ascending order (docs/performance.md, "SQLite: list indexes in
-- ascending order").
--
-- Created as (…, created_at DESC, key DESC), they took every new operation
-- at their left edge. An index b-tree splits a full page by sharing its
-- cells with its siblings, and at the left edge that left pages partly
-- full and touched the parent at most commits: with 32 concurrent callers
-- these two indexes wrote 6.6 to 7.2 of the 23 to 25 pages of a commit,
-- and 4.7 to 5.2 in ascending order (counted from the WAL's frames; the
-- method is in docs/performance.md). ORDER BY created_at DESC, key DESC
-- reads an ascending index backwards.
DROP INDEX operations_tenant_created;
DROP INDEX operations_tenant_state_created;
CREATE INDEX operations_tenant_created ON operations (tenant, created_at, key);
CREATE INDEX operations_tenant_state_created ON operations (tenant, state, created_at, key);
