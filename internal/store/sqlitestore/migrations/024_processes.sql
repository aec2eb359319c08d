-- The processes that maintain the ledger (Ledger.Announce, run by
-- Maintain): each writes its row at every announcement, with digests of
-- the settings that act on the whole ledger, so that each can see
-- another that runs with other settings. A row not written for a while
-- belongs to a process that stopped without removing it, and is deleted
-- by the next announcement of any other. settings is a JSON object of
-- setting names and digests; no setting's value is kept. Times are Unix
-- microseconds in UTC.
CREATE TABLE processes (
    id         TEXT    PRIMARY KEY,
    host       TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    settings   TEXT    NOT NULL DEFAULT '{}'
) WITHOUT ROWID;
