package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStoreBusy: a call that waits for another process's lock longer than
// the ledger waits fails with ErrStoreBusy, saying so, and records
// nothing: on SQLite, another connection holds the file's write lock
// (BEGIN IMMEDIATE, as a VACUUM or another process's migration would)
// past the busy timeout; on PostgreSQL, another session holds the
// operation's row lock past the DSN's lock_timeout. Once the lock is
// gone, the same call succeeds.
func TestStoreBusy(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, dsn := openBusyLedger(t, st)
			in := opledger.Intent{Key: "busy:1", Action: "crm.create", Destination: "crm",
				Payload: json.RawMessage(`{"n":1}`)}
			_, _, err := l.Record(ctx, in)
			require.NoError(t, err)

			release := testdb.HoldLock(t, dsn, "default", "busy:1")
			_, err = l.Claim(ctx, "busy:1", opledger.ClaimOptions{})
			release()
			require.ErrorIs(t, err, opledger.ErrStoreBusy)
			require.NotErrorIs(t, err, opledger.ErrInvalidInput)
			require.ErrorContains(t, err, "another process holds its write lock; nothing was recorded, try again")

			op, err := l.Get(ctx, "busy:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State, "nothing was recorded")
			require.Zero(t, op.AttemptCount)
			c, err := l.Claim(ctx, "busy:1", opledger.ClaimOptions{})
			require.NoError(t, err, "tried again once the lock is gone")
			require.Equal(t, 1, c.Operation.AttemptCount)
		})
	}
}

// openBusyLedger opens a ledger on a new store of st that gives up on
// another process's lock after 100 ms, and returns its DSN.
func openBusyLedger(t *testing.T, st testdb.Store) (*opledger.Ledger, string) {
	t.Helper()
	dsn := st.NewDSN(t)
	if st.Name == "postgres" {
		dsn += "&lock_timeout=100ms"
	}
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, dsn
}
