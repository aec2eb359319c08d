-- The recoveries that still hold their operation's key, by decision time,
-- for retention's ForgetRecoveryKeysBefore. Releases before 6 December
-- 2026 stored the key with each operator decision; later ones store ""
-- and retention clears the old keys after the tombstone retention. It
-- read the whole table to find them at every run, however few were left,
-- and a ledger's decisions pile up with the years. Only the rows holding
-- a key have an entry (none on a ledger made by a later release), and
-- each leaves the index as retention clears its key, so the read costs
-- what there is to clear. Built from one read of the table.
CREATE INDEX recoveries_keyed ON recoveries (at) WHERE key <> '';
