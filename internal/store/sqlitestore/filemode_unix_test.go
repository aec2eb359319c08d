//go:build unix

package sqlitestore_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// TestNewLedgerFileIsPrivate: a ledger the store creates is readable by
// its owner only, under the usual umask 022 (which left it -rw-r--r--),
// and so are the -wal and -shm files SQLite makes beside it and the
// write lock's file: they hold what a backup holds. An existing file
// keeps its mode (a group given access on purpose keeps it), and the
// files beside it follow that. Not parallel: the umask is the process's.
func TestNewLedgerFileIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
	ctx := context.Background()
	dir := t.TempDir()

	modes := func(path string, want fs.FileMode) {
		t.Helper()
		s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
		require.NoError(t, err)
		defer s.Close()
		require.NoError(t, s.Migrate(ctx, nil))
		suffixes := []string{"", "-wal", "-shm"}
		if _, err := os.Stat(path + sqlitestore.WriteLockSuffix); err == nil {
			suffixes = append(suffixes, sqlitestore.WriteLockSuffix)
		}
		for _, suffix := range suffixes {
			fi, err := os.Stat(path + suffix)
			require.NoError(t, err, suffix)
			require.Equal(t, want, fi.Mode().Perm(), "%s%s is %v", filepath.Base(path), suffix, fi.Mode())
		}
	}
	modes(filepath.Join(dir, "ledger.db"), 0o600)

	// A symbolic link to a file that does not exist yet: the file is made
	// where it points, as private.
	target := filepath.Join(dir, "target.db")
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "link.db")))
	s, err := sqlitestore.Open(ctx, filepath.Join(dir, "link.db"), sqlitestore.Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	fi, err := os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())

	shared := filepath.Join(dir, "shared.db")
	require.NoError(t, os.WriteFile(shared, nil, 0o640))
	require.NoError(t, os.Chmod(shared, 0o640))
	modes(shared, 0o640)
}
