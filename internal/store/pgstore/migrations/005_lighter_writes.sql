-- Nothing to do on PostgreSQL. SQLite's migration 005 drops attempts_outcome
-- and rebuilds its timeline (without AUTOINCREMENT) and attempts (WITHOUT
-- ROWID) tables to lighten its write path; the stores carry the same
-- migration versions (internal/store/migrate, TestMigrationVersionsMatchSQLite),
-- so this version exists here too. PostgreSQL keeps attempts_outcome: its
-- schema is left to the PostgreSQL store.
SELECT 1;
