-- One index of the operations by state that leaves the succeeded ones out,
-- in place of the list index by state and the lease index: the PostgreSQL
-- side of SQLite's migration 010 (docs/performance.md, "Operations by
-- state, but the succeeded ones").
--
-- Almost every operation ends succeeded and stays so until retention. A
-- claim added an entry to both old indexes, and a report, which changes
-- the state and so can never be a heap-only update, added another to the
-- list index by state. operations_not_succeeded takes the claim's entry
-- only: two index entries fewer per operation, in an index that holds the
-- live operations rather than the whole ledger.
--
-- Lists of succeeded operations read operations_tenant_created, where
-- nearly every entry matches. State counts take the succeeded ones as the
-- rest of the tenant's operations. The lease sweeper reads the in_progress
-- part; lease_expires_at is the last column, so that the condition on it
-- is checked on the index entries and the running leases are skipped
-- without visiting their rows.
DROP INDEX operations_tenant_state_created;
DROP INDEX operations_lease;
CREATE INDEX operations_not_succeeded ON operations (state, tenant, created_at, key, lease_expires_at)
    WHERE state <> 'succeeded';
