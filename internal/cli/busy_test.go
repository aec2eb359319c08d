package cli_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestBusyLedger: a decision that waits for another process's write lock
// on the SQLite file past the busy timeout (10 s) fails with one line that
// says so and to try again, exit 1, and records nothing.
func TestBusyLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "busy.db")
	dsn := "sqlite:" + path
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "busy:1", Action: "crm.create", Destination: "crm",
		Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)

	// Another process's write, as a VACUUM would hold it.
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.NoError(t, err)
	out, errOut, code := run(t, "ops", "cancel", "busy:1", "--db", dsn, "--reason", "order withdrawn")
	_, err = conn.ExecContext(ctx, `ROLLBACK`)
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	require.Equal(t, 1, code, "%s%s", out, errOut)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, "the ledger is busy: another process holds its write lock; nothing was recorded, try again")
	op, err := l.Get(ctx, "busy:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State, "nothing was recorded")
	require.NoError(t, l.Close())
}
