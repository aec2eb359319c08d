package opledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// execLedgerSQL runs q on the store of dsn, outside any Ledger.
func execLedgerSQL(t *testing.T, dsn, q string) {
	t.Helper()
	ctx := context.Background()
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, q)
		require.NoError(t, err, q)
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, q)
	require.NoError(t, err, q)
}

// schemaVersion reads the newest migration the store of dsn records.
func schemaVersion(t *testing.T, dsn string) int {
	t.Helper()
	ctx := context.Background()
	var v int
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v))
		return v
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v))
	return v
}

// TestOpenExistingOnlyDoesNotMigrate: a tool that only reads or decides
// (ExistingOnly) does not upgrade a ledger an older release may still be
// writing to. It refuses it, naming both versions and what to do, and
// leaves it at its version; an Open without ExistingOnly migrates it.
func TestOpenExistingOnlyDoesNotMigrate(t *testing.T) {
	t.Parallel()
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	newest := versions[len(versions)-1]
	for _, s := range testdb.Stores() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			if s.Name == "postgres" {
				testdb.RequirePostgres(t)
			}
			ctx := context.Background()
			dsn := s.NewDSN(t)
			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			require.NoError(t, l.Close())

			// As an older release left it: its newest migration not
			// applied yet. (Only the recorded version matters here.)
			execLedgerSQL(t, dsn, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version = %d`, newest))
			_, err = opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
			require.Error(t, err)
			require.NotErrorIs(t, err, opledger.ErrInvalidInput, "a failure, not a mistyped store")
			want := fmt.Sprintf("has schema version %d, older than this opledger uses (%d), and a command that only reads or decides does not upgrade it: ", newest-1, newest)
			require.ErrorContains(t, err, want)
			require.ErrorContains(t, err, "then run opledger migrate (see Upgrading in docs/operations.md)")
			if s.Name == "sqlite" {
				require.ErrorContains(t, err, "the ledger at "+strings.TrimPrefix(dsn, "sqlite:")+" has")
				require.ErrorContains(t, err, "back it up (opledger backup), stop every process of this ledger, then run")
			}
			require.NotContains(t, err.Error(), "\n")
			require.Equal(t, newest-1, schemaVersion(t, dsn), "left at its version")

			// A ledger migrated by a newer release is refused as Migrate
			// refuses it.
			execLedgerSQL(t, dsn, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_from_the_future.sql', `+
				map[string]string{"sqlite": "0", "postgres": "now()"}[s.Name]+`)`)
			_, err = opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
			require.ErrorContains(t, err, fmt.Sprintf("the store's schema is at version 999, newer than this opledger knows (%d)", newest))
			execLedgerSQL(t, dsn, `DELETE FROM schema_migrations WHERE version = 999`)
			require.Equal(t, newest-1, schemaVersion(t, dsn))
		})
	}
}

// TestOpenRefusesUnwritableSQLite: a process that writes (Open without
// ExistingOnly: serve, proxy, migrate) refuses a SQLite file it may not
// write, which SQLite would open read-only, to fail every write later,
// and says why; one that only reads still opens it.
func TestOpenRefusesUnwritableSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	testdb.MakeUnwritable(t, path)

	_, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.Error(t, err)
	require.NotErrorIs(t, err, opledger.ErrInvalidInput)
	require.Regexp(t, `^cannot write the ledger at `+path+`: open `+path+`: (permission denied|operation not permitted); `+
		`a process that writes to the ledger \(serve, proxy, migrate\) needs a file it may write$`, err.Error())

	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.NoError(t, err, "a reader does not need to write")
	_, err = l.List(ctx, opledger.ListOptions{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestOpenRefusesUnwritableSQLiteSideFiles: a process that writes
// refuses, as it refuses a ledger file it may not write, a ledger whose
// -wal or -shm file it may not write: such as those a reader of another
// user leaves beside the ledger when it read it while no process had it
// open (SQLite gives them the ledger's mode, but the reader as owner, and
// a reader cannot remove them). SQLite would open the ledger, and fail
// every write ("attempt to write a readonly database"): serve used to
// report itself serving, and migrate the ledger up to date.
func TestOpenRefusesUnwritableSQLiteSideFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoFileExists(t, path+"-shm", "no process has it open")

	// A reader that may not write the ledger leaves -wal and -shm.
	testdb.MakeUnwritable(t, path)
	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.NoError(t, err)
	_, err = l.List(ctx, opledger.ListOptions{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.FileExists(t, path+"-shm")
	require.FileExists(t, path+"-wal")
	if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	// Its files are not this process's to write.
	testdb.MakeUnwritable(t, path+"-shm")

	_, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.Error(t, err)
	require.NotErrorIs(t, err, opledger.ErrInvalidInput)
	require.Regexp(t, `^cannot write the ledger at `+path+`: its file `+path+`-shm: access `+path+`-shm: (permission denied|operation not permitted) \(a process of another user`, err.Error())
	require.NotContains(t, err.Error(), "\n")
	// Named through a symbolic link, the files are beside the file it
	// names, where SQLite makes them.
	link := filepath.Join(t.TempDir(), "link.db")
	require.NoError(t, os.Symlink(path, link))
	_, err = opledger.Open(ctx, "sqlite:"+link, opledger.Options{})
	require.ErrorContains(t, err, "its file "+path+"-shm")

	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.NoError(t, err, "a reader does not need to write")
	_, err = l.List(ctx, opledger.ListOptions{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestOpenReadOnlyRollbackJournalLedger: a ledger file still in
// rollback-journal mode (a backup made by an older release), which every
// open switches to WAL, opened to read it (ExistingOnly) by a process that
// may not write the file, fails saying so and what to do, instead of
// SQLite's "attempt to write a readonly database"; the file is left in
// rollback-journal mode. Once a process that may write it opened it, the
// same reader opens it. The file is made unwritable with chmod, or, as
// root (who writes a file of any mode), with chattr +i (skipped where
// that fails): what it proves is the refusal of a file open(2) will not
// write, whichever the cause.
func TestOpenReadOnlyRollbackJournalLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	dsn := "sqlite:" + path
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	execLedgerSQL(t, dsn, `PRAGMA journal_mode=DELETE`)
	header := func() [2]byte {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return [2]byte{b[18], b[19]}
	}
	require.Equal(t, [2]byte{1, 1}, header(), "rollback-journal mode")
	testdb.MakeUnwritable(t, path)

	_, err = opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
	require.Error(t, err)
	require.Equal(t, "cannot read the ledger at "+path+": it is in rollback-journal mode (a backup made by an older opledger), "+
		"which opening it switches to WAL, and this process may not write it: open it once as a user who may write it "+
		"(opledger migrate --db sqlite:"+path+"), then read it as before", err.Error())
	require.Equal(t, [2]byte{1, 1}, header(), "left as it was")

	if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); os.Geteuid() == 0 && err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	require.NoError(t, os.Chmod(path, 0o600))
	l, err = opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.Equal(t, [2]byte{2, 2}, header(), "WAL mode")
	testdb.MakeUnwritable(t, path)
	l, err = opledger.Open(ctx, dsn, opledger.Options{ExistingOnly: true})
	require.NoError(t, err, "a reader of a WAL ledger need not write it")
	_, err = l.List(ctx, opledger.ListOptions{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
}
