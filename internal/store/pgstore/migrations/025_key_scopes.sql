-- The settings each destination's operation keys are derived from
-- (Ledger.PinKeyScope): a proxy derives its keys from its tenant and the
-- digest of a credential header, so that the same keys under other
-- settings are other keys, and every earlier request would be taken as
-- new. One row per destination, store-wide; settings is a JSON object of
-- setting names and values (header names, a tenant: no secret).
CREATE TABLE key_scopes (
    destination text        PRIMARY KEY,
    settings    jsonb       NOT NULL,
    recorded_at timestamptz NOT NULL
);
