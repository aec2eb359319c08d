-- A report that arrives after its attempt has ended (its lease expired, or
-- it had reported already) is kept beside the attempt's outcome instead of
-- replacing it. Until now it replaced the outcome, so counts of attempts by
-- outcome could go down (a lease_expired attempt became a succeeded one),
-- and opledger_attempts_total, a counter, went down with them. Attempts
-- that took a late report before this migration keep the outcome it gave.
ALTER TABLE attempts ADD COLUMN late_outcome TEXT NOT NULL DEFAULT '';
