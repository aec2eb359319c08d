-- One row that readiness probes write (GET /readyz, Ledger.Ready): a store
-- that answers reads but cannot commit a write (a full disk, a file system
-- gone read-only, a lock held elsewhere) is not ready.
CREATE TABLE readiness (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    probed_at INTEGER NOT NULL
);
