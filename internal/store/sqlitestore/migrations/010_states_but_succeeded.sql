-- One index of the operations by state that leaves the succeeded ones out,
-- in place of the list index by state and the lease index
-- (docs/performance.md, "Operations by state, but the succeeded ones").
--
-- Almost every operation ends succeeded and stays so until retention. The
-- list index by state held an entry for each of them: a report moved its
-- operation's entry from the in_progress part of the index to the
-- succeeded part, two leaves apart, and the lease index took an entry at
-- the claim and lost it at the report. operations_not_succeeded takes an
-- entry at the claim (in_progress) and loses it at the report, in the few
-- pages of the live operations: three b-tree writes fewer per operation,
-- and about three pages fewer per claim and report, at one caller.
--
-- Lists of succeeded operations read operations_tenant_created, where
-- nearly every entry matches. State counts take the succeeded ones as the
-- rest of the tenant's operations. The lease sweeper reads the in_progress
-- part, which is the operations being worked on; lease_expires_at is in
-- the index so that it reads no row to skip the leases still running.
DROP INDEX operations_tenant_state_created;
DROP INDEX operations_lease;
CREATE INDEX operations_not_succeeded ON operations (state, tenant, created_at, key, lease_expires_at)
    WHERE state <> 'succeeded';
