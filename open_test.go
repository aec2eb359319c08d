package opledger_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpenRefusesUnknownDSN: a DSN naming no store is refused with what to
// give instead, as typed, and without its passwords.
func TestOpenRefusesUnknownDSN(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"/tmp/ledger.db":                          "got no scheme; for a SQLite file give sqlite:PATH",
		"SQLITE:/tmp/ledger.db":                   `in lower case (got "SQLITE:/tmp/ledger.db")`,
		"mysql://ann:secret@db/x?password=hidden": `(got "mysql://ann:xxxxx@db/x?password=xxxxx")`,
	} {
		_, err := opledger.Open(context.Background(), dsn, opledger.Options{})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, dsn)
		require.ErrorContains(t, err, want, dsn)
		require.NotContains(t, err.Error(), "secret")
		require.NotContains(t, err.Error(), "hidden")
	}
}

// TestOpenRefusesNegativeDurations: a negative duration in Options is a
// mistake, refused before anything is opened, not replaced by the default
// as 0 is.
func TestOpenRefusesNegativeDurations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, o := range map[string]opledger.Options{
		"Lease":              {Lease: -time.Second},
		"HoldReviewAfter":    {HoldReviewAfter: -time.Hour},
		"Retention":          {Retention: -time.Hour},
		"TombstoneRetention": {TombstoneRetention: -time.Hour},
	} {
		path := filepath.Join(dir, name+".db")
		_, err := opledger.Open(context.Background(), "sqlite:"+path, o)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
		require.ErrorContains(t, err, "Options."+name+" is -1", name)
		_, err = os.Stat(path)
		require.ErrorIs(t, err, fs.ErrNotExist, "nothing opened")
	}
}

// TestOpenExistingOnly: a tool that only reads a ledger does not create an
// empty one at a mistyped path.
func TestOpenExistingOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	_, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "no ledger at "+path)
	_, statErr := os.Stat(path)
	require.ErrorIs(t, statErr, fs.ErrNotExist, "nothing created")
	require.ErrorContains(t, err, "the file does not exist (a command that writes, such as serve or migrate, creates it)")
	// In a directory that does not exist, a command that writes would
	// not create the file either: the error says the directory is missing.
	inMissing := filepath.Join(t.TempDir(), "missing", "ledger.db")
	_, err = opledger.Open(ctx, "sqlite:"+inMissing, opledger.Options{ExistingOnly: true})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "no ledger at "+inMissing+": neither the file nor its directory "+filepath.Dir(inMissing)+" exists")

	// A file that is not a ledger is refused and left as it was: empty,
	// another application's database, not a database at all.
	other := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite", other)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	empty := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	text := filepath.Join(t.TempDir(), "notes.db")
	require.NoError(t, os.WriteFile(text, []byte("not a database, only some notes\n"), 0o644))
	for _, p := range []string{other, empty, text} {
		before, err := os.ReadFile(p)
		require.NoError(t, err)
		_, err = opledger.Open(ctx, "sqlite:"+p, opledger.Options{ExistingOnly: true})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, p)
		require.ErrorContains(t, err, "no ledger at "+p)
		after, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, before, after, "%s left as it was", p)
		_, statErr := os.Stat(p + "-wal")
		require.ErrorIs(t, statErr, fs.ErrNotExist, "%s: no WAL file made", p)
	}

	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.NoError(t, err, "an existing ledger opens")
	require.NoError(t, l.Close())
}
