-- One row that readiness probes write (GET /readyz, Ledger.Ready): a store
-- that answers reads but cannot commit a write (a full disk, a standby
-- or a read-only session after a failover, a lock held elsewhere) is not
-- ready.
CREATE TABLE readiness (
    id int PRIMARY KEY CHECK (id = 1),
    probed_at timestamptz NOT NULL
);
