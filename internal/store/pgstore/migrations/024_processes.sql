-- The processes that maintain the ledger (Ledger.Announce, run by
-- Maintain): each writes its row at every announcement, with digests of
-- the settings that act on the whole ledger, so that each can see
-- another that runs with other settings. A row not written for a while
-- belongs to a process that stopped without removing it, and is deleted
-- by the next announcement of any other. settings is a JSON object of
-- setting names and digests; no setting's value is kept.
CREATE TABLE processes (
    id         text        PRIMARY KEY,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    settings   jsonb       NOT NULL DEFAULT '{}'
);
