package opledger_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// TestOpenSQLiteDSNPath: Open creates the ledger at exactly the file
// sqlitestore.DSNPath reads from the DSN (the one parser opledger bench
// uses too), its name taken literally, and nowhere else.
func TestOpenSQLiteDSNPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct{ dsn, file string }{
		{"sqlite:" + filepath.Join(dir, "plain.db"), "plain.db"},
		{"sqlite://" + filepath.Join(dir, "slashes.db"), "slashes.db"},
		{"sqlite:" + filepath.Join(dir, "prod#x.db"), "prod#x.db"},
		{"sqlite:" + filepath.Join(dir, "prod?.db"), "prod?.db"},
		{"sqlite:" + filepath.Join(dir, "a%41.db"), "a%41.db"},
	} {
		path, ok := sqlitestore.DSNPath(tc.dsn)
		require.True(t, ok, tc.dsn)
		require.Equal(t, filepath.Join(dir, tc.file), path, tc.dsn)
		l, err := opledger.Open(ctx, tc.dsn, opledger.Options{})
		require.NoError(t, err, tc.dsn)
		require.NoError(t, l.Close())
		_, err = os.Stat(path)
		require.NoError(t, err, "%s opens %s", tc.dsn, path)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, wrong := range []string{"prod", "aA.db"} {
		require.NotContains(t, names, wrong)
	}
}

// TestOpenSQLiteMemoryRefused: sqlite::memory: names an in-memory
// database, one per connection and gone with the process: refused, with
// nothing created (it made an empty file named ":memory:", and the
// server's readers failed with "no such table").
func TestOpenSQLiteMemoryRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, existing := range []bool{false, true} {
		_, err := opledger.Open(context.Background(), "sqlite::memory:", opledger.Options{ExistingOnly: existing})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, "sqlite::memory: is an in-memory database, which opledger does not use")
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing created")
}
