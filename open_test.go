package opledger_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

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

	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{ExistingOnly: true})
	require.NoError(t, err, "an existing ledger opens")
	require.NoError(t, l.Close())
}
