package sqlitestore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{NewDSN: func(t *testing.T) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	}, LegacyRecovery: func(t *testing.T, dsn, tenant, key string, at time.Time, waited time.Duration) {
		rawLedgerExec(t, dsn, `INSERT INTO recoveries (tenant, key, decision, at, waited) VALUES (?, ?, 'mark_succeeded', ?, ?)`,
			tenant, key, at.UnixMicro(), waited.Microseconds())
	}, RecoveryKeys: func(t *testing.T, dsn string) int {
		var n int
		rawLedgerQuery(t, dsn, `SELECT count(*) FROM recoveries WHERE key <> ''`, &n)
		return n
	}})
}

// rawLedgerExec runs q on the SQLite ledger of dsn, outside the store.
func rawLedgerExec(t *testing.T, dsn, q string, args ...any) {
	t.Helper()
	path, ok := sqlitestore.DSNPath(dsn)
	require.True(t, ok, dsn)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(context.Background(), q, args...)
	require.NoError(t, err, q)
}

// rawLedgerQuery reads the one row of q on the SQLite ledger of dsn into
// dest, outside the store.
func rawLedgerQuery(t *testing.T, dsn, q string, dest ...any) {
	t.Helper()
	path, ok := sqlitestore.DSNPath(dsn)
	require.True(t, ok, dsn)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.QueryRowContext(context.Background(), q).Scan(dest...), q)
}

// TestOpenTakesPathLiterally opens ledgers whose file names hold the
// characters a SQLite URI gives a meaning to, and finds each under its own
// name: "led#1.db" and "led#2.db" must not both open "led".
func TestOpenTakesPathLiterally(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	names := []string{"led#1.db", "led#2.db", "q?x.db", "a%20b.db", "b%41.db", "with space.db"}
	for _, name := range names {
		for _, path := range []string{filepath.Join(dir, name), "/" + filepath.Join(dir, name)} {
			s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
			require.NoError(t, err, path)
			require.NoError(t, s.Migrate(ctx, nil), path)
			require.NoError(t, s.Close(), path)
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	for _, name := range names {
		require.Contains(t, files, name)
	}
	for _, wrong := range []string{"led", "q", "a b.db", "bA.db"} {
		require.NotContains(t, files, wrong)
	}
}

// TestNewerSchemaRefused: a store a newer release has migrated is refused,
// not taken for up to date and written with a schema this one does not know.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx, nil))
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_from_the_future.sql', 0)`)
	require.NoError(t, err)
	err = s.Migrate(ctx, nil)
	require.ErrorContains(t, err, "schema is at version 999, newer than this opledger knows")
}

// TestMigrateUpToDateTakesNoWriteLock: a ledger that lacks no migration
// is opened and migrated while another connection holds the write lock,
// which it gives back only afterwards: a process that only reads the
// ledger does not wait behind its writers (nor fail past the busy
// timeout).
func TestMigrateUpToDateTakesNoWriteLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.Close())

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.NoError(t, err)
	s, err = sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx, nil), "nothing to apply: read without the lock")
	require.NoError(t, s.Close())
	_, err = holder.ExecContext(ctx, `ROLLBACK`)
	require.NoError(t, err)
}

// TestOpenRefusesAnotherApplicationsDatabase: a file holding another
// application's tables is not a ledger, whatever it calls them: Open
// refuses it (store.ErrNotLedger, its tables named) before anything is
// written, not even the switch to WAL, so its bytes stay as they were and
// no -wal file appears. A schema_migrations table counts only with the
// ledger's own first migration in it; an empty file becomes a ledger.
func TestOpenRefusesAnotherApplicationsDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := map[string]struct{ sql, others string }{
		"its own sessions":        {`CREATE TABLE users (id int); CREATE TABLE sessions (id int, user_id int, expires_at int)`, "sessions, users"},
		"rails schema_migrations": {`CREATE TABLE schema_migrations (version varchar PRIMARY KEY); INSERT INTO schema_migrations VALUES ('20240101120000')`, "schema_migrations"},
		"golang-migrate's":        {`CREATE TABLE schema_migrations (version uint64, dirty bool); INSERT INTO schema_migrations VALUES (18, 0)`, "schema_migrations"},
		"the ledger's shape":      {`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL); INSERT INTO schema_migrations VALUES (1, 'create_users')`, "schema_migrations"},
		"a view":                  {`CREATE VIEW report AS SELECT 1 AS n`, "report"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.db")
			db, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			_, err = db.ExecContext(ctx, tc.sql)
			require.NoError(t, err)
			require.NoError(t, db.Close())
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			holds, err := sqlitestore.HoldsLedger(ctx, path)
			require.NoError(t, err)
			require.False(t, holds)
			_, err = sqlitestore.Open(ctx, path, sqlitestore.Options{})
			require.ErrorIs(t, err, store.ErrNotLedger)
			require.ErrorContains(t, err, "holds other tables ("+tc.others+") and no opledger ledger")
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "the file is as it was")
			require.NoFileExists(t, path+"-wal")
		})
	}

	path := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(ctx, nil))
	holds, err := sqlitestore.HoldsLedger(ctx, path)
	require.NoError(t, err)
	require.True(t, holds, "a migrated file holds a ledger")
	s2, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err, "a ledger opens again")
	require.NoError(t, s2.Close())
}

// TestHoldsLedgerLeavesNoFiles: reading a ledger that no process has open
// creates its -wal and -shm files, which a read-only connection cannot
// remove: HoldsLedger and Backup remove them, so that a command that only
// read the ledger (or refused it) leaves its directory as it found it,
// and leave those of a store that has it open.
func TestHoldsLedgerLeavesNoFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.Close())
	before := testdb.FileNames(t, dir)
	require.NotContains(t, before, "ledger.db-wal")
	require.NotContains(t, before, "ledger.db-shm")

	holds, err := sqlitestore.HoldsLedger(ctx, path)
	require.NoError(t, err)
	require.True(t, holds)
	require.Equal(t, before, testdb.FileNames(t, dir), "HoldsLedger leaves no -wal or -shm file")
	backup := filepath.Join(t.TempDir(), "backup.db")
	require.NoError(t, sqlitestore.Backup(ctx, path, backup))
	require.Equal(t, before, testdb.FileNames(t, dir), "nor does Backup")

	// Those of a store that has the ledger open stay, and it goes on.
	s, err = sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Ping(ctx))
	holds, err = sqlitestore.HoldsLedger(ctx, path)
	require.NoError(t, err)
	require.True(t, holds)
	require.FileExists(t, path+"-wal")
	require.FileExists(t, path+"-shm")
	require.NoError(t, s.Migrate(ctx, nil))
}

// TestMigrateUnwritableSaysWhy: Migrate with a migration to apply, on a
// file this process may not write (opened as a reader opens it, without
// the writability check), says why its write failed, as every other write
// of the store does, not which statement failed ("attempt to write a
// readonly database").
func TestMigrateUnwritableSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	testdb.MakeUnwritable(t, path) // every migration to apply

	s, err = sqlitestore.Open(ctx, path, sqlitestore.Options{})
	require.NoError(t, err)
	defer s.Close()
	err = s.Migrate(ctx, nil)
	require.Error(t, err)
	require.Regexp(t, `^cannot write the ledger at `+path+`: this process may not write its file, or the -wal and -shm files beside it; nothing was recorded \(.*readonly database.*\)$`, err.Error())
}
