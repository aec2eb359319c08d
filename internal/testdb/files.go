package testdb

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// FileNames lists the names in dir, sorted: what a command left beside a
// SQLite ledger (its -wal and -shm files, say).
func FileNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
