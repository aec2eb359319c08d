package sqlitestore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// TestDSNPath: the file of a sqlite: DSN is the rest of it, taken
// literally, without a leading "//"; anything else is not a sqlite: DSN.
func TestDSNPath(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"sqlite:opledger.db":   "opledger.db",
		"sqlite://new.db":      "new.db",
		"sqlite:///var/l.db":   "/var/l.db",
		"sqlite:/var/l.db":     "/var/l.db",
		"sqlite:prod#x.db":     "prod#x.db",
		"sqlite:prod?.db":      "prod?.db",
		"sqlite:dir/a%20b.db":  "dir/a%20b.db",
		"sqlite:":              "",
		"sqlite://":            "",
		"sqlite:////double.db": "//double.db",
	} {
		path, ok := sqlitestore.DSNPath(dsn)
		require.True(t, ok, dsn)
		require.Equal(t, want, path, dsn)
	}
	for _, dsn := range []string{"", "opledger.db", "SQLITE:x.db", "postgres://u@h/db", "file:x.db"} {
		_, ok := sqlitestore.DSNPath(dsn)
		require.False(t, ok, dsn)
	}
}

// TestFileURI: '%', '?' and '#' are escaped, so that SQLite reads the
// path back as written; an absolute path gets an empty authority.
func TestFileURI(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"ledger.db":     "file:ledger.db",
		"prod#x.db":     "file:prod%23x.db",
		"prod?.db":      "file:prod%3F.db",
		"a%41.db":       "file:a%2541.db",
		"/var/l.db":     "file:///var/l.db",
		"//host/l.db":   "file:////host/l.db",
		"with space.db": "file:with space.db",
	} {
		require.Equal(t, want, sqlitestore.FileURI(path), path)
	}
}
