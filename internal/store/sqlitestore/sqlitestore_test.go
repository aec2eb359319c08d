package sqlitestore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{NewDSN: func(t *testing.T) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	}})
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
